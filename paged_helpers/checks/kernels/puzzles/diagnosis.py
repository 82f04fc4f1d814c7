"""What each warm-up puzzle says when its kernel is wrong: the hints, and the mistakes they name.

A ``Diagnosis`` holds what one case's launch was given and answers ``puzzle_judge.judge``'s questions in
its order: what to say when elements were never written, which classic mistakes to try (each a
recomputed answer from ``puzzle_mistakes`` and the hint that names it), what odd values mean, and the last
word (the worst element and the puzzle's general hint). A diagnosis reads tensors only; it never
launches the kernel (softmax's second launch, rows stored at x's stride, is ``puzzle_launches``'s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...speaking.failure import fail
from .puzzle_cases import ROW_MAX_POISON, BlockCase
from .puzzle_judge import UNWRITTEN, Attempt, Diagnosis, Mistakes, close, describe_worst
from .puzzle_mistakes import (
    block_as,
    softmax_as_if_masked_lanes_were_zero,
    softmax_without_rescale,
)


def _first_unwritten(attempt: Attempt) -> list[int]:
    return [int(i) for i in torch.nonzero(attempt.unwritten)[0]]


class ScaleDiagnosis(Diagnosis):
    """Puzzle 1: out = factor * x."""

    def unwritten(self, attempt: Attempt) -> None:
        missing = [int(i) for i in torch.nonzero(attempt.unwritten).flatten()]
        fail(
            attempt.scenario,
            f"all {attempt.got.numel()} elements written",
            f"{len(missing)} never written (first: element {missing[0]})",
            "each program handles its own tile: offsets = pid * BLOCK + tl.arange(0, BLOCK), with "
            "pid = tl.program_id(0).",
        )

    def odd_values(self, attempt: Attempt) -> None:
        out = attempt.got
        if not torch.isfinite(out).all():
            fail(
                attempt.scenario,
                "finite numbers",
                f"NaN or inf at element {int(torch.nonzero(~torch.isfinite(out))[0])}",
                "a lane past n read memory that is not x's: load with mask=offsets < n.",
            )

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        return describe_worst(attempt.got, attempt.expected, ("element",)), "multiply by factor."


@dataclass(frozen=True)
class RowMaxDiagnosis(Diagnosis):
    """Puzzle 2: the max of each row of ``values``."""

    values: torch.Tensor

    def unwritten(self, attempt: Attempt) -> None:
        out = attempt.got
        fail(
            attempt.scenario,
            attempt.shown,
            f"{out.tolist()}: {int(attempt.unwritten.sum())} row(s) never written (they still hold {UNWRITTEN:g})",
            "program r stores the max of row r at out_ptr + r, with r = tl.program_id(0).",
        )

    def odd_values(self, attempt: Attempt) -> None:
        out, expected = attempt.got, attempt.expected
        as_if_zero = torch.cat([self.values, torch.zeros(self.values.shape[0], 1)], dim=1).max(dim=1).values
        if not close(as_if_zero, expected) and close(out, as_if_zero):
            fail(
                attempt.scenario,
                attempt.shown,
                f"{out.tolist()}: a row of negative numbers came back as 0",
                "masked lanes were loaded as 0 (the default `other`), and 0 beats every negative number. "
                "For a max, load masked lanes as -inf: tl.load(..., mask=mask, other=-float('inf')).",
            )
        if bool((out >= ROW_MAX_POISON).any()):
            fail(
                attempt.scenario,
                attempt.shown,
                f"{out.tolist()}",
                f"a max of {ROW_MAX_POISON:g} is one of the values the check put just past each row: the kernel "
                "read lanes beyond `cols` (mask them: mask = offsets < cols) or used `cols` where the row "
                "stride belongs (row r starts at x_ptr + r * stride_row).",
            )

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        return f"{attempt.got.tolist()}", "reduce the row with tl.max(row, axis=0)."


@dataclass(frozen=True)
class GatherDiagnosis(Diagnosis):
    """Puzzle 3: out[i] = table[picks[i]], the table's row r holding r + 0.01 * column."""

    picks: list[int]

    def brought(self, out: torch.Tensor) -> list[int | None]:
        """The table rows the output's rows came from, read from their first value."""
        return [int(math.floor(float(row[0]) + 1e-6)) if math.isfinite(float(row[0])) else None for row in out]

    def unwritten(self, attempt: Attempt) -> None:
        first = _first_unwritten(attempt)
        fail(
            attempt.scenario,
            attempt.shown,
            f"{int(attempt.unwritten.sum())} value(s) of out never written (first: row {first[0]}, column {first[1]})",
            "program i writes exactly row i of out: out_ptr + i * D + tl.arange(0, D).",
        )

    def odd_values(self, attempt: Attempt) -> None:
        brought, in_order = self.brought(attempt.got), list(range(len(self.picks)))
        if brought == in_order and self.picks != in_order:
            fail(
                attempt.scenario,
                attempt.shown,
                f"rows {brought}",
                "program i copied table row i: read the row number from the index table first "
                "(row = tl.load(index_ptr + i)), then load that row.",
            )

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        worst = describe_worst(attempt.got, attempt.expected, ("output row", "column"))
        return (
            f"rows {self.brought(attempt.got)} ({worst})",
            "row r of the table starts at table_ptr + r * D; load D consecutive values from there.",
        )


@dataclass(frozen=True)
class SoftmaxDiagnosis(Diagnosis):
    """Puzzle 4: a row softmax of ``values``, tile by tile (``block``)."""

    values: torch.Tensor
    block: int

    def unwritten(self, attempt: Attempt) -> None:
        rows, cols = attempt.got.shape
        first = _first_unwritten(attempt)
        fail(
            attempt.scenario,
            f"all {rows * cols} values of out written",
            f"{int(attempt.unwritten.sum())} never written (first: row {first[0]}, column {first[1]})",
            "the second loop stores every tile of the row: out_ptr + row * cols + offsets, for every "
            "start in range(0, cols, BLOCK), masked with offsets < cols.",
        )

    def mistakes(self, attempt: Attempt) -> Mistakes:
        return (
            (
                softmax_without_rescale(self.values, self.block),
                "the running sum was not rescaled when a later tile raised the max. When the max moves "
                "from m to m_new, every term already in the sum shrinks by exp(m - m_new): "
                "l = l * exp(m - m_new) + sum(exp(tile - m_new)).",
            ),
            (
                softmax_as_if_masked_lanes_were_zero(self.values, self.block),
                "masked lanes were loaded as 0 and counted in the sum (and the max). Load them as -inf: "
                "exp(-inf - m) is 0, so they add nothing.",
            ),
        )

    def odd_values(self, attempt: Attempt) -> None:
        got = attempt.got
        if not torch.isfinite(got).all():
            fail(
                attempt.scenario,
                "finite probabilities",
                f"{int((~torch.isfinite(got)).sum())} NaN or inf values",
                "exp of a score near 1000 overflows float32: subtract the running max before exp. NaN can "
                "also come from loading past the row (the check puts NaN there): mask with offsets < cols.",
            )

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        return (
            describe_worst(attempt.got, attempt.expected, ("row", "column")),
            "first pass: running max m and sum l over the tiles; second pass: out = exp(x - m) / l.",
        )


@dataclass(frozen=True)
class LoadBlockDiagnosis(Diagnosis):
    """Puzzle 5: one [BLOCK, D] block of ``case``'s coded ``pool``, found through the table."""

    case: BlockCase
    pool: torch.Tensor

    @property
    def physical(self) -> int:
        return self.case.table[self.case.logical]

    def unwritten(self, attempt: Attempt) -> None:
        rows, unwritten = self.case.rows, attempt.unwritten
        first = _first_unwritten(attempt)
        if bool(unwritten[rows:].all()) and not bool(unwritten[:rows].any()):
            fail(
                attempt.scenario,
                f"rows {rows} to {self.case.block_size - 1} of out (slots without a token) set to 0",
                "they were never written",
                "the masked load already gives 0 there (other=0.0): store the whole [BLOCK, D] tile, with "
                "no mask on the store.",
            )
        fail(
            attempt.scenario,
            attempt.shown,
            f"{int(unwritten.sum())} element(s) of out never written (first: row {first[0]}, column {first[1]})",
            "store one [BLOCK, D] tile: out_ptr + slots[:, None] * D + rd[None, :] covers every element of out.",
        )

    def mistakes(self, attempt: Attempt) -> Mistakes:
        case, pool, physical = self.case, self.pool, self.physical
        rows, (_, s_head, s_slot) = case.rows, case.strides
        named = []
        if physical != case.logical:
            named.append(
                (
                    block_as(pool, case.logical, case.head, rows, "right"),
                    f"the tile came from physical block {case.logical}, the logical block's own number: look the "
                    f"physical block up first, physical = tl.load(table_ptr + logical_block) (here block "
                    f"{physical}), then address pool_ptr + physical * s_block.",
                )
            )
        return named + [
            (
                block_as(pool, physical, case.head, rows, "head and slot"),
                f"the head and slot strides are exchanged (here s_head is {s_head} and s_slot {s_slot}): the kernel "
                "is handed s_block, s_head, s_slot in that order, the order of the pool's dimensions [num_blocks, "
                "heads, block_size, head_dim] (notebook 07's kernel takes them in the same order). Address "
                "pool_ptr + physical * s_block + head * s_head + slots[:, None] * s_slot + rd[None, :].",
            ),
            (
                block_as(pool, physical, case.head, rows, "contiguous"),
                f"the head and slot strides of a contiguous pool were worked out by hand (head * BLOCK * D, "
                f"slots * D): this pool lies otherwise in memory (s_head {s_head}, s_slot {s_slot}). Use the "
                "strides the kernel is handed: base = pool_ptr + physical * s_block + head * s_head, rows of the "
                "tile slots[:, None] * s_slot.",
            ),
            (
                block_as(pool, physical, case.head, rows, "swapped"),
                "the slot and column strides are exchanged: slots[:, None] * 1 + rd[None, :] * s_slot walks down "
                "a column. Rows of the tile are slots (step s_slot), columns are head_dim (step 1): "
                "slots[:, None] * s_slot + rd[None, :].",
            ),
            (
                block_as(pool, physical, case.head, rows, "unmasked"),
                f"the slots past the sequence's length (position logical_block * BLOCK + s >= length, here slots "
                f"{rows} and on) were loaded: they hold whatever an earlier sequence left there (here NaN). Mask "
                "the load: valid = logical_block * BLOCK + slots < length (shape [BLOCK]), mask=valid[:, None], "
                "other=0.0.",
            ),
            (
                block_as(pool, physical, case.head, rows, "columns"),
                "the mask switched off columns instead of slots: a token is a row of the tile, so its [BLOCK] "
                "mask must stand on the rows, valid[:, None] (shape [BLOCK, 1], broadcast along the columns), not "
                "valid[None, :] or a mask built from rd.",
            ),
        ]

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        got, expected, case = attempt.got, attempt.expected, self.case
        error = (got - expected).abs().nan_to_num(nan=math.inf)
        row, column = (int(i) for i in torch.nonzero(error == error.max())[0])
        want = "0 (a slot without a token)" if row >= case.rows else case.where_from(float(expected[row, column]))
        return (
            f"out[{row}, {column}] holds {case.where_from(float(got[row, column]))} instead of {want}",
            "element (s, c) of the block lives at pool_ptr + physical * s_block + head * s_head + s * s_slot + c: "
            "build that address as a [BLOCK, D] tile, slots[:, None] * s_slot + rd[None, :], with the strides the "
            "kernel is handed (the check's pools are not all contiguous).",
        )
