"""Guard bands: proof that a kernel reads and writes only where it should.

Two kinds, one sentinel. ``Guarded``: a buffer the check hands the kernel (notebook 06), the
tensor inside a flat buffer with ``GUARD`` elements of a fill on each side (poison around an
input, the sentinel around an output) and, for 2-D tensors, padding columns past each row.
``guarded_allocations``: the tensors the learner's launcher allocates itself (07, 09).

A store without its mask (the rows of a prefill tile past the last new token, say) writes past
the end of the output. In Triton's interpreter that may crash the process, or may not; on a GPU
it silently overwrites whatever lies next in memory. So while a check calls the launcher, every
``torch.empty`` / ``empty_like`` / ``zeros`` / ``zeros_like`` it makes returns a view into a
larger buffer: a band of ``SENTINEL`` values before and after the tensor, and, for ``empty``,
the tensor itself filled with ``SENTINEL`` too (so that a value the kernel never wrote can be
recognised). After the call ``report()`` says which bands changed.

Use only where the launcher runs in a child process or a throwaway call: the patch is global
for the duration of the ``with`` block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from ..device import DEVICE

__all__ = ["GUARD", "SENTINEL", "Allocation", "Allocations", "Guarded", "guarded_allocations"]

# What an output holds where the kernel must not (or did not) write: exactly representable in
# float16, bfloat16, float32 and the integer types; unlikely as a result.
SENTINEL = 1234.0
GUARD = 8  # poisoned or sentinel elements on each side of a buffer the check hands the kernel
_MIN_BAND = 256  # elements; at least as large as the tensor itself, rounded to 64 (256 bytes for fp32)


@dataclass(frozen=True)
class Guarded:
    """A tensor the learner sees (``inner``) inside a flat buffer with ``GUARD`` elements each side.

    2-D tensors are laid out with ``row_stride`` >= their row length; the extra columns belong to
    the buffer, not to the tensor, and hold the same fill as the guard bands.
    """

    buffer: torch.Tensor  # [GUARD + rows * row_stride + GUARD], flat
    shape: tuple[int, ...]
    row_stride: int

    @classmethod
    def around(cls, values: torch.Tensor, fill: float, extra_columns: int = 0) -> Guarded:
        rows, columns = (1, values.shape[0]) if values.dim() == 1 else values.shape
        row_stride = columns + extra_columns
        buffer = torch.full((GUARD + rows * row_stride + GUARD,), fill, dtype=values.dtype)
        grid = buffer[GUARD : GUARD + rows * row_stride].view(rows, row_stride)  # [rows, row_stride]
        grid[:, :columns] = values.reshape(rows, columns)
        return cls(buffer.to(DEVICE), tuple(values.shape), row_stride)

    @property
    def inner(self) -> torch.Tensor:
        if len(self.shape) == 1:
            return self.buffer[GUARD : GUARD + self.shape[0]]
        rows, columns = self.shape
        return self.buffer[GUARD : GUARD + rows * self.row_stride].view(rows, self.row_stride)[:, :columns]

    def inner_of(self, buffer_after: torch.Tensor) -> torch.Tensor:
        """The tensor's elements in ``buffer_after`` (the buffer as the kernel left it)."""
        return Guarded(buffer_after, self.shape, self.row_stride).inner

    def outside_writes(self, buffer_after: torch.Tensor, fill: float) -> list[int]:
        """Offsets (relative to the tensor's first element) outside the tensor that no longer hold ``fill``."""
        inside = torch.zeros_like(buffer_after, dtype=torch.bool)
        rows = 1 if len(self.shape) == 1 else self.shape[0]
        columns = self.shape[-1]
        inside[GUARD : GUARD + rows * self.row_stride].view(rows, self.row_stride)[:, :columns] = True
        changed = (buffer_after != fill) & ~inside
        return [int(i) - GUARD for i in torch.nonzero(changed).flatten()]


@dataclass
class Allocation:
    """One guarded tensor: ``buffer[band : band + numel]`` is the tensor, the rest are bands."""

    buffer: torch.Tensor
    band: int
    shape: tuple[int, ...]

    @property
    def tensor(self) -> torch.Tensor:
        numel = 1
        for size in self.shape:
            numel *= size
        return self.buffer[self.band : self.band + numel].view(self.shape)

    def written_outside(self) -> tuple[int, int]:
        """(values changed in the band before, values changed in the band after)."""
        numel = self.tensor.numel()
        before = self.buffer[: self.band]
        after = self.buffer[self.band + numel :]
        return int((before != SENTINEL).sum()), int((after != SENTINEL).sum())


@dataclass
class Allocations:
    made: list[Allocation] = field(default_factory=list)

    def report(self, result: object) -> list[dict]:
        """One entry per guarded tensor whose bands changed: its shape, dtype, counts, and
        whether it is the tensor the launcher returned."""
        found = []
        for allocation in self.made:
            before, after = allocation.written_outside()
            if before or after:
                is_result = isinstance(result, torch.Tensor) and result.data_ptr() == allocation.tensor.data_ptr()
                found.append(
                    {
                        "shape": allocation.shape,
                        "dtype": str(allocation.buffer.dtype).removeprefix("torch."),
                        "before": before,
                        "after": after,
                        "is_result": is_result,
                    }
                )
        return found


def _guarded(template: torch.Tensor, body: str, allocations: Allocations) -> torch.Tensor:
    numel = template.numel()
    band = -(-max(numel, _MIN_BAND) // 64) * 64
    buffer = torch.full((2 * band + numel,), SENTINEL, dtype=template.dtype, device=template.device)
    allocation = Allocation(buffer, band, tuple(template.shape))
    if body == "zeros":
        allocation.tensor.zero_()
    allocations.made.append(allocation)
    return allocation.tensor


@contextlib.contextmanager
def guarded_allocations() -> Iterator[Allocations]:
    """Within the block, torch.empty/empty_like/zeros/zeros_like return guarded tensors (contiguous,
    of the asked shape, dtype and device). Other arguments (memory_format, ...) give a plain tensor."""
    allocations = Allocations()
    originals = {name: getattr(torch, name) for name in ("empty", "empty_like", "zeros", "zeros_like")}

    def wrap(name: str):
        original = originals[name]
        body = "zeros" if name.startswith("zeros") else "sentinel"

        def allocate(*args, **kwargs):
            plain = original(*args, **kwargs)
            if set(kwargs) - {"dtype", "device", "size"} or plain.dtype == torch.bool or plain.numel() == 0:
                return plain
            return _guarded(plain, body, allocations)

        return allocate

    for name in originals:
        setattr(torch, name, wrap(name))
    try:
        yield allocations
    finally:
        for name, original in originals.items():
            setattr(torch, name, original)
