"""Guard bands around the tensors a learner's launcher allocates: proof that a kernel writes only
where it should.

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

__all__ = ["SENTINEL", "Allocation", "Allocations", "guarded_allocations"]

# Exactly representable in float16, bfloat16, float32 and the integer types; unlikely as a result.
SENTINEL = 1234.0
_MIN_BAND = 256  # elements; at least as large as the tensor itself, rounded to 64 (256 bytes for fp32)


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
