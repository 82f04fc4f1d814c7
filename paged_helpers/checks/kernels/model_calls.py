"""How the kernel path's check sees the learner's launchers inside the model: every call recorded.

The model calls ``paged_decode_attention`` and ``paged_prefill_attention`` once per layer through
``RecordedKernels.attention()``; each call's inputs (cloned before the call), its answer and every
layer's pools at that moment are kept as a ``KernelCall``, so that a wrong step's message can name
the call that answered wrongly (``model_path_diagnosis``). In the lab the launcher runs in this
process, where a call of the gather reference is caught (``reference_calls``); when grading it runs
in a child of the learner's process (``run_remote``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ...model import PagedAttention
from ..reading.calls import call_learner
from ..reading.learner_code import is_remote, run_apart
from ..reading.strict import refuse_odd_value, torch_unhooked
from ..speaking.failure import NotImplementedYet, fail
from .paged_attention import TIME_LIMIT_S


@dataclass
class KernelCall:
    """One kernel call the model made: the inputs as the kernel got them, its answer, every layer's pools."""

    kind: str  # "decode" or "prefill"
    layer: int | None
    args: tuple
    out: torch.Tensor
    pools: list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class RecordedKernels:
    """The learner's two launchers as the model sees them: each call checked and recorded."""

    decode: Callable
    prefill: Callable
    cache: Any
    calls: list[KernelCall] = field(default_factory=list)
    scenario: str = ""

    def attention(self) -> PagedAttention:
        return PagedAttention(
            decode=lambda *args: self._call("decode", self.decode, args),
            prefill=lambda *args: self._call("prefill", self.prefill, args),
        )

    def _pools(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        with torch_unhooked():
            return [
                (k.detach().clone(), v.detach().clone())
                for k, v in zip(self.cache.k_pool, self.cache.v_pool, strict=True)
            ]

    def _layer(self, k_pool: torch.Tensor) -> int | None:
        """Which layer's pool the model handed over (the cache's own tensor, not a copy)."""
        with torch_unhooked():
            for layer, pool in enumerate(self.cache.k_pool):
                if isinstance(pool, torch.Tensor) and pool.data_ptr() == k_pool.data_ptr():
                    return layer
        return None

    def _call(self, kind: str, launcher: Callable, args: tuple) -> torch.Tensor:
        what = f"paged_{kind}_attention"
        with torch_unhooked():
            inputs = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
        pools = self._pools()
        if is_remote(launcher):  # graded: it runs in the learner's process, in a child of its own there
            out = run_remote(what, launcher, args, self.scenario)
        else:
            with reference_calls() as counted:
                out = call_learner(what, launcher, *args, scenario=self.scenario)
            if counted["calls"]:
                fail(
                    f"{self.scenario}: {what} in the model",
                    "attention computed by your Triton kernel, reading the pool in place",
                    "a call of the gather-then-attend reference (paged_helpers.reference)",
                    "the point of the kernel path is that nothing gathers: launch your kernel instead (when "
                    "graded, the reference is not there at all)",
                )
        if isinstance(out, torch.Tensor):
            with torch_unhooked():
                self.calls.append(KernelCall(kind, self._layer(args[1]), inputs, out.detach().clone(), pools))
        return out


def run_remote(what: str, launcher: Any, args: tuple, scenario: str) -> Any:
    """One launcher call in the learner's process, in a child there (a crash becomes a message)."""
    outcome = run_apart(launcher, args, TIME_LIMIT_S)
    if outcome.not_implemented:
        raise NotImplementedYet(f"not implemented yet: {what} raised NotImplementedError.")
    if outcome.kind != "returned":
        why = f"{outcome.error_type}: {outcome.error_message}" if outcome.kind == "raised" else outcome.kind
        fail(
            f"{scenario}: {what} in the model",
            "a call that returns the attention output",
            why,
            "the lines of your launcher and kernel named in the message show where it happened",
        )
    return refuse_odd_value(outcome.value, f"what {what} returned", scenario)


class reference_calls:  # noqa: N801 (a context manager used like a function)
    """Counts calls of the gather reference in this process (the lab's: when grading, the learner's
    process has no reference to call, so a launcher that calls it fails there the same way)."""

    def __enter__(self) -> dict[str, int]:
        from ...reference import attention

        self.counted, self._attention, self._gather = {"calls": 0}, attention, attention.gather_history
        counted, gather = self.counted, self._gather

        def counting_gather(*args, **kwargs):
            counted["calls"] += 1
            return gather(*args, **kwargs)

        attention.gather_history = counting_gather
        return self.counted

    def __exit__(self, *exc: object) -> None:
        self._attention.gather_history = self._gather
