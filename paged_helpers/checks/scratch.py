"""Logits through a learner's cache against a from-scratch run: one tolerance policy for every check.

The same model computes the same logits with and without a paged cache, up to the order in which
sums are taken. On a CPU in float32 the differences seen are about 1e-6; a GPU's kernels (TF32
matrix products, other reduction orders) differ more. In half precision the logits themselves are
rounded: bfloat16 keeps 8 bits of mantissa, so a logit near 4 moves in steps of 1/32, and two
correct runs that sum in different orders differ by a step or two. A NaN anywhere is a mismatch,
never a pass.
"""

from __future__ import annotations

import torch

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
