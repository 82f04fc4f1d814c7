"""What the paged attention checks (notebooks 07 and 09) say when an output is wrong.

The output of a kernel or a launcher is compared with the float64 reference at ``TOLERANCES``
(by input dtype). When it differs, ``explain_mismatch`` recomputes the scenario as each classic
bug of ``bugs`` would and names the one the output matches; otherwise it speaks of NaN, or of the
largest difference with the general hint. The context hints say what the scenario is about (scores
far below zero, stale slots holding NaN, half precision, split-K's merge) and open those messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..reading.strict import strict_allclose
from ..speaking.failure import fail
from .attention_inputs import NEGATIVE_SCORE, DecodeCase
from .bugs import Bug

# (atol, rtol) of the learner's output against the float64 reference, by input dtype.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (4e-2, 4e-2),
}

# What the check fills an output with before the kernel runs: a value no scenario's answer holds.
UNWRITTEN = 1234.0

DECODE_AXES = ("sequence", "query head", "dim")
PREFILL_AXES = ("new token", "query head", "dim")


def dtype_word(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, equal_nan: bool = False) -> bool:
    atol, rtol = TOLERANCES[dtype]
    return strict_allclose(got, expected, atol=atol, rtol=rtol, equal_nan=equal_nan)


def worst(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, str, str]) -> str:
    """Where the outputs differ most, in the learner's terms (axes names the three dimensions)."""
    error = (got - expected).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
    where = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    return (
        f"largest difference {float(error.max()):.3g} at {where}: {float(got[index]):.5g} instead of "
        f"{float(expected[index]):.5g}"
    )


def explain_mismatch(
    scenario: str,
    got: torch.Tensor,
    expected: torch.Tensor,
    dtype: torch.dtype,
    bugs: tuple[Bug, ...],
    recompute: Callable[[Bug], torch.Tensor | None],
    fallback_hint: str,
    axes: tuple[str, str, str],
    context_hint: str = "",
) -> None:
    """Fail with the name of the bug the output matches, else with the general hint.

    ``context_hint`` (what this scenario is about) opens the NaN and the general hints.
    """
    for bug in bugs:
        answer = recompute(bug)
        if (
            answer is not None
            and not close(answer, expected, dtype, equal_nan=True)
            and close(got, answer, dtype, equal_nan=True)
        ):
            fail(
                scenario,
                "the reference output (gather the history, then plain attention)",
                "what that computation gives with one classic mistake, named below",
                bug.diagnosis,
            )
    if not torch.isfinite(got).all():
        fail(
            scenario,
            "finite numbers",
            f"{int((~torch.isfinite(got)).sum())} NaN or inf values",
            context_hint
            + "NaN comes from exp of a huge score (subtract the running max before exp), from 0 / 0 when a "
            "row saw no valid key, from -inf - -inf when a whole block was masked before any valid key, or "
            "from a value loaded without a mask where the memory holds NaN (0 x NaN = NaN).",
        )
    fail(
        scenario,
        "the reference output (gather the history, then plain attention)",
        worst(got, expected, axes),
        context_hint + fallback_hint,
    )


def judge_unwritten(scenario: str, got: torch.Tensor, who: str) -> None:
    """Every output value written (none still ``UNWRITTEN``)."""
    never_written = int((got == UNWRITTEN).sum())
    if never_written:
        fail(
            scenario,
            f"every one of the {got.numel()} output values written by {who}",
            f"{never_written} values never written (they still hold {UNWRITTEN:g}, what the check filled the "
            "output with)",
            "every (sequence or new token, query head) must have a program that stores its whole row of "
            "head_dim values: compare the grid with the output's shape, and the store's mask with the rows "
            "that exist.",
        )


def negative_hint(case) -> str:
    if not case.negative_scores:
        return ""
    return (
        f"Every score here is far below zero (about {NEGATIVE_SCORE:g}), where exp(score) is 0 in float32. "
        "The running max must start at -inf: started at 0, exp(score - m) is 0 for every key, l stays 0 "
        "and the output is 0 / 0. "
    )


def stale_hint(case) -> str:
    if case.stale != "nan":
        return ""
    return (
        "Here the slots past the end of the sequence hold NaN: any value loaded from them without a mask "
        "poisons the sums, even with a weight of exactly 0 (0 x NaN = NaN). "
    )


def dtype_hint(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return ""
    return (
        f" In {dtype_word(dtype)}: convert what you load with .to(tl.float32), keep m, l and acc in float32, "
        "and convert only the stored output to the output's dtype."
    )


# --------------------------------------------------------------------------- general hints

PAGED_ADDRESSES = (
    "In a paged kernel a key's address is block * s_pool_block + kv_head * s_pool_head + slot * s_pool_slot + "
    "dim, with the block read from this sequence's row of the table."
)

DECODE_HINT = (
    "Compare your kernel with the reference on this scenario alone. Check, in order: the physical block "
    "from the table, the key/value addresses (block * s_pool_block + kv_head * s_pool_head + slot * "
    "s_pool_slot + dim), the mask of the last block (for K and V), the scale, and the online-softmax "
    "update (m, l, acc)."
)

PREFILL_HINT = (
    "Compare your kernel with the reference on this scenario alone. Check, in order: the query positions "
    "(start + row), the loop over blocks from logical block 0 up to the block of the tile's last position, "
    "the causal mask (key_position <= query_position), the rows past the last new token (masked on load "
    "and store), the scale, and the online-softmax update."
)


LAUNCHER_HINT = (
    "Your kernel is judged by its own check; this one calls your launcher. If the kernel's check passes, "
    "look at what the launcher hands it: the grid (one program per (sequence, query head)), the group "
    "(q_heads // kv_heads), the scale (1 / sqrt(head_dim)), the strides (k_pool.stride(0), (1), (2)) and "
    "the constexprs D and BLOCK."
)


PREFILL_LAUNCHER_HINT = (
    "Your kernel is judged by its own check; this one calls your launcher. If the kernel's check passes, "
    "look at what the launcher hands it: the grid (cdiv(new_tokens, TILE) tiles x query heads), start and "
    "new_tokens, the group, the scale, the strides and the constexprs D, BLOCK and TILE."
)


def split_hint(case: DecodeCase) -> str:
    if case.splits == 1:
        return "With one split the answer is plain decode attention, so the bug is in the per-split kernel."
    merge = (
        "Merging splits: with per-split (m_s, l_s, acc_s) and m = max over s of m_s, "
        "out = sum(exp(m_s - m) acc_s) / sum(exp(m_s - m) l_s). Averaging per-split outputs is not the same."
    )
    # Fewer blocks than splits: however the blocks are shared out, some splits get none.
    if any(-(-length // case.block_size) < case.splits for length in case.lengths):
        return (
            f"{merge} Here some splits own no block: their m is -inf and l is 0, so they must get weight "
            "exp(m_s - m) = 0 in the merge (never compute exp(-inf - -inf))."
        )
    return merge
