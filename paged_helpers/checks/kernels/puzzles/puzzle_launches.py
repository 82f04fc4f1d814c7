"""How each warm-up puzzle's case is launched: the seeded inputs, the kernel's arguments, the expected answer.

A ``launch_*`` function takes the kernel under test, one case and a ``torch.Generator`` for its
values (None where the case carries them), launches the learner's kernel once with the grid and the
arguments notebook 06 states, and hands back the ``puzzle_judge.Attempt`` and the puzzle's diagnosis;
``run_cases`` is the one runner, judging each. Every input is its own storage; padding columns and
stale slots hold poison (NaN, or ``ROW_MAX_POISON`` where a max would hide NaN), and every output
starts as ``UNWRITTEN``. The order of the generator's draws is the scenarios' contract: a case's
values are the same on every run of its seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from ...speaking.failure import fail
from ..launching import KernelLaunchFailed, KernelUnderTest
from .diagnosis import (
    GatherDiagnosis,
    LoadBlockDiagnosis,
    RowMaxDiagnosis,
    ScaleDiagnosis,
    SoftmaxDiagnosis,
)
from .puzzle_cases import ROW_MAX_POISON, AttentionCase, BlockCase, CausalCase, cdiv
from .puzzle_judge import UNWRITTEN, Attempt, Diagnosis, close, judge, same_bits, scores_close, softmax_resembles
from .puzzle_mistakes import block_as, block_scores_as, causal_as
from .scores_diagnosis import AttentionDiagnosis, BlockScoresDiagnosis, CausalDiagnosis

Launch = Callable[[KernelUnderTest, object, "torch.Generator | None"], tuple[Attempt, Diagnosis]]

_ROW_PADDING = 3  # columns past each row of x for row_max: its row stride is cols + 3
_SOFTMAX_PADDING = 2  # NaN columns past each row of x for softmax: its row stride is cols + 2


def run_cases(kernel: KernelUnderTest, launch: Launch, cases: Iterable, generator: torch.Generator | None) -> None:
    """The one runner: launch each case in order, and judge what came back (the first wrong one fails)."""
    for case in cases:
        judge(*launch(kernel, case, generator))


def _strided(values: torch.Tensor, fill: float, extra_columns: int) -> torch.Tensor:
    """``values`` [rows, cols] as a view of a wider tensor [rows, cols + extra_columns] (its own
    storage, nothing after it) whose extra columns hold ``fill``: row r starts at r * stride."""
    rows, cols = values.shape
    wide = torch.full((rows, cols + extra_columns), fill, dtype=values.dtype)
    wide[:, :cols] = values
    return wide[:, :cols]


def launch_scale(kernel: KernelUnderTest, case: tuple, generator: torch.Generator) -> tuple[Attempt, Diagnosis]:
    """Puzzle 1: case (n, BLOCK, factor); grid (cdiv(n, BLOCK),)."""
    n, block, factor = case
    programs = cdiv(n, block)
    scenario = f"scale: n = {n}, BLOCK = {block}, factor = {factor:g}, grid ({programs},)"
    x = torch.randn(n, generator=generator)
    out = torch.full((n,), UNWRITTEN)
    kernel.launch(scenario, (programs,), [x, out, n, factor, block], writable={1}, iterations=programs)
    return Attempt(scenario, "out = factor * x", out, factor * x, close), ScaleDiagnosis()


def launch_row_max(kernel: KernelUnderTest, case: tuple, _generator: None) -> tuple[Attempt, Diagnosis]:
    """Puzzle 2: case (description, values [rows, cols]); rows strided, poison past each; grid (rows,)."""
    description, values = case
    rows, cols = values.shape
    block = 1 << max(0, cols - 1).bit_length()  # next_power_of_2(cols)
    x = _strided(values, ROW_MAX_POISON, _ROW_PADDING)
    scenario = f"row_max: {description}, row stride {x.stride(0)}, BLOCK = {block}, grid ({rows},)"
    out = torch.full((rows,), UNWRITTEN)
    kernel.launch(scenario, (rows,), [x, out, cols, x.stride(0), block], writable={1}, iterations=rows)
    expected = values.max(dim=1).values
    return Attempt(scenario, f"row maxima {expected.tolist()}", out, expected, close), RowMaxDiagnosis(values)


def launch_gather_rows(kernel: KernelUnderTest, case: tuple, _generator: None) -> tuple[Attempt, Diagnosis]:
    """Puzzle 3: case (description, picks, table rows, D); the table's row r holds r + 0.01 * column; grid (m,)."""
    description, picks, table_rows, width = case
    m = len(picks)
    scenario = f"gather_rows: {description}, index {picks}, D = {width}, grid ({m},)"
    table = torch.arange(table_rows, dtype=torch.float32)[:, None] + 0.01 * torch.arange(width)[None, :]
    index = torch.tensor(picks, dtype=torch.int32)
    out = torch.full((m, width), UNWRITTEN)
    kernel.launch(scenario, (m,), [table, index, out, width], writable={2}, iterations=m)
    expected = table[index.long()]
    return Attempt(scenario, f"rows {picks} of the table", out, expected, close), GatherDiagnosis(picks)


def launch_softmax(kernel: KernelUnderTest, case: tuple, _generator: None) -> tuple[Attempt, Diagnosis]:
    """Puzzle 4: case (description, values [rows, cols], BLOCK); NaN past each row; grid (rows,)."""
    description, values, block = case
    rows, cols = values.shape
    x = _strided(values, math.nan, _SOFTMAX_PADDING)
    scenario = f"softmax: {description}, row stride {x.stride(0)}, BLOCK = {block}, grid ({rows},)"
    expected = torch.softmax(values.double(), dim=1).float()
    try:
        got = _softmax_launch(kernel, scenario, x, torch.full((rows, cols), UNWRITTEN), block)
    except KernelLaunchFailed as error:
        if error.answer.kind == "out of bounds":  # a store past out may be rows placed at x's stride
            _name_stores_at_the_input_stride(kernel, scenario, x, block, expected)
        raise
    attempt = Attempt(scenario, "the softmax of each row", got, expected, close, softmax_resembles)
    if not attempt.right:
        _name_stores_at_the_input_stride(kernel, scenario, x, block, expected)
    return attempt, SoftmaxDiagnosis(values, block)


def _softmax_launch(
    kernel: KernelUnderTest, scenario: str, x: torch.Tensor, out: torch.Tensor, block: int
) -> torch.Tensor:
    rows, cols = x.shape
    iterations = rows * 2 * cdiv(cols, block)
    kernel.launch(scenario, (rows,), [x, out, cols, x.stride(0), block], writable={1}, iterations=iterations)
    return out


def _name_stores_at_the_input_stride(
    kernel: KernelUnderTest, scenario: str, x: torch.Tensor, block: int, expected: torch.Tensor
) -> None:
    """Fail naming the mistake if the kernel stores row r at out_ptr + r * stride_row (x's stride, not
    out's): relaunched with an out wide enough for rows that far apart, each row's softmax is there."""
    rows, cols = x.shape
    stride = x.stride(0)
    if rows < 2 or stride == cols:
        return
    try:
        wide = _softmax_launch(kernel, scenario, x, torch.full(((rows - 1) * stride + cols,), UNWRITTEN), block)
    except KernelLaunchFailed:
        return
    placed = wide[torch.arange(rows)[:, None] * stride + torch.arange(cols)[None, :]]
    if close(placed, expected):
        fail(
            scenario,
            f"row r of out at out_ptr + r * cols (out is contiguous: its rows are {cols} apart)",
            f"every row's softmax right, but row r stored at out_ptr + r * {stride}, x's row stride, so the "
            "last rows ran past the end of out",
            "the store used stride_row, which is x's row stride (here x's rows are wider in memory than "
            f"{cols} columns); out has its own layout: store row r at out_ptr + row * cols + offsets.",
        )


def launch_load_block(kernel: KernelUnderTest, case: BlockCase, _generator: None) -> tuple[Attempt, Diagnosis]:
    """Puzzle 5: one block of ``case``'s coded pool, with the pool's strides; grid (1,)."""
    pool = case.coded_pool()
    table = torch.tensor(case.table, dtype=torch.int32)
    out = torch.full((case.block_size, case.head_dim), UNWRITTEN)
    args = [
        pool, table, out, case.length, case.logical, case.head, pool.stride(0), pool.stride(1), pool.stride(2),
        case.block_size, case.head_dim,
    ]  # fmt: skip
    kernel.launch(case.scenario, (1,), args, writable={2}, iterations=1)
    physical, rows = case.table[case.logical], case.rows
    expected = block_as(pool, physical, case.head, rows, "right")
    shown = f"out[s, :] = pool[{physical}, {case.head}, s, :] for " + (
        f"every slot (all {rows} hold tokens)" if rows == case.block_size else f"slots s < {rows}, 0 for the rest"
    )
    return Attempt(case.scenario, shown, out, expected, same_bits), LoadBlockDiagnosis(case, pool)


def launch_block_scores(kernel: KernelUnderTest, case: tuple, generator: torch.Generator) -> tuple[Attempt, Diagnosis]:
    """Puzzle 6: case (description, length, BLOCK, D); q, then k, from ``generator``; grid (cdiv(length, BLOCK),)."""
    description, length, block, head_dim = case
    programs = cdiv(length, block)
    capacity = programs * block
    scale = 1.0 / math.sqrt(head_dim)
    scenario = (
        f"block_scores: {description}: length {length}, BLOCK = {block}, D = {head_dim}, scale 1/sqrt({head_dim}), "
        f"grid ({programs},)"
    )
    q = torch.randn(head_dim, generator=generator)
    k = torch.randn(length, head_dim, generator=generator)
    out = torch.full((capacity,), UNWRITTEN)
    kernel.launch(
        scenario,
        (programs,),
        [q, k, out, length, scale, block, head_dim],
        writable={2},
        iterations=programs,
        stray_hint="k holds exactly `length` keys: a block's rows past the length must be masked off, "
        "valid = pid * BLOCK + slots < length (the block's start counts), mask=valid[:, None].",
    )
    expected = block_scores_as(q, k, block, scale, "right")
    shown = f"out[i] = scale * (q . k[i]) for i < {length}" + (
        f", -inf for i in {length}..{capacity - 1}" if capacity > length else ""
    )
    return Attempt(scenario, shown, out, expected, scores_close), BlockScoresDiagnosis(q, k, block, scale)


def _keys_for_scores(q: torch.Tensor, scores: torch.Tensor, scale: float, generator) -> torch.Tensor:
    """Keys k[j] (random otherwise) with scale * (q . k[j]) = scores[j] exactly (in float64)."""
    direction = q.double() / q.double().norm()
    noise = torch.randn(scores.numel(), q.numel(), generator=generator, dtype=torch.float64)
    noise -= (noise @ direction)[:, None] * direction[None, :]
    return noise + (scores.double() / (scale * q.double().norm()))[:, None] * direction[None, :]


def _profile_scores(case: AttentionCase, generator) -> torch.Tensor:
    """The scores (already scaled) the case's keys give."""
    noise = torch.randn(case.length, generator=generator, dtype=torch.float64)
    if case.profile == "rising":  # every block's max above the last: the running max grows at every block
        scores = torch.linspace(-2.0, 2.0, case.length, dtype=torch.float64) + 0.15 * noise
        scores[-1] = scores.max() + 0.5
        return scores
    if case.profile == "early":  # the largest score in the first block: the running max never moves
        scores = 0.5 * noise
        scores[0] = scores.max() + 1.0
        return scores
    return {"negative": -150.0, "huge": 1000.0}[case.profile] + 3.0 * noise


def launch_attention(
    kernel: KernelUnderTest, case: AttentionCase, generator: torch.Generator
) -> tuple[Attempt, Diagnosis]:
    """Puzzle 7: q, the profile's scores, keys that give them, then v, from ``generator``; grid (1,)."""
    scale = 1.0 / math.sqrt(case.head_dim)
    q = torch.randn(case.head_dim, generator=generator, dtype=torch.float64)
    scores = _profile_scores(case, generator)
    k = _keys_for_scores(q, scores, scale, generator).float()
    v = torch.randn(case.length, case.head_dim, generator=generator)
    scores = scale * (k.double() @ q.float().double())  # what float32 keys give
    out = torch.full((case.head_dim,), UNWRITTEN)
    kernel.launch(
        case.scenario,
        (1,),
        [q.float(), k, v, out, case.length, scale, case.block, case.head_dim],
        writable={3},
        iterations=cdiv(case.length, case.block),
        stray_hint="k and v hold exactly `length` rows: mask the rows of the last block past the length when "
        "loading either, valid = start + slots < length, mask=valid[:, None].",
    )
    expected = (torch.softmax(scores, dim=0) @ v.double()).float()
    attempt = Attempt(case.scenario, "out = softmax(scale * q . k) @ v", out, expected, scores_close)
    return attempt, AttentionDiagnosis(case, scores, v, scale)


def launch_causal(kernel: KernelUnderTest, case: CausalCase, generator: torch.Generator) -> tuple[Attempt, Diagnosis]:
    """Puzzle 8: q, then k, from ``generator``; grid (cdiv(T, TILE), cdiv(start + T, BLOCK))."""
    scale = 1.0 / math.sqrt(case.head_dim)
    q = torch.randn(case.new_tokens, case.head_dim, generator=generator)
    k = torch.randn(case.total, case.head_dim, generator=generator)
    out = torch.full((case.new_tokens, case.total), UNWRITTEN)
    kernel.launch(
        case.scenario,
        case.grid,
        [q, k, out, case.start, case.new_tokens, scale, case.tile, case.block, case.head_dim],
        writable={2},
        iterations=math.prod(case.grid),
        stray_hint="q holds exactly new_tokens rows, k exactly start + new_tokens, and out is [new_tokens, "
        "start + new_tokens]: the last tile's rows past new_tokens and the last block's keys past start + "
        "new_tokens must be masked, on the loads and on the store.",
    )
    expected = causal_as(q, k, case.start, scale, "right")
    shown = f"out[t, j] = scale * (q[t] . k[j]) where key j <= position {case.start} + t, -inf where j is in its future"
    return Attempt(case.scenario, shown, out, expected, scores_close), CausalDiagnosis(case, q, k, scale)
