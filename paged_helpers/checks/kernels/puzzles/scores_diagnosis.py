"""What puzzles 6 to 8 say when their kernel is wrong: one block's scores, online attention, causal scores.

The same ``puzzle_judge.Diagnosis`` questions as puzzles 1 to 5, for the moves of notebooks 07 and 09
one at a time; their answers are compared at the scores' tolerance (``puzzle_judge.scores_close``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...speaking.failure import fail
from .puzzle_cases import AttentionCase, CausalCase
from .puzzle_judge import Attempt, Diagnosis, Mistakes, describe_scores
from .puzzle_mistakes import block_scores_as, causal_as, online_as

_NOT_SCALED = "the scores are not multiplied by scale (1/sqrt(head_dim)): s = tl.sum(k * q[None, :], axis=1) * scale."


@dataclass(frozen=True)
class BlockScoresDiagnosis(Diagnosis):
    """Puzzle 6: scale * (q . k[i]) for the ``length`` keys of ``k``, -inf for the slots past it."""

    q: torch.Tensor
    k: torch.Tensor
    block: int
    scale: float

    def unwritten(self, attempt: Attempt) -> None:
        length, capacity = self.k.shape[0], attempt.got.numel()
        missing = [int(i) for i in torch.nonzero(attempt.unwritten).flatten()]
        if min(missing) >= length:
            fail(
                attempt.scenario,
                attempt.shown,
                f"out[{missing[0]}] and on (slots past the length) never written",
                "store the whole block, masked slots included: their score is -inf (s = tl.where(valid, s, "
                "-float('inf'))), so that exp(score - m) makes them 0 in a softmax.",
            )
        fail(
            attempt.scenario,
            attempt.shown,
            f"{len(missing)} of the {capacity} scores never written (first: out[{missing[0]}])",
            "program b handles block b: rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), and it stores "
            "out_ptr + rows.",
        )

    def mistakes(self, attempt: Attempt) -> Mistakes:
        q, k, block, scale = self.q, self.k, self.block, self.scale
        return (
            (
                block_scores_as(q, k, block, scale, "zero"),
                "the slots past the length kept the score of the zero key the masked load gave them (0). A score "
                "of 0 would take part in a softmax: give them -inf, s = tl.where(valid, s, -float('inf')).",
            ),
            (block_scores_as(q, k, block, scale, "no scale"), _NOT_SCALED),
            (
                block_scores_as(q, k, block, scale, "summed over slots"),
                "the product was summed over the slots (axis 0), giving one number per column of head_dim. A "
                "score is the sum over head_dim of one key's row: tl.sum(k * q[None, :], axis=1), shape [BLOCK].",
            ),
            (
                block_scores_as(q, k, block, scale, "q along the slots"),
                "q was stood along the slots (q[:, None], shape [D, 1]), so row s was multiplied by q[s]. q must "
                "run along the columns of the [BLOCK, D] block: q[None, :], shape [1, D].",
            ),
        )

    def odd_values(self, attempt: Attempt) -> None:
        out = attempt.got
        if bool(torch.isnan(out).any()):
            fail(
                attempt.scenario,
                attempt.shown,
                f"NaN at out[{int(torch.nonzero(torch.isnan(out))[0])}]",
                "a score of NaN comes from a lane that loaded what is not a key: load k with mask=valid[:, None], "
                "other=0.0, and q with its D lanes (tl.arange(0, D)).",
            )

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        return (
            describe_scores(attempt.got, attempt.expected, ("slot",)),
            "key i of block b is row b * BLOCK + i of k, at k_ptr + (b * BLOCK + i) * D: load the [BLOCK, D] block "
            "rows[:, None] * D + rd[None, :], multiply by q[None, :], sum along axis 1, times scale.",
        )


# What NaN or inf in puzzle 7's output means, by the case's profile of scores.
_NOT_FINITE_HINTS = {
    "negative": "every score here is far below zero, where exp(score) underflows to 0: take exp of the "
    "score minus the running max, p = tl.exp(s - m_new), and start that max at -inf (started at 0, m "
    "stays 0, exp(s - m) is 0 for every key, l stays 0 and out is 0 / 0).",
    "huge": "the scores here are huge, and exp of such a score overflows: subtract the running max before "
    "exp, p = tl.exp(s - m_new) and alpha = tl.exp(m - m_new).",
}
_NOT_FINITE_HINT = (
    "NaN comes from exp of a huge score (subtract the running max), from 0 / 0 (l never grew), or "
    "from a lane that loaded what is not a key or a value (mask k and v with valid[:, None])."
)


@dataclass(frozen=True)
class AttentionDiagnosis(Diagnosis):
    """Puzzle 7: softmax(``scores``) @ ``v``, the scores already scaled (by ``scale``)."""

    case: AttentionCase
    scores: torch.Tensor
    v: torch.Tensor
    scale: float

    def unwritten(self, attempt: Attempt) -> None:
        fail(attempt.scenario, attempt.shown,
             f"{int(attempt.unwritten.sum())} of the {self.case.head_dim} values of out never written",
             "store the whole row once the loop is over: tl.store(out_ptr + rd, acc / l).")  # fmt: skip

    def mistakes(self, attempt: Attempt) -> Mistakes:
        scores, v, block = self.scores, self.v, self.case.block
        return (
            (
                online_as(scores, v, block, "nothing rescaled"),
                "neither l nor acc was rescaled when a later block raised the max: both count in units of "
                "exp(m), and when m grows to m_new they must be multiplied by alpha = exp(m - m_new) before the "
                "block's terms are added.",
            ),
            (
                online_as(scores, v, block, "acc not rescaled"),
                "l was rescaled when the max grew, but acc was not: acc = acc * alpha + tl.sum(p[:, None] * v, "
                "axis=0), the same alpha = exp(m - m_new) as for l.",
            ),
            (
                online_as(scores, v, block, "l not rescaled"),
                "acc was rescaled when the max grew, but l was not: l = l * alpha + tl.sum(p, axis=0).",
            ),
            (
                online_as(scores, v, block, "zero"),
                "the slots past the length took part in the softmax with a score of 0 (their masked keys are 0): "
                "give them -inf, s = tl.where(valid, s, -float('inf')), so that exp(s - m) is 0 there.",
            ),
            (
                online_as(scores, v, block, "not divided"),
                "out holds acc, the weighted sum, not the average: store acc / l.",
            ),
            ((torch.softmax(scores / self.scale, dim=0) @ v.double()).float(), _NOT_SCALED),
        )

    def odd_values(self, attempt: Attempt) -> None:
        out = attempt.got
        if not torch.isfinite(out).all():
            hint = _NOT_FINITE_HINTS.get(self.case.profile, _NOT_FINITE_HINT)
            fail(attempt.scenario, attempt.shown, f"{int((~torch.isfinite(out)).sum())} NaN or inf values", hint)

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        return (
            describe_scores(attempt.got, attempt.expected, ("column",)),
            "per block: s = scale * scores of the block, -inf past the length; m_new = max(m, max(s)); "
            "alpha = exp(m - m_new); p = exp(s - m_new); l = l * alpha + sum(p); acc = acc * alpha + "
            "sum(p[:, None] * v, axis=0); m = m_new. At the end, out = acc / l.",
        )


@dataclass(frozen=True)
class CausalDiagnosis(Diagnosis):
    """Puzzle 8: the [new_tokens, start + new_tokens] scores of ``case``, -inf in each query's future."""

    case: CausalCase
    q: torch.Tensor
    k: torch.Tensor
    scale: float

    def unwritten(self, attempt: Attempt) -> None:
        t, j = (int(i) for i in torch.nonzero(attempt.unwritten)[0])
        fail(
            attempt.scenario,
            attempt.shown,
            f"{int(attempt.unwritten.sum())} scores never written (first: out[{t}, {j}])",
            "every program stores its whole [TILE, BLOCK] tile at out_ptr + rows[:, None] * (start + new_tokens) "
            "+ keys[None, :] (a row of out holds a score for every key), -inf included (a key in a row's future "
            "still needs its -inf), masked only where a row or a key does not exist: "
            "mask=(rows < new_tokens)[:, None] & (keys < start + new_tokens)[None, :].",
        )

    def mistakes(self, attempt: Attempt) -> Mistakes:
        q, k, start, scale = self.q, self.k, self.case.start, self.scale
        return (
            (
                causal_as(q, k, start, scale, "rows"),
                f"the mask compared key positions with row numbers t: new token t sits at position start + t (here "
                f"{start} + t), and may see every key up to there, the whole history included. Mask with "
                "keys[None, :] <= (start + rows)[:, None].",
            ),
            (
                causal_as(q, k, start, scale, "strict"),
                "each query did not see its own key: a token attends to itself. The mask is key position <= query "
                "position (<=, not <).",
            ),
            (
                causal_as(q, k, start, scale, "one past"),
                "each query also saw the next position, its future: the mask is key position <= query position.",
            ),
            (
                causal_as(q, k, start, scale, "zero"),
                "masked scores were stored as 0: a score of 0 would take part in a softmax. Masked scores are "
                "-inf: tl.where(causal, s, -float('inf')).",
            ),
            (causal_as(q, k, start, scale, "no scale"), "the scores are not multiplied by scale (1/sqrt(head_dim))."),
        )

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        return (
            describe_scores(attempt.got, attempt.expected, ("new token", "key")),
            "program (t, b) answers rows t * TILE + tl.arange(0, TILE) (positions start + rows) against keys "
            "b * BLOCK + tl.arange(0, BLOCK): scores tl.dot(q, tl.trans(k)) (or tl.sum(q[:, None, :] * k[None, :, :], "
            "axis=2)) times scale, -inf where keys[None, :] > (start + rows)[:, None], stored at out_ptr + "
            "rows[:, None] * (start + new_tokens) + keys[None, :].",
        )
