"""The one launch watcher: what a learner's launcher did while a check called it.

Triton launches go through ``KernelInterface.__getitem__`` (``kernel[grid]``); for one call of
the launcher the watcher counts them, tells Triton's own kernels from look-alikes
(``genuine_triton_kernel``), snapshots the tensors each launch received (so a check can tell an
output written by a kernel from one computed around it), surrounds the launcher's allocations
with guard bands and marks its float inputs as values only a kernel may read.

It runs where the launcher runs: in the lab, in the forked child of ``isolated``; when grading,
in the learner's process (``paged_helpers.learner_view``), which sends back only what it found,
as plain data. There it is detection, never proof: code in that process can change it, and the
checks that decide the verdict judge the outputs themselves.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from .guard_bands import guarded_allocations
from .launcher_reads import launcher_inputs

__all__ = ["LaunchedTensors", "class_attribute", "class_mro", "genuine_triton_kernel", "watched", "watched_call"]


def class_mro(kind: type) -> tuple[type, ...]:
    return type.__dict__["__mro__"].__get__(kind)


def class_attribute(kind: type, name: str) -> Any:
    """``kind``'s attribute ``name`` as the MRO's dictionaries hold it (no metaclass code runs)."""
    for klass in class_mro(kind):
        namespace = type.__dict__["__dict__"].__get__(klass)
        if name in namespace:
            return namespace[name]
    return None


def _reference_attention():
    """The gather reference's module, to count calls of it, if anything imported it (a launcher can
    only call what was imported); None otherwise, and in the learner's process when grading, which
    holds no reference. Looked up, not imported: this layer knows nothing of the references."""
    attention = sys.modules.get(__name__.rsplit(".", 2)[0] + ".reference.attention")
    return attention if hasattr(attention, "gather_history") else None


def genuine_triton_kernel(kernel: Any) -> bool:
    """Whether a launched object is Triton's own kernel (jit, interpreter, autotuner), with Triton's own
    ``run`` and ``__call__``: a kernel object of the learner's class, or one whose ``run`` was replaced,
    could compute the answer in Python while it "launches"."""
    triton = sys.modules.get("triton")
    if triton is None:
        return False
    root = os.path.dirname(os.path.abspath(triton.__file__)) + os.sep
    kind = type(kernel)
    if not str(type.__dict__["__module__"].__get__(kind)).startswith("triton."):
        return False
    for name in ("run", "__call__"):
        function = class_attribute(kind, name)
        code = getattr(function, "__code__", None)
        if code is not None and not os.path.abspath(code.co_filename).startswith(root):
            return False
    return True


def watched(launcher: Callable) -> Callable:
    """The launcher, counting Triton kernel launches and calls of the gather reference while it runs,
    with guard bands around every tensor it allocates (see ``guard_bands``).

    Returns (result, launches, reference_calls, band_report). The counters and the guarded
    allocator are patched in only for the call (in the child process, when isolated), and always
    restored.
    """

    def call(*args):
        from triton.runtime import jit

        attention = _reference_attention()
        counts = {"launches": 0, "reference": 0, "not_triton": 0}
        original_getitem = jit.KernelInterface.__getitem__
        original_gather = attention.gather_history if attention is not None else None
        seen = LaunchedTensors()

        def counting_getitem(kernel, grid):
            counts["launches"] += 1
            counts["not_triton"] += not genuine_triton_kernel(kernel)
            return seen.watch(original_getitem(kernel, grid))

        def counting_gather(*gather_args, **gather_kwargs):
            counts["reference"] += 1
            return original_gather(*gather_args, **gather_kwargs)

        jit.KernelInterface.__getitem__ = counting_getitem
        if attention is not None:
            attention.gather_history = counting_gather
        try:
            with guarded_allocations() as allocations, launcher_inputs(args):
                result = launcher(*args)
        finally:
            jit.KernelInterface.__getitem__ = original_getitem
            if attention is not None:
                attention.gather_history = original_gather
        provenance = {**seen.provenance(result), "not_triton": counts["not_triton"]}
        return result, counts["launches"], counts["reference"], allocations.report(result), provenance

    return call


class LaunchedTensors:
    """The tensors handed to Triton launches, as they were before the first and after the last launch.

    Proof that the returned output was written by a kernel: it (or a dtype cast of it) must be a
    tensor some launch received, unchanged since the last launch that received it; and what it
    held before the first launch comes back to the check, which refuses an output that already
    held the answer (numpy or Python arithmetic in the launcher, then a do-nothing launch).
    """

    def __init__(self) -> None:
        self.before: dict[int, torch.Tensor] = {}
        self.after: dict[int, torch.Tensor] = {}
        self.tensors: dict[int, torch.Tensor] = {}

    def watch(self, launch: Callable) -> Callable:
        def run(*args, **kwargs):
            tensors = [a for a in (*args, *kwargs.values()) if type(a) is torch.Tensor]
            with torch._C.DisableTorchFunction():
                for tensor in tensors:
                    self.tensors.setdefault(id(tensor), tensor)
                    self.before.setdefault(id(tensor), tensor.detach().clone())
                returned = launch(*args, **kwargs)
                for tensor in tensors:
                    self.after[id(tensor)] = tensor.detach().clone()
            return returned

        return run

    def provenance(self, result: object) -> dict:
        """{"written": bool, "why": str, "before": the output before the first launch (or None)}."""
        if type(result) is not torch.Tensor:
            return {"written": True, "why": "", "before": None}  # the shape/type message comes first
        with torch._C.DisableTorchFunction():
            candidates = []
            for key, tensor in self.tensors.items():
                if tensor.shape != result.shape:
                    continue
                same_memory = tensor.data_ptr() == result.data_ptr() and tensor.stride() == result.stride()
                candidates.append((not same_memory, key))
            for _, key in sorted(candidates):
                after = self.after[key].to(result.dtype)
                if torch.equal(torch.nan_to_num(after, nan=0.5), torch.nan_to_num(result.detach(), nan=0.5)):
                    return {"written": True, "why": "", "before": self.before[key].to(result.dtype).cpu()}
            if candidates:
                why = "it changed after your kernel's last launch that received it"
            else:
                why = "no Triton launch received it (nor a tensor of its shape)"
            return {"written": False, "why": why, "before": None}


def watched_call(launcher: Callable, args: tuple, buffers: tuple[torch.Tensor, ...]) -> Callable[[], tuple]:
    """A call of the launcher that also counts Triton launches and returns the output buffers whole
    (``buffers``: the whole tensors the outputs in ``args`` are views of, guard bands included)."""

    def call():
        from triton.runtime import jit

        launches = 0
        original = jit.KernelInterface.__getitem__
        # The output buffers just before the first launch and just after the last one: the kernel's
        # own writes lie between, so any other change to them was made outside the kernel.
        first_before: list[tuple] = []
        last_after: list[tuple] = []
        not_triton: list[str] = []

        def snapshot() -> tuple:
            with torch._C.DisableTorchFunction():
                return tuple(buffer.detach().clone() for buffer in buffers)

        def counting(kernel, grid):
            nonlocal launches
            launches += 1
            if not genuine_triton_kernel(kernel):
                not_triton.append(type(kernel).__name__)
            launch = original(kernel, grid)

            def run(*launch_args, **launch_kwargs):
                if not first_before:
                    first_before.append(snapshot())
                returned = launch(*launch_args, **launch_kwargs)
                last_after[:] = [snapshot()]
                return returned

            return run

        jit.KernelInterface.__getitem__ = counting
        try:
            with launcher_inputs(args):
                returned = launcher(*args)
        finally:
            jit.KernelInterface.__getitem__ = original
        return (
            returned,
            launches,
            tuple(buffers),
            first_before[0] if first_before else None,
            last_after[0] if last_after else None,
            bool(not_triton),
        )

    return call
