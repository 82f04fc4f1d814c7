"""Logits through a learner's cache against a from-scratch run: one tolerance policy for every check.

The same model computes the same logits with and without a paged cache, up to the order in which
sums are taken. On a CPU in float32 the differences seen are about 1e-6; a GPU's kernels (TF32
matrix products, other reduction orders) differ more. In half precision the logits themselves are
rounded: bfloat16 keeps 8 bits of mantissa, so a logit near 4 moves in steps of 1/32, and two
correct runs that sum in different orders differ by a step or two. A NaN anywhere is a mismatch,
never a pass.

``forward_through_cache`` runs one step of the model on a learner's cache, and
``expect_from_scratch`` holds its logits to this policy: the checks that run the tiny Qwen3 on a
learner's cache (notebooks 03 and 04) compare through these two, never by hand.
"""

from __future__ import annotations

from typing import Any

import torch

from ..speaking.failure import Hint, fail
from .calls import call_learner

CPU_TOLERANCE = 1e-4
GPU_TOLERANCE = 2e-3
# Half-precision logits: a few rounding steps of the format at the logits' magnitude (a few units).
HALF_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 6e-2}


def logit_tolerance(device: torch.device | str, dtype: torch.dtype = torch.float32) -> float:
    """The largest |difference| from a from-scratch run that still counts as equal on ``device`` in ``dtype``."""
    if dtype in HALF_TOLERANCE:
        return HALF_TOLERANCE[dtype]
    return CPU_TOLERANCE if torch.device(device).type == "cpu" else GPU_TOLERANCE


def logit_gap(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got - expected| in float32 (NaN if either holds a NaN)."""
    with torch._C.DisableTorchFunction():  # a learner's tensor subclass or mode cannot answer here
        difference = (got.detach().float().cpu() - expected.detach().float().cpu()).abs()
        return float("nan") if torch.isnan(difference).any() else float(difference.max())


def logits_match(gap: float, device: torch.device | str, dtype: torch.dtype = torch.float32) -> bool:
    """Whether a gap from ``logit_gap`` is within the tolerance of ``device`` and ``dtype`` (NaN never is)."""
    return gap <= logit_tolerance(device, dtype)


def forward_through_cache(
    model: Any, cache: Any, batch: dict, starts: list[int], *, scenario: str, attention: Any = None
) -> torch.Tensor:
    """One forward pass of ``model`` on the learner's ``cache``: logits [B, T, vocab].

    ``batch`` maps each sequence of the batch, in row order, to its T new token ids (the same T
    for every row); ``starts[row]`` is the position of that row's first new token. The cache must
    already have room for them (reserve) and know the batch (set_batch). ``attention`` is the
    model's switch to the kernel path (``model.PagedAttention``); None gathers through ``update``.
    """
    rows = list(batch.values())
    positions = [[start + t for t in range(len(row))] for start, row in zip(starts, rows, strict=True)]
    switch = {} if attention is None else {"attention": attention}
    with torch.no_grad():
        return call_learner(
            "the model's forward pass through your cache"
            + ("" if attention is None else " and your kernels"),
            model,
            torch.tensor(rows, device=model.device),
            torch.tensor(positions, device=model.device),
            cache=cache,
            scenario=scenario,
            **switch,
        )


def expect_from_scratch(model: Any, tokens: list[int], got: torch.Tensor, *, scenario: str, hint: Any) -> None:
    """``got`` [T, vocab], the logits of the last T of ``tokens`` through a cache, must equal a
    from-scratch run of ``tokens`` within the tolerance of the model's device and the logits' dtype.

    ``hint`` is a str or ``Hint``, or a function returning one (called only on a mismatch, to name
    the likely bug from the state of the cache).
    """
    expected = model.logits_from_scratch([tokens])[0][len(tokens) - got.shape[0] :]
    gap = logit_gap(got, expected)
    if not logits_match(gap, model.device, got.dtype):
        fail(
            scenario,
            f"the logits of running its {len(tokens)} tokens from scratch "
            f"(within {logit_tolerance(model.device, got.dtype)})",
            f"max |difference| {gap:.3g}",
            hint if isinstance(hint, (str, Hint)) else hint(),
        )
