"""Checks for notebook 06, the Triton warm-up: eight small kernels before the paged ones.

Each puzzle gives the learner a launcher and asks for its kernel; the check judges the kernel
alone and never calls the launcher. It reads the kernel from the notebook's cells as text,
loads it in a process of its own and launches it itself (``launching.KernelUnderTest``), with
the grid and the arguments the notebook states, on seeded tensors of its own:

* every tensor is its own storage, so under Triton's interpreter a load or store that leaves
  it (an unmasked lane past the end of ``x`` or ``out``) is stopped before it happens and named,
  with the tensor and the kernel's line;
* where a kernel should never look there is poison: the padding columns past each row of a
  strided 2-D input (NaN, or a huge value where a max would hide NaN) and the stale slots past a
  sequence's length in a pool (NaN), so a load that is not masked, or a wrong stride, changes
  the answer on a GPU as well;
* every output starts filled with ``UNWRITTEN``, so an element no program stored is seen.

When an answer is wrong, the check recomputes the scenario as the classic mistake of that
puzzle would (masked lanes loaded as 0 before a max, the index table skipped, an online
softmax that never rescales its sum, a pool read with a contiguous pool's strides or with its
head and slot strides exchanged, masked scores left at 0, an accumulator never rescaled, a
causal mask in row numbers instead of positions) and names the mistake if the learner's output
matches it. Every scenario is a few dozen program-iterations (a few ms each in the interpreter).

Puzzles 5 to 8 are the moves of notebooks 07 and 09, one at a time: a block of the pool
[num_blocks, heads, block_size, head_dim] through the table (5), one block's scores against a
query (6), the online softmax with its value accumulator (7), a [TILE, BLOCK] tile of scores
under a causal mask in absolute positions, with query rows past the chunk masked (8).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ...device import DEVICE
from ..reading.strict import strict_allclose
from ..registry import check
from ..speaking.failure import fail
from ..story import Story
from .launching import KernelLaunchFailed, KernelUnderTest, Parameter

__all__ = [
    "BLOCK_SCORES_PARAMETERS",
    "CAUSAL_SCORES_PARAMETERS",
    "GATHER_ROWS_PARAMETERS",
    "LOAD_BLOCK_PARAMETERS",
    "ONLINE_ATTENTION_PARAMETERS",
    "ROW_MAX_PARAMETERS",
    "SCALE_PARAMETERS",
    "SOFTMAX_PARAMETERS",
    "UNWRITTEN",
    "check_block_scores_kernel",
    "check_causal_scores_kernel",
    "check_gather_rows_kernel",
    "check_load_block_kernel",
    "check_online_attention_kernel",
    "check_row_max_kernel",
    "check_scale_kernel",
    "check_softmax_kernel",
]

ATOL = RTOL = 1e-5

# What the check fills an output with before the kernel runs: a value no scenario's answer holds
# (a whole number: every value of the pool of puzzle 5 ends in .5).
UNWRITTEN = 1234.0


def _parameters(*names: str, constexprs: tuple[str, ...]) -> tuple[Parameter, ...]:
    return tuple(Parameter(name, constexpr=name in constexprs) for name in names)


# The kernels' signatures, as notebook 06 states them: the check launches with these arguments,
# positionally (names may differ; number, order and constexprs may not).
SCALE_PARAMETERS = _parameters("x_ptr", "out_ptr", "n", "factor", "BLOCK", constexprs=("BLOCK",))
ROW_MAX_PARAMETERS = _parameters("x_ptr", "out_ptr", "cols", "stride_row", "BLOCK", constexprs=("BLOCK",))
GATHER_ROWS_PARAMETERS = _parameters("table_ptr", "index_ptr", "out_ptr", "D", constexprs=("D",))
SOFTMAX_PARAMETERS = _parameters("x_ptr", "out_ptr", "cols", "stride_row", "BLOCK", constexprs=("BLOCK",))
LOAD_BLOCK_PARAMETERS = _parameters(
    "pool_ptr", "table_ptr", "out_ptr", "length", "logical_block", "head", "s_block", "s_head", "s_slot",
    "BLOCK", "D", constexprs=("BLOCK", "D"),
)  # fmt: skip


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _strided(values: torch.Tensor, fill: float, extra_columns: int) -> torch.Tensor:
    """``values`` [rows, cols] as a view of a wider tensor [rows, cols + extra_columns] (its own
    storage, nothing after it) whose extra columns hold ``fill``: row r starts at r * stride."""
    rows, cols = values.shape
    wide = torch.full((rows, cols + extra_columns), fill, dtype=values.dtype)
    wide[:, :cols] = values
    return wide[:, :cols]


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():
        return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _describe_worst(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, ...]) -> str:
    error = (got - expected).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
    where = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    return f"at {where}: {float(got[index]):.6g} instead of {float(expected[index]):.6g}"


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return strict_allclose(got, expected, atol=ATOL, rtol=RTOL)


def _unwritten(got: torch.Tensor) -> torch.Tensor:
    return got == UNWRITTEN


def _puzzle(run_cases: Callable, visible_cases: Callable[[], object], draw_cases: Callable) -> Story:
    """A puzzle's story: its own loop over its visible cases; hidden, the same loop on cases drawn from the seed."""
    return Story(
        visible=(lambda kernel, _rng: run_cases(kernel, visible_cases()),),
        hidden={"sizes drawn from the grader's seed": lambda kernel, rng: run_cases(kernel, draw_cases(rng))},
    )


# --------------------------------------------------------------------------- puzzle 1: scale

_SCALE_CASES = ((1, 8, 2.5), (8, 8, 2.5), (13, 8, 2.5), (29, 8, 2.5), (29, 16, 2.5))  # (n, BLOCK, factor)


@check(notebook="06_triton_warmup", builds="scale_kernel", kernel=True)
def check_scale_kernel(scale_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 1: `scale_kernel`, launched by the check with grid (cdiv(n, BLOCK),): out[i] = factor * x[i].

    Lengths: 1, exactly one tile, one tile and a bit, several tiles with a ragged end; hidden: lengths,
    tile sizes and factors drawn from the grader's seed.
    """
    with KernelUnderTest(scale_kernel, "scale_kernel", SCALE_PARAMETERS) as kernel:
        story = _puzzle(_scale_cases, lambda: _SCALE_CASES, _random_scale_cases)
        return story.tell(kernel, seed=seed, hidden=hidden)


def _random_scale_cases(rng) -> tuple:
    """Three lengths, every draw: shorter than one tile, whole tiles, several tiles with a ragged end."""
    blocks = [rng.choice((4, 8, 16, 32)) for _ in range(3)]
    lengths = (
        rng.randint(1, blocks[0] - 1),
        blocks[1] * rng.randint(2, 4),
        blocks[2] * rng.randint(1, 4) + rng.randint(1, blocks[2] - 1),
    )
    factors = rng.sample((2.5, -0.75, 3.0), 3)
    return tuple(zip(lengths, blocks, factors, strict=True))


def _scale_cases(kernel: KernelUnderTest, cases: tuple) -> str:
    # The values of x: seeded by the cases themselves (hidden cases come from the grader's seed).
    generator = torch.Generator().manual_seed(6 if cases == _SCALE_CASES else hash(cases) & 0x7FFFFFFF)
    for n, block, factor in cases:
        programs = _cdiv(n, block)
        scenario = f"scale: n = {n}, BLOCK = {block}, factor = {factor:g}, grid ({programs},)"
        x = torch.randn(n, generator=generator)
        out = torch.full((n,), UNWRITTEN)
        kernel.launch(scenario, (programs,), [x, out, n, factor, block], writable={1}, iterations=programs)
        expected = factor * x
        unwritten = [int(i) for i in torch.nonzero(_unwritten(out)).flatten()]
        if unwritten:
            fail(
                scenario,
                f"all {n} elements written",
                f"{len(unwritten)} never written (first: element {unwritten[0]})",
                "each program handles its own tile: offsets = pid * BLOCK + tl.arange(0, BLOCK), with "
                "pid = tl.program_id(0).",
            )
        if not torch.isfinite(out).all():
            fail(
                scenario,
                "finite numbers",
                f"NaN or inf at element {int(torch.nonzero(~torch.isfinite(out))[0])}",
                "a lane past n read memory that is not x's: load with mask=offsets < n.",
            )
        if not _close(out, expected):
            fail(scenario, "out = factor * x", _describe_worst(out, expected, ("element",)), "multiply by factor.")
    return f"{len(cases)} lengths, from one element to several tiles with a ragged end"


# --------------------------------------------------------------------------- puzzle 2: row max

_POISON = 1e4  # in the columns past each row: a max that sees it was not masked
_ROW_PADDING = 3  # columns past each row of x: its row stride is cols + 3


def _row_max_inputs(generator: torch.Generator) -> list[tuple[str, torch.Tensor]]:
    mixed = torch.randn(3, 5, generator=generator)
    mixed[1] = -1.0 - torch.rand(5, generator=generator)  # a row of negative numbers only
    return [
        ("3 rows of 5 (row 1 entirely negative)", mixed),
        ("4 rows of 8 (a power of two: no masked lanes)", torch.randn(4, 8, generator=generator)),
        ("2 rows of 1", -torch.rand(2, 1, generator=generator) - 0.5),
    ]


@check(notebook="06_triton_warmup", builds="row_max_kernel", kernel=True)
def check_row_max_kernel(row_max_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 2: `row_max_kernel`, launched by the check with grid (rows,) and BLOCK =
    next_power_of_2(cols): out[r] = max of row r, rows strided."""
    with KernelUnderTest(row_max_kernel, "row_max_kernel", ROW_MAX_PARAMETERS) as kernel:
        visible = functools.partial(_row_max_inputs, torch.Generator().manual_seed(62))
        story = _puzzle(_row_max_cases, visible, _random_row_max_inputs)
        return story.tell(kernel, seed=seed, hidden=hidden)


def _random_row_max_inputs(rng) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    # every draw: a width that is a power of two, one that is not (masked lanes), and any width
    widths = (rng.choice((2, 4, 8)), rng.choice((3, 5, 6, 7, 9, 10, 11, 12)), rng.randint(1, 12))
    for cols in widths:
        rows = rng.randint(1, 5)
        values = torch.randn(rows, cols, generator=generator)
        values[rng.randrange(rows)] = -1.0 - torch.rand(cols, generator=generator)  # one row all negative
        cases.append((f"{rows} rows of {cols}", values))
    return cases


def _row_max_cases(kernel: KernelUnderTest, cases: list) -> str:
    for description, values in cases:
        rows, cols = values.shape
        block = _next_power_of_2(cols)
        x = _strided(values, _POISON, _ROW_PADDING)
        scenario = f"row_max: {description}, row stride {x.stride(0)}, BLOCK = {block}, grid ({rows},)"
        out = torch.full((rows,), UNWRITTEN)
        kernel.launch(scenario, (rows,), [x, out, cols, x.stride(0), block], writable={1}, iterations=rows)
        expected = values.max(dim=1).values
        if _close(out, expected):
            continue
        if bool(_unwritten(out).any()):
            fail(
                scenario,
                f"row maxima {expected.tolist()}",
                f"{out.tolist()}: {int(_unwritten(out).sum())} row(s) never written (they still hold {UNWRITTEN:g})",
                "program r stores the max of row r at out_ptr + r, with r = tl.program_id(0).",
            )
        as_if_zero = torch.cat([values, torch.zeros(rows, 1)], dim=1).max(dim=1).values
        if not _close(as_if_zero, expected) and _close(out, as_if_zero):
            fail(
                scenario,
                f"row maxima {expected.tolist()}",
                f"{out.tolist()}: a row of negative numbers came back as 0",
                "masked lanes were loaded as 0 (the default `other`), and 0 beats every negative number. "
                "For a max, load masked lanes as -inf: tl.load(..., mask=mask, other=-float('inf')).",
            )
        if bool((out >= _POISON).any()):
            fail(
                scenario,
                f"row maxima {expected.tolist()}",
                f"{out.tolist()}",
                f"a max of {_POISON:g} is one of the values the check put just past each row: the kernel "
                "read lanes beyond `cols` (mask them: mask = offsets < cols) or used `cols` where the row "
                "stride belongs (row r starts at x_ptr + r * stride_row).",
            )
        fail(scenario, f"row maxima {expected.tolist()}", f"{out.tolist()}", "reduce the row with tl.max(row, axis=0).")
    return f"{len(cases)} shapes, including an all-negative row"


# --------------------------------------------------------------------------- puzzle 3: gather rows

_GATHER_CASES = (
    ("5 rows from a table of 7, scrambled, row 4 twice", [4, 0, 6, 4, 2], 7, 8),
    ("1 row", [3], 4, 16),
    ("6 rows in table order", [0, 1, 2, 3, 4, 5], 6, 8),
)


@check(notebook="06_triton_warmup", builds="gather_rows_kernel", kernel=True)
def check_gather_rows_kernel(gather_rows_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 3: `gather_rows_kernel`, launched by the check with grid (m,): out[i] = table[index[i]].

    The table's row r holds r + 0.01 * column, so a wrong row is named by the values it brought back.
    """
    with KernelUnderTest(gather_rows_kernel, "gather_rows_kernel", GATHER_ROWS_PARAMETERS) as kernel:
        story = _puzzle(_gather_rows_cases, lambda: _GATHER_CASES, _random_gather_cases)
        return story.tell(kernel, seed=seed, hidden=hidden)


def _random_gather_cases(rng) -> list[tuple]:
    """Three gathers, every draw: a row picked twice, rows out of order, and one row that is not row 0."""
    cases = []
    for kind in ("twice", "out of order", "one"):
        table_rows, width = rng.randint(3, 9), rng.choice((4, 8, 16))
        if kind == "one":
            picks = [rng.randrange(1, table_rows)]
        else:
            picks = rng.sample(range(table_rows), rng.randint(2, min(table_rows, 6)))
            if picks == sorted(picks):
                picks.reverse()
            if kind == "twice":
                picks.insert(rng.randrange(len(picks) + 1), rng.choice(picks))
        cases.append((f"{len(picks)} rows from a table of {table_rows}", picks, table_rows, width))
    return cases


def _gather_rows_cases(kernel: KernelUnderTest, cases) -> str:
    for description, picks, table_rows, width in cases:
        m = len(picks)
        scenario = f"gather_rows: {description}, index {picks}, D = {width}, grid ({m},)"
        table = torch.arange(table_rows, dtype=torch.float32)[:, None] + 0.01 * torch.arange(width)[None, :]
        index = torch.tensor(picks, dtype=torch.int32)
        out = torch.full((m, width), UNWRITTEN)
        kernel.launch(scenario, (m,), [table, index, out, width], writable={2}, iterations=m)
        expected = table[index.long()]
        if _close(out, expected):
            continue
        if bool(_unwritten(out).any()):
            first = [int(i) for i in torch.nonzero(_unwritten(out))[0]]
            fail(
                scenario,
                f"rows {picks} of the table",
                f"{int(_unwritten(out).sum())} value(s) of out never written (first: row {first[0]}, "
                f"column {first[1]})",
                "program i writes exactly row i of out: out_ptr + i * D + tl.arange(0, D).",
            )
        brought = [int(math.floor(float(row[0]) + 1e-6)) if math.isfinite(float(row[0])) else None for row in out]
        if brought == list(range(m)) and picks != list(range(m)):
            fail(
                scenario,
                f"rows {picks} of the table",
                f"rows {brought}",
                "program i copied table row i: read the row number from the index table first "
                "(row = tl.load(index_ptr + i)), then load that row.",
            )
        fail(
            scenario,
            f"rows {picks} of the table",
            f"rows {brought} ({_describe_worst(out, expected, ('output row', 'column'))})",
            "row r of the table starts at table_ptr + r * D; load D consecutive values from there.",
        )
    return f"{len(cases)} index tables"


# --------------------------------------------------------------------------- puzzle 4: tiled softmax

_SOFTMAX_PADDING = 2  # NaN columns past each row of x: its row stride is cols + 2


def _softmax_as_without_rescale(values: torch.Tensor, block: int) -> torch.Tensor:
    """What a tiled softmax gives when the running sum is never rescaled as the max grows."""
    rows = []
    for row in values.double():
        m, total = -math.inf, 0.0
        for start in range(0, row.numel(), block):
            tile = row[start : start + block]
            m = max(m, float(tile.max()))
            total += float(torch.exp(tile - m).sum())
        rows.append(torch.exp(row - m) / total)
    return torch.stack(rows).float()


def _softmax_as_if_masked_lanes_were_zero(values: torch.Tensor, block: int) -> torch.Tensor:
    cols = values.shape[1]
    padded = _cdiv(cols, block) * block
    zeros = torch.zeros(values.shape[0], padded - cols, dtype=values.dtype)
    wide = torch.cat([values, zeros], dim=1).double()
    m = wide.max(dim=1, keepdim=True).values
    return (torch.exp(values.double() - m) / torch.exp(wide - m).sum(dim=1, keepdim=True)).float()


def _softmax_cases(generator: torch.Generator) -> list[tuple[str, torch.Tensor, int]]:
    rising = torch.linspace(-3.0, 3.0, 19)[None, :] + 0.1 * torch.randn(2, 19, generator=generator)
    return [
        ("2 rows of 19 whose max is in the last tile", rising, 8),
        (
            "3 rows of 12 with scores near 1000 (exp overflows without the max)",
            1000 + torch.randn(3, 12, generator=generator),
            8,
        ),
        ("2 rows of 5, all negative, one tile with masked lanes", -3.0 - torch.rand(2, 5, generator=generator), 8),
        ("1 row of 1", torch.tensor([[0.25]]), 4),
    ]


@check(notebook="06_triton_warmup", builds="softmax_kernel", kernel=True)
def check_softmax_kernel(softmax_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 4: `softmax_kernel`, launched by the check with grid (rows,): a row softmax computed
    tile by tile with a running max and sum."""
    with KernelUnderTest(softmax_kernel, "softmax_kernel", SOFTMAX_PARAMETERS) as kernel:
        visible = functools.partial(_softmax_cases, torch.Generator().manual_seed(64))
        story = _puzzle(_softmax_run, visible, _random_softmax_cases)
        return story.tell(kernel, seed=seed, hidden=hidden)


def _random_softmax_cases(rng) -> list[tuple[str, torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    # every draw: scores around 0, all negative, and where exp overflows without the max (in an order
    # drawn), the first spanning several tiles with a ragged end, the second whole tiles
    for index, shift in enumerate(rng.sample((0.0, -3.0, 1000.0), 3)):
        rows, block = rng.randint(1, 3), rng.choice((4, 8))
        ragged, whole = block * rng.randint(1, 2) + rng.randint(1, block - 1), block * rng.randint(2, 3)
        cols = (ragged, whole, rng.randint(1, 24))[index]
        cases.append((f"{rows} rows of {cols}", shift + 2 * torch.randn(rows, cols, generator=generator), block))
    return cases


def _softmax_launch(kernel: KernelUnderTest, scenario: str, x: torch.Tensor, block: int) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.full((rows, cols), UNWRITTEN)
    iterations = rows * 2 * _cdiv(cols, block)
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
    wide = torch.full(((rows - 1) * stride + cols,), UNWRITTEN)
    try:
        kernel.launch(
            scenario, (rows,), [x, wide, cols, stride, block], writable={1}, iterations=rows * 2 * _cdiv(cols, block)
        )
    except KernelLaunchFailed:
        return
    placed = wide[torch.arange(rows)[:, None] * stride + torch.arange(cols)[None, :]]
    if _close(placed, expected):
        fail(
            scenario,
            f"row r of out at out_ptr + r * cols (out is contiguous: its rows are {cols} apart)",
            f"every row's softmax right, but row r stored at out_ptr + r * {stride}, x's row stride, so the "
            "last rows ran past the end of out",
            "the store used stride_row, which is x's row stride (here x's rows are wider in memory than "
            f"{cols} columns); out has its own layout: store row r at out_ptr + row * cols + offsets.",
        )


def _softmax_run(kernel: KernelUnderTest, cases: list) -> str:
    for description, values, block in cases:
        rows, cols = values.shape
        x = _strided(values, math.nan, _SOFTMAX_PADDING)
        scenario = f"softmax: {description}, row stride {x.stride(0)}, BLOCK = {block}, grid ({rows},)"
        expected = torch.softmax(values.double(), dim=1).float()
        try:
            got = _softmax_launch(kernel, scenario, x, block)
        except KernelLaunchFailed as error:
            if error.answer.kind == "out of bounds":  # a store past out may be rows placed at x's stride
                _name_stores_at_the_input_stride(kernel, scenario, x, block, expected)
            raise
        if _close(got, expected):
            continue
        _name_stores_at_the_input_stride(kernel, scenario, x, block, expected)
        if bool(_unwritten(got).any()):
            first = [int(i) for i in torch.nonzero(_unwritten(got))[0]]
            fail(
                scenario,
                f"all {rows * cols} values of out written",
                f"{int(_unwritten(got).sum())} never written (first: row {first[0]}, column {first[1]})",
                "the second loop stores every tile of the row: out_ptr + row * cols + offsets, for every "
                "start in range(0, cols, BLOCK), masked with offsets < cols.",
            )
        named = (
            (
                _softmax_as_without_rescale(values, block),
                "the running sum was not rescaled when a later tile raised the max. When the max moves "
                "from m to m_new, every term already in the sum shrinks by exp(m - m_new): "
                "l = l * exp(m - m_new) + sum(exp(tile - m_new)).",
            ),
            (
                _softmax_as_if_masked_lanes_were_zero(values, block),
                "masked lanes were loaded as 0 and counted in the sum (and the max). Load them as -inf: "
                "exp(-inf - m) is 0, so they add nothing.",
            ),
        )
        for wrong, diagnosis in named:
            if not _close(wrong, expected) and torch.allclose(got, wrong, atol=1e-4, rtol=1e-4):
                fail(scenario, "the softmax of each row", "what one classic mistake gives, named below", diagnosis)
        if not torch.isfinite(got).all():
            fail(
                scenario,
                "finite probabilities",
                f"{int((~torch.isfinite(got)).sum())} NaN or inf values",
                "exp of a score near 1000 overflows float32: subtract the running max before exp. NaN can "
                "also come from loading past the row (the check puts NaN there): mask with offsets < cols.",
            )
        fail(
            scenario,
            "the softmax of each row",
            _describe_worst(got, expected, ("row", "column")),
            "first pass: running max m and sum l over the tiles; second pass: out = exp(x - m) / l.",
        )
    return f"{len(cases)} shapes, including a max in the last tile and scores near 1000"


# --------------------------------------------------------------------------- puzzle 5: one block of the pool

# The pool has notebook 03's and 07's layout, [num_blocks, heads, block_size, head_dim], and the
# kernel is handed its strides in that order (s_block, s_head, s_slot), as 07's kernel is. A pool
# element holds its own offset from the first element of the pool's storage plus 0.5, so every
# value the kernel stored says which address it loaded from; 0 (a masked lane) and UNWRITTEN
# (never written) are whole numbers, so neither can be taken for a pool value. The slots past the
# sequence's length in its last block hold NaN (what an earlier sequence left there).

# How a pool lies in memory (``_BlockCase.layout``): its storage's shape, and which of the storage's
# axes are the pool's (block, head, slot, column).
_POOL_LAYOUTS = ("contiguous", "padded", "slot-major")
_POOL_PADDING = 2  # columns of storage past head_dim in each slot of a "padded" pool


def _storage_axes(layout: str) -> tuple[int, int, int, int]:
    """Where the pool's axes (block, head, slot, column) are in the storage's axes."""
    return (0, 2, 1, 3) if layout == "slot-major" else (0, 1, 2, 3)


def _coded_pool(case: _BlockCase) -> torch.Tensor:
    """The 4-D pool [num_blocks, heads, block_size, head_dim]: a view of a coded storage (its own
    tensor) laid out as ``case.layout`` says; the stale slots of the sequence's last block NaN."""
    storage = case.storage_shape
    coded = (0.5 + torch.arange(math.prod(storage), dtype=torch.float32)).view(storage)
    pool = coded.permute(*_storage_axes(case.layout))[..., : case.head_dim]
    used = case.length - (len(case.table) - 1) * case.block_size  # tokens in the sequence's last block
    pool[case.table[-1], :, used:] = math.nan
    return pool


def _where_from(value: float, case: _BlockCase) -> str:
    """The pool element whose code is ``value``, as ``pool[block, head, slot, column]``."""
    if math.isnan(value):
        return "NaN (a stale slot past the sequence's length)"
    if value == 0.0:
        return "0 (a masked lane)"
    shape = case.storage_shape
    offset = int(value - 0.5)
    if value != offset + 0.5 or not 0 <= offset < math.prod(shape):
        return f"{value:g} (not a pool value)"
    index = []
    for size in reversed(shape):
        offset, rest = divmod(offset, size)
        index.insert(0, rest)
    block, head, slot, column = (index[axis] for axis in _storage_axes(case.layout))
    padding = f" (padding past head_dim {case.head_dim}, not part of the pool)" if column >= case.head_dim else ""
    return f"pool[{block}, {head}, {slot}, {column}]{padding}"


def _block_as(pool: torch.Tensor, physical: int, head: int, rows: int, by: str) -> torch.Tensor | None:
    """The [BLOCK, D] tile a kernel loads from ``pool`` (a view of a storage that starts where the
    pool does), right or as a bug does; None where the bug's addresses leave the pool's storage.

    by: "right" (rows < ``rows`` loaded, the rest 0), "unmasked" (every slot loaded), "columns"
    (the mask switched off columns >= rows instead), "swapped" (slot and column strides exchanged),
    "head and slot" (the head and slot strides exchanged), "contiguous" (the head and slot strides of
    a contiguous pool, worked out by hand: head * BLOCK * D, slot * D).
    """
    _, heads, block_size, head_dim = pool.shape
    s_block, s_head, s_slot = pool.stride(0), pool.stride(1), pool.stride(2)
    if by == "contiguous":
        s_head, s_slot = block_size * head_dim, head_dim
    if by == "head and slot":
        s_head, s_slot = s_slot, s_head
    flat = pool.as_strided((pool.untyped_storage().nbytes() // pool.element_size(),), (1,))
    slots = torch.arange(block_size)[:, None]  # [BLOCK, 1]
    columns = torch.arange(head_dim)[None, :]  # [1, D]
    base = physical * s_block + head * s_head
    at = base + (slots + columns * s_slot if by == "swapped" else slots * s_slot + columns)  # [BLOCK, D]
    if int(at.max()) >= flat.numel():
        return None
    tile = flat[at]
    if by == "unmasked":
        return tile
    if by == "columns":
        return torch.where(columns < rows, tile, torch.zeros(()))
    return torch.where(slots < rows, tile, torch.zeros(()))


@dataclass(frozen=True)
class _BlockCase:
    description: str
    table: tuple[int, ...]  # logical block -> physical block
    num_blocks: int
    block_size: int
    heads: int
    head_dim: int
    length: int
    logical: int
    head: int
    layout: str = "contiguous"  # one of _POOL_LAYOUTS

    @property
    def rows(self) -> int:
        """How many slots of the logical block hold tokens."""
        return min(self.block_size, self.length - self.logical * self.block_size)

    @property
    def storage_shape(self) -> tuple[int, int, int, int]:
        """The shape of the tensor whose view the pool is."""
        if self.layout == "slot-major":
            return self.num_blocks, self.block_size, self.heads, self.head_dim
        padding = _POOL_PADDING if self.layout == "padded" else 0
        return self.num_blocks, self.heads, self.block_size, self.head_dim + padding

    @property
    def strides(self) -> tuple[int, int, int]:
        """The pool's (s_block, s_head, s_slot), as the launcher passes them."""
        pool = torch.empty(self.storage_shape).permute(*_storage_axes(self.layout))
        return pool.stride(0), pool.stride(1), pool.stride(2)

    @property
    def scenario(self) -> str:
        stale = self.length % self.block_size
        slots = f"slot {stale}" if stale == self.block_size - 1 else f"slots {stale} to {self.block_size - 1}"
        stale_note = f", {slots} of physical block {self.table[-1]} stale (NaN)" if stale else ""
        return (
            f"load_block: {self.description}: pool [{self.num_blocks}, {self.heads}, {self.block_size}, "
            f"{self.head_dim}]{self.strides_note}, block table {list(self.table)}, length {self.length}"
            f"{stale_note}, logical block {self.logical}, head {self.head}, grid (1,)"
        )

    @property
    def strides_note(self) -> str:
        if self.layout == "contiguous":
            return ""
        s_block, s_head, s_slot = self.strides
        return f" with strides (s_block {s_block}, s_head {s_head}, s_slot {s_slot}, 1)"


_BLOCK_CASES = (
    # Physical block 3, not 2: a kernel with the strides of a smaller pool hard-coded (s_block 32 where this
    # pool's is 64) would read 2 * 32, exactly logical block 1, and be told it skipped the table.
    _BlockCase("a full block in the middle of a sequence", (5, 3, 7), 9, 8, 2, 4, 21, 1, 1),
    _BlockCase("the last block, 3 of its 8 slots hold tokens", (3, 0, 6), 8, 8, 2, 4, 19, 2, 0),
    _BlockCase("one token in a block of 4, head 2 of 3", (4, 1), 6, 4, 3, 4, 5, 1, 2),
    _BlockCase(
        "a pool whose slots lie 6 apart, not head_dim 4 (a view of a wider tensor)", (2, 0), 4, 4, 2, 4, 7, 0, 1,
        "padded",
    ),
    _BlockCase(
        "a pool stored [blocks, block_size, heads, head_dim] and viewed as [blocks, heads, block_size, head_dim] "
        "(its heads lie closer together than its slots)",
        (1, 4), 6, 4, 2, 4, 6, 1, 1, "slot-major",
    ),
)  # fmt: skip


def _random_block_case(description: str, rng, layout: str | None = None) -> _BlockCase:
    """A case drawn from ``rng`` (a random.Random): sizes, a scrambled table, a ragged length, a layout."""
    block_size = rng.choice((4, 8, 16))
    head_dim = rng.choice(tuple(d for d in (4, 8, 16) if d <= block_size))
    heads = rng.randint(1, 4)
    logical_blocks = rng.randint(2, 5)
    num_blocks = logical_blocks + rng.randint(2, 6)
    table = tuple(rng.sample([b for b in range(num_blocks)], logical_blocks))
    if all(physical == logical for logical, physical in enumerate(table)):
        table = table[1:] + table[:1]  # a table that maps each block to itself would hide a skipped lookup
    length = rng.randint((logical_blocks - 1) * block_size + 1, logical_blocks * block_size)
    logical = rng.randrange(logical_blocks)
    layout = layout or rng.choice(("contiguous", "contiguous", "padded", "slot-major"))
    return _BlockCase(
        description, table, num_blocks, block_size, heads, head_dim, length, logical, rng.randrange(heads), layout
    )


def _run_block_case(kernel: KernelUnderTest, case: _BlockCase) -> None:
    scenario = case.scenario
    pool = _coded_pool(case)
    table = torch.tensor(case.table, dtype=torch.int32)
    out = torch.full((case.block_size, case.head_dim), UNWRITTEN)
    args = [
        pool, table, out, case.length, case.logical, case.head, pool.stride(0), pool.stride(1), pool.stride(2),
        case.block_size, case.head_dim,
    ]  # fmt: skip
    kernel.launch(scenario, (1,), args, writable={2}, iterations=1)
    physical, rows = case.table[case.logical], case.rows
    got = out
    expected = _block_as(pool, physical, case.head, rows, "right")
    if _same_bits(got, expected):
        return
    shown = f"out[s, :] = pool[{physical}, {case.head}, s, :] for " + (
        f"every slot (all {rows} hold tokens)" if rows == case.block_size else f"slots s < {rows}, 0 for the rest"
    )
    unwritten = _unwritten(got)
    if bool(unwritten.any()):
        first = [int(i) for i in torch.nonzero(unwritten)[0]]
        if bool(unwritten[rows:].all()) and not bool(unwritten[:rows].any()):
            fail(
                scenario,
                f"rows {rows} to {case.block_size - 1} of out (slots without a token) set to 0",
                "they were never written",
                "the masked load already gives 0 there (other=0.0): store the whole [BLOCK, D] tile, with "
                "no mask on the store.",
            )
        fail(
            scenario,
            shown,
            f"{int(unwritten.sum())} element(s) of out never written (first: row {first[0]}, column {first[1]})",
            "store one [BLOCK, D] tile: out_ptr + slots[:, None] * D + rd[None, :] covers every element of out.",
        )
    named = []
    if physical != case.logical:
        named.append(
            (
                _block_as(pool, case.logical, case.head, rows, "right"),
                f"the tile came from physical block {case.logical}, the logical block's own number: look the "
                f"physical block up first, physical = tl.load(table_ptr + logical_block) (here block "
                f"{physical}), then address pool_ptr + physical * s_block.",
            )
        )
    s_block, s_head, s_slot = case.strides
    named += [
        (
            _block_as(pool, physical, case.head, rows, "head and slot"),
            f"the head and slot strides are exchanged (here s_head is {s_head} and s_slot {s_slot}): the kernel is "
            "handed s_block, s_head, s_slot in that order, the order of the pool's dimensions [num_blocks, heads, "
            "block_size, head_dim] (notebook 07's kernel takes them in the same order). Address "
            "pool_ptr + physical * s_block + head * s_head + slots[:, None] * s_slot + rd[None, :].",
        ),
        (
            _block_as(pool, physical, case.head, rows, "contiguous"),
            f"the head and slot strides of a contiguous pool were worked out by hand (head * BLOCK * D, "
            f"slots * D): this pool lies otherwise in memory (s_head {s_head}, s_slot {s_slot}). Use the "
            "strides the kernel is handed: base = pool_ptr + physical * s_block + head * s_head, rows of the "
            "tile slots[:, None] * s_slot.",
        ),
        (
            _block_as(pool, physical, case.head, rows, "swapped"),
            "the slot and column strides are exchanged: slots[:, None] * 1 + rd[None, :] * s_slot walks down "
            "a column. Rows of the tile are slots (step s_slot), columns are head_dim (step 1): "
            "slots[:, None] * s_slot + rd[None, :].",
        ),
        (
            _block_as(pool, physical, case.head, rows, "unmasked"),
            f"the slots past the sequence's length (position logical_block * BLOCK + s >= length, here slots "
            f"{rows} and on) were loaded: they hold whatever an earlier sequence left there (here NaN). Mask "
            "the load: valid = logical_block * BLOCK + slots < length (shape [BLOCK]), mask=valid[:, None], "
            "other=0.0.",
        ),
        (
            _block_as(pool, physical, case.head, rows, "columns"),
            "the mask switched off columns instead of slots: a token is a row of the tile, so its [BLOCK] "
            "mask must stand on the rows, valid[:, None] (shape [BLOCK, 1], broadcast along the columns), not "
            "valid[None, :] or a mask built from rd.",
        ),
    ]
    for wrong, diagnosis in named:
        if wrong is not None and not _same_bits(wrong, expected) and _same_bits(got, wrong):
            fail(scenario, shown, "what one classic mistake gives, named below", diagnosis)
    error = (got - expected).abs().nan_to_num(nan=math.inf)
    row, column = (int(i) for i in torch.nonzero(error == error.max())[0])
    want = "0 (a slot without a token)" if row >= rows else _where_from(float(expected[row, column]), case)
    fail(
        scenario,
        shown,
        f"out[{row}, {column}] holds {_where_from(float(got[row, column]), case)} instead of {want}",
        "element (s, c) of the block lives at pool_ptr + physical * s_block + head * s_head + s * s_slot + c: "
        "build that address as a [BLOCK, D] tile, slots[:, None] * s_slot + rd[None, :], with the strides the "
        "kernel is handed (the check's pools are not all contiguous).",
    )


def _hidden_last_token_alone(kernel: KernelUnderTest, rng) -> None:
    case = _random_block_case("hidden", rng)
    logical = len(case.table) - 1
    _run_block_case(kernel, replace(case, logical=logical, length=logical * case.block_size + 1))


def _hidden_last_head(kernel: KernelUnderTest, rng) -> None:
    heads = rng.randint(3, 6)
    _run_block_case(kernel, replace(_random_block_case("hidden", rng), heads=heads, head=heads - 1))


def _hidden_random(kernel: KernelUnderTest, rng) -> None:
    _run_block_case(kernel, _random_block_case("hidden", rng))


def _hidden_not_contiguous(kernel: KernelUnderTest, rng) -> None:
    """Heads closer together than slots (slot-major): exchanged head and slot strides, or a contiguous
    pool's strides worked out by hand, read other elements; at least two heads, a head other than 0."""
    heads = rng.randint(2, 4)
    case = _random_block_case("hidden", rng, layout="slot-major")
    _run_block_case(kernel, replace(case, heads=heads, head=rng.randrange(1, heads)))


HIDDEN_BLOCK_KINDS = {
    "the last block of a sequence with a single token in it": _hidden_last_token_alone,
    "the last head of a pool with several heads": _hidden_last_head,
    "a random block of a random pool and table": _hidden_random,
    "a pool that is not contiguous (its heads closer together than its slots)": _hidden_not_contiguous,
}


@check(notebook="06_triton_warmup", builds="load_block_kernel", kernel=True)
def check_load_block_kernel(load_block_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 5: `load_block_kernel`, launched by the check with grid (1,) and the pool's strides
    (block, head, slot), copies one [BLOCK, D] block of a pool [num_blocks, heads, block_size,
    head_dim], found through the block table, into out; slots without a token give 0.

    Each pool element holds its own offset + 0.5, so a wrong value says which address was loaded;
    the stale slots past the sequence's length hold NaN. ``hidden=True`` (the hidden tests) runs every one
    of ``HIDDEN_BLOCK_KINDS``, sized by ``seed``, in place of the visible block drawn
    from ``seed``.
    """
    story = Story(visible=(functools.partial(_visible_blocks, seed=seed),), hidden=HIDDEN_BLOCK_KINDS)
    with KernelUnderTest(load_block_kernel, "load_block_kernel", LOAD_BLOCK_PARAMETERS) as kernel:
        return story.tell(kernel, seed=seed, hidden=hidden)


def _visible_blocks(kernel: KernelUnderTest, _rng: random.Random, *, seed: int) -> str:
    """The table's blocks, and one drawn from ``seed`` (a hidden seed draws only hidden kinds, whose
    messages show none of their sizes)."""
    cases = (*_BLOCK_CASES, _random_block_case(f"a block drawn with seed {seed}", random.Random(f"load_block/{seed}")))
    for case in cases:
        _run_block_case(kernel, case)
    return (
        f"{len(cases)} blocks, including a partly filled last block with stale slots and two pools that are not "
        "contiguous"
    )


# --------------------------------------------------------------------------- puzzles 6 to 8: scores and attention


# Puzzles 6 to 8 compare numbers a kernel computed from products and exponentials in float32: scores
# near 1000 keep about 1e-4 of absolute precision there, so these puzzles are held to 1e-4 (as the
# attention kernels of notebooks 07 and 09 are). A tl.dot of float32 operands on an NVIDIA GPU runs in
# TF32 by default (10 bits of mantissa): the check allows for it there.
def _score_tolerance() -> tuple[float, float]:
    return (1e-4, 1e-4) if DEVICE.type == "cpu" else (2e-3, 2e-3)


def _scores_close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Close, with -inf where -inf is expected (and nowhere else)."""
    atol, rtol = _score_tolerance()
    return strict_allclose(got, expected, atol=atol, rtol=rtol)


def _describe_scores(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, ...]) -> str:
    """The element that differs most (an infinity where a number belongs counts as the most)."""
    same = (got == expected) | (torch.isnan(got) & torch.isnan(expected))
    error = torch.where(same, torch.zeros(()), (got - expected).abs().nan_to_num(nan=math.inf, posinf=math.inf))
    index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
    where = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    return f"at {where}: {float(got[index]):.6g} instead of {float(expected[index]):.6g}"


def _named_mistake(scenario: str, shown: str, got: torch.Tensor, expected: torch.Tensor, named) -> None:
    """Fail naming the first (answer, diagnosis) of ``named`` whose answer the kernel gave."""
    for wrong, diagnosis in named:
        if wrong is not None and not _scores_close(wrong, expected) and _scores_close(got, wrong):
            fail(scenario, shown, "what one classic mistake gives, named below", diagnosis)


_NEG_INF = -math.inf

# --------------------------------------------------------------------------- puzzle 6: one block's scores

BLOCK_SCORES_PARAMETERS = _parameters(
    "q_ptr", "k_ptr", "out_ptr", "length", "scale", "BLOCK", "D", constexprs=("BLOCK", "D")
)

_BLOCK_SCORES_CASES = (
    # (description, length, BLOCK, D)
    ("13 keys in blocks of 8, head_dim 8 (the last block holds 5)", 13, 8, 8),
    ("11 keys in blocks of 4, head_dim 16 (the last block holds 3)", 11, 4, 16),
    ("16 keys in blocks of 4: whole blocks", 16, 4, 8),
    ("1 key in a block of 4", 1, 4, 4),
)


@check(notebook="06_triton_warmup", builds="block_scores_kernel", kernel=True)
def check_block_scores_kernel(block_scores_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 6: `block_scores_kernel`, launched by the check with grid (cdiv(length, BLOCK),): program b
    stores the scores scale * (q . k) of the BLOCK keys of block b, -inf for the slots past the length."""
    with KernelUnderTest(block_scores_kernel, "block_scores_kernel", BLOCK_SCORES_PARAMETERS) as kernel:
        story = Story(
            visible=(_visible_block_scores,),
            hidden=HIDDEN_BLOCK_SCORES_KINDS,
            told=f"{len(_BLOCK_SCORES_CASES)} lengths, including a partly filled last block and a single key",
        )
        return story.tell(kernel, seed=seed, hidden=hidden)


def _visible_block_scores(kernel: KernelUnderTest, _rng: random.Random) -> None:
    generator = torch.Generator().manual_seed(66)
    for description, length, block, head_dim in _BLOCK_SCORES_CASES:
        _run_block_scores(kernel, description, length, block, head_dim, generator)


def _block_scores_as(q: torch.Tensor, k: torch.Tensor, block: int, scale: float, by: str) -> torch.Tensor | None:
    """The [cdiv(length, BLOCK) * BLOCK] scores, right or as a bug computes them (None: not this shape).

    by: "right"; "zero" (the slots past the length keep the score of a zero key, 0); "no scale";
    "summed over slots" (tl.sum over axis 0, possible only when D == BLOCK); "q along the slots"
    (q[:, None] in place of q[None, :], possible only when D == BLOCK).
    """
    length, head_dim = k.shape
    capacity = _cdiv(length, block) * block
    keys = torch.zeros(capacity, head_dim, dtype=torch.float64)
    keys[:length] = k.double()
    q = q.double()
    valid = torch.arange(capacity) < length
    if by in ("summed over slots", "q along the slots"):
        if head_dim != block:
            return None
        tiles = keys.view(-1, block, head_dim)  # [blocks, BLOCK, D]
        if by == "summed over slots":
            raw = (tiles * q[None, None, :]).sum(dim=1)  # [blocks, D]: one number per column
        else:
            raw = (tiles * q[None, :, None]).sum(dim=2)  # [blocks, BLOCK]: q[s] times the row's sum
        scores = raw.reshape(-1) * scale
    else:
        scores = (keys @ q) * (1.0 if by == "no scale" else scale)
    filler = 0.0 if by == "zero" else _NEG_INF
    return torch.where(valid, scores, torch.full((), filler, dtype=torch.float64)).float()


def _run_block_scores(
    kernel: KernelUnderTest, description: str, length: int, block: int, head_dim: int, generator
) -> None:
    programs = _cdiv(length, block)
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
    expected = _block_scores_as(q, k, block, scale, "right")
    if _scores_close(out, expected):
        return
    shown = f"out[i] = scale * (q . k[i]) for i < {length}" + (
        f", -inf for i in {length}..{capacity - 1}" if capacity > length else ""
    )
    unwritten = _unwritten(out)
    if bool(unwritten.any()):
        missing = [int(i) for i in torch.nonzero(unwritten).flatten()]
        if min(missing) >= length:
            fail(
                scenario,
                shown,
                f"out[{missing[0]}] and on (slots past the length) never written",
                "store the whole block, masked slots included: their score is -inf (s = tl.where(valid, s, "
                "-float('inf'))), so that exp(score - m) makes them 0 in a softmax.",
            )
        fail(
            scenario,
            shown,
            f"{len(missing)} of the {capacity} scores never written (first: out[{missing[0]}])",
            "program b handles block b: rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK), and it stores "
            "out_ptr + rows.",
        )
    _named_mistake(
        scenario,
        shown,
        out,
        expected,
        (
            (
                _block_scores_as(q, k, block, scale, "zero"),
                "the slots past the length kept the score of the zero key the masked load gave them (0). A score "
                "of 0 would take part in a softmax: give them -inf, s = tl.where(valid, s, -float('inf')).",
            ),
            (
                _block_scores_as(q, k, block, scale, "no scale"),
                "the scores are not multiplied by scale (1/sqrt(head_dim)): s = tl.sum(k * q[None, :], axis=1) "
                "* scale.",
            ),
            (
                _block_scores_as(q, k, block, scale, "summed over slots"),
                "the product was summed over the slots (axis 0), giving one number per column of head_dim. A "
                "score is the sum over head_dim of one key's row: tl.sum(k * q[None, :], axis=1), shape [BLOCK].",
            ),
            (
                _block_scores_as(q, k, block, scale, "q along the slots"),
                "q was stood along the slots (q[:, None], shape [D, 1]), so row s was multiplied by q[s]. q must "
                "run along the columns of the [BLOCK, D] block: q[None, :], shape [1, D].",
            ),
        ),
    )
    if bool(torch.isnan(out).any()):
        fail(
            scenario,
            shown,
            f"NaN at out[{int(torch.nonzero(torch.isnan(out))[0])}]",
            "a score of NaN comes from a lane that loaded what is not a key: load k with mask=valid[:, None], "
            "other=0.0, and q with its D lanes (tl.arange(0, D)).",
        )
    fail(
        scenario,
        shown,
        _describe_scores(out, expected, ("slot",)),
        "key i of block b is row b * BLOCK + i of k, at k_ptr + (b * BLOCK + i) * D: load the [BLOCK, D] block "
        "rows[:, None] * D + rd[None, :], multiply by q[None, :], sum along axis 1, times scale.",
    )


def _scores_kind(draw):
    """A hidden kind: ``draw(rng)`` gives (length, BLOCK, D); the values come from the same rng."""

    def run(kernel: KernelUnderTest, rng) -> None:
        length, block, head_dim = draw(rng)
        _run_block_scores(kernel, "hidden", length, block, head_dim, torch.Generator().manual_seed(rng.getrandbits(31)))

    return run


def _ragged_length(rng, block: int) -> int:
    """Two to four blocks, the last one partly filled."""
    return block * rng.randint(1, 3) + rng.randint(1, block - 1)


HIDDEN_BLOCK_SCORES_KINDS = {
    "several blocks, the last one partly filled": _scores_kind(
        lambda rng: (lambda block: (_ragged_length(rng, block), block, rng.choice((4, 8, 16))))(rng.choice((4, 8)))
    ),
    "whole blocks only": _scores_kind(
        lambda rng: (lambda block: (block * rng.randint(2, 4), block, rng.choice((4, 8, 16))))(rng.choice((4, 8)))
    ),
    "a block as wide as it is long (head_dim = BLOCK), the last one partly filled": _scores_kind(
        lambda rng: (lambda block: (_ragged_length(rng, block), block, block))(rng.choice((4, 8)))
    ),
}


# --------------------------------------------------------------------------- puzzle 7: one query's attention, online

ONLINE_ATTENTION_PARAMETERS = _parameters(
    "q_ptr", "k_ptr", "v_ptr", "out_ptr", "length", "scale", "BLOCK", "D", constexprs=("BLOCK", "D")
)


def _keys_for_scores(q: torch.Tensor, scores: torch.Tensor, scale: float, generator) -> torch.Tensor:
    """Keys k[j] (random otherwise) with scale * (q . k[j]) = scores[j] exactly (in float64)."""
    direction = q.double() / q.double().norm()
    noise = torch.randn(scores.numel(), q.numel(), generator=generator, dtype=torch.float64)
    noise -= (noise @ direction)[:, None] * direction[None, :]
    return noise + (scores.double() / (scale * q.double().norm()))[:, None] * direction[None, :]


def _online_as(scores: torch.Tensor, v: torch.Tensor, block: int, by: str) -> torch.Tensor:
    """One query's attention output, computed block by block as the kernel does, right or with one bug.

    by: "right"; "acc not rescaled", "l not rescaled", "nothing rescaled" (alpha left out of those
    updates); "zero" (the slots past the length score 0 instead of -inf); "not divided" (acc stored, not
    acc / l). ``scores`` are already scaled; float64 throughout, float32 at the end.
    """
    length, head_dim = v.shape
    s_all, v_all = scores.double(), v.double()
    m, l, acc = -math.inf, 0.0, torch.zeros(head_dim, dtype=torch.float64)
    for start in range(0, length, block):
        s = s_all[start : start + block]
        values = v_all[start : start + block]
        if by == "zero" and s.numel() < block:
            s = torch.cat([s, torch.zeros(block - s.numel(), dtype=torch.float64)])
            values = torch.cat([values, torch.zeros(block - values.shape[0], head_dim, dtype=torch.float64)])
        m_new = max(m, float(s.max()))
        alpha = math.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = (l if by in ("l not rescaled", "nothing rescaled") else l * alpha) + float(p.sum())
        acc = (acc if by in ("acc not rescaled", "nothing rescaled") else acc * alpha) + p @ values
        m = m_new
    return (acc if by == "not divided" else acc / l).float()


@dataclass(frozen=True)
class _AttentionCase:
    description: str
    length: int
    block: int
    head_dim: int
    profile: str  # "rising" (the max in the last block), "negative" (about -150), "huge" (about 1000), "early"

    @property
    def scenario(self) -> str:
        return (
            f"online_attention: {self.description}: length {self.length}, BLOCK = {self.block}, D = {self.head_dim}, "
            f"scale 1/sqrt({self.head_dim}), grid (1,)"
        )


def _profile_scores(case: _AttentionCase, generator) -> torch.Tensor:
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


_ATTENTION_CASES = (
    _AttentionCase("the largest score in the last block, the last block holding 3 of 4", 11, 4, 8, "rising"),
    _AttentionCase("one block of 8 (no masked slot), the largest score first", 8, 8, 8, "early"),
    _AttentionCase("scores near 1000 (exp overflows without the max): 9 keys in blocks of 4", 9, 4, 8, "huge"),
    _AttentionCase("every score far below zero (about -150): 10 keys in blocks of 4", 10, 4, 16, "negative"),
    _AttentionCase("a single key", 1, 4, 8, "rising"),
)


@check(notebook="06_triton_warmup", builds="online_attention_kernel", kernel=True)
def check_online_attention_kernel(online_attention_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 7: `online_attention_kernel`, launched by the check with grid (1,): one query's attention
    over keys and values read BLOCK rows at a time, with a running max, sum and accumulator."""
    with KernelUnderTest(online_attention_kernel, "online_attention_kernel", ONLINE_ATTENTION_PARAMETERS) as kernel:
        story = Story(
            visible=(_visible_attention,),
            hidden=HIDDEN_ATTENTION_KINDS,
            told=f"{len(_ATTENTION_CASES)} sequences, including a max in the last block and scores far below zero",
        )
        return story.tell(kernel, seed=seed, hidden=hidden)


def _visible_attention(kernel: KernelUnderTest, _rng: random.Random) -> None:
    generator = torch.Generator().manual_seed(67)
    for case in _ATTENTION_CASES:
        _run_attention_case(kernel, case, generator)


def _run_attention_case(kernel: KernelUnderTest, case: _AttentionCase, generator) -> None:
    scenario = case.scenario
    scale = 1.0 / math.sqrt(case.head_dim)
    q = torch.randn(case.head_dim, generator=generator, dtype=torch.float64)
    scores = _profile_scores(case, generator)
    k = _keys_for_scores(q, scores, scale, generator).float()
    v = torch.randn(case.length, case.head_dim, generator=generator)
    scores = scale * (k.double() @ q.float().double())  # what float32 keys give
    out = torch.full((case.head_dim,), UNWRITTEN)
    kernel.launch(
        scenario,
        (1,),
        [q.float(), k, v, out, case.length, scale, case.block, case.head_dim],
        writable={3},
        iterations=_cdiv(case.length, case.block),
        stray_hint="k and v hold exactly `length` rows: mask the rows of the last block past the length when "
        "loading either, valid = start + slots < length, mask=valid[:, None].",
    )
    expected = (torch.softmax(scores, dim=0) @ v.double()).float()
    if _scores_close(out, expected):
        return
    shown = "out = softmax(scale * q . k) @ v"
    if bool(_unwritten(out).any()):
        fail(scenario, shown, f"{int(_unwritten(out).sum())} of the {case.head_dim} values of out never written",
             "store the whole row once the loop is over: tl.store(out_ptr + rd, acc / l).")  # fmt: skip
    _named_mistake(
        scenario,
        shown,
        out,
        expected,
        (
            (
                _online_as(scores, v, case.block, "nothing rescaled"),
                "neither l nor acc was rescaled when a later block raised the max: both count in units of "
                "exp(m), and when m grows to m_new they must be multiplied by alpha = exp(m - m_new) before the "
                "block's terms are added.",
            ),
            (
                _online_as(scores, v, case.block, "acc not rescaled"),
                "l was rescaled when the max grew, but acc was not: acc = acc * alpha + tl.sum(p[:, None] * v, "
                "axis=0), the same alpha = exp(m - m_new) as for l.",
            ),
            (
                _online_as(scores, v, case.block, "l not rescaled"),
                "acc was rescaled when the max grew, but l was not: l = l * alpha + tl.sum(p, axis=0).",
            ),
            (
                _online_as(scores, v, case.block, "zero"),
                "the slots past the length took part in the softmax with a score of 0 (their masked keys are 0): "
                "give them -inf, s = tl.where(valid, s, -float('inf')), so that exp(s - m) is 0 there.",
            ),
            (
                _online_as(scores, v, case.block, "not divided"),
                "out holds acc, the weighted sum, not the average: store acc / l.",
            ),
            (
                (torch.softmax(scores / scale, dim=0) @ v.double()).float(),
                "the scores are not multiplied by scale (1/sqrt(head_dim)): s = tl.sum(k * q[None, :], axis=1) "
                "* scale.",
            ),
        ),
    )
    if not torch.isfinite(out).all():
        hint = {
            "negative": "every score here is far below zero, where exp(score) underflows to 0: take exp of the "
            "score minus the running max, p = tl.exp(s - m_new), and start that max at -inf (started at 0, m "
            "stays 0, exp(s - m) is 0 for every key, l stays 0 and out is 0 / 0).",
            "huge": "the scores here are huge, and exp of such a score overflows: subtract the running max before "
            "exp, p = tl.exp(s - m_new) and alpha = tl.exp(m - m_new).",
        }.get(
            case.profile,
            "NaN comes from exp of a huge score (subtract the running max), from 0 / 0 (l never grew), or "
            "from a lane that loaded what is not a key or a value (mask k and v with valid[:, None]).",
        )
        fail(scenario, shown, f"{int((~torch.isfinite(out)).sum())} NaN or inf values", hint)
    fail(
        scenario,
        shown,
        _describe_scores(out, expected, ("column",)),
        "per block: s = scale * scores of the block, -inf past the length; m_new = max(m, max(s)); "
        "alpha = exp(m - m_new); p = exp(s - m_new); l = l * alpha + sum(p); acc = acc * alpha + "
        "sum(p[:, None] * v, axis=0); m = m_new. At the end, out = acc / l.",
    )


def _attention_kind(profile: str, ragged: bool):
    def run(kernel: KernelUnderTest, rng) -> None:
        block = rng.choice((4, 8))
        length = _ragged_length(rng, block) if ragged else block * rng.randint(2, 4)
        case = _AttentionCase("hidden", length, block, rng.choice((8, 16)), profile)
        _run_attention_case(kernel, case, torch.Generator().manual_seed(rng.getrandbits(31)))

    return run


HIDDEN_ATTENTION_KINDS = {
    "the largest score in the last block, the last block partly filled": _attention_kind("rising", ragged=True),
    "every score far below zero": _attention_kind("negative", ragged=True),
    "scores near 1000": _attention_kind("huge", ragged=False),
    "whole blocks, the largest score in the first": _attention_kind("early", ragged=False),
}


# --------------------------------------------------------------------------- puzzle 8: a tile of causal scores

CAUSAL_SCORES_PARAMETERS = _parameters(
    "q_ptr", "k_ptr", "out_ptr", "start", "new_tokens", "scale", "TILE", "BLOCK", "D",
    constexprs=("TILE", "BLOCK", "D"),
)  # fmt: skip


@dataclass(frozen=True)
class _CausalCase:
    description: str
    start: int
    new_tokens: int
    tile: int
    block: int
    head_dim: int

    @property
    def total(self) -> int:
        return self.start + self.new_tokens

    @property
    def grid(self) -> tuple[int, int]:
        return _cdiv(self.new_tokens, self.tile), _cdiv(self.total, self.block)

    @property
    def scenario(self) -> str:
        return (
            f"causal_scores: {self.description}: start {self.start}, new_tokens {self.new_tokens}, TILE = "
            f"{self.tile}, BLOCK = {self.block}, D = {self.head_dim}, grid {self.grid}"
        )


_CAUSAL_CASES = (
    _CausalCase("9 new tokens after 5 cached ones (the history ends mid-block)", 5, 9, 4, 4, 16),
    _CausalCase("a fresh prompt: 8 new tokens, no history", 0, 8, 8, 4, 16),
    _CausalCase("one new token after 12 cached ones (a tile holding one query)", 12, 1, 4, 8, 16),
    _CausalCase("6 new tokens after 8 cached ones (the history ends on a block boundary), head_dim 32", 8, 6, 4, 8, 32),
)


def _causal_as(q: torch.Tensor, k: torch.Tensor, start: int, scale: float, by: str) -> torch.Tensor:
    """The [T, start + T] scores, right or with one bug: "rows" (the mask compares row numbers, not
    positions), "strict" (key < query: the diagonal left out), "one past" (key <= query + 1), "zero"
    (masked scores 0, not -inf), "no scale"."""
    new_tokens, total = q.shape[0], k.shape[0]
    scores = (q.double() @ k.double().T) * (1.0 if by == "no scale" else scale)
    rows = torch.arange(new_tokens)[:, None]
    keys = torch.arange(total)[None, :]
    queries = rows if by == "rows" else start + rows
    allowed = {"strict": keys < queries, "one past": keys <= queries + 1}.get(by, keys <= queries)
    filler = 0.0 if by == "zero" else _NEG_INF
    return torch.where(allowed, scores, torch.full((), filler, dtype=torch.float64)).float()


@check(notebook="06_triton_warmup", builds="causal_scores_kernel", kernel=True)
def check_causal_scores_kernel(causal_scores_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 8: `causal_scores_kernel`, launched by the check with grid (cdiv(T, TILE), cdiv(start + T,
    BLOCK)): program (t, b) stores the [TILE, BLOCK] tile of scale * q . k, -inf where the key's position
    is past the query's (start + row); rows past T and keys past start + T are neither loaded nor stored."""
    with KernelUnderTest(causal_scores_kernel, "causal_scores_kernel", CAUSAL_SCORES_PARAMETERS) as kernel:
        story = Story(
            visible=(_visible_causal,),
            hidden=HIDDEN_CAUSAL_KINDS,
            told=f"{len(_CAUSAL_CASES)} chunks, including a history that ends mid-block and a tile holding one query",
        )
        return story.tell(kernel, seed=seed, hidden=hidden)


def _visible_causal(kernel: KernelUnderTest, _rng: random.Random) -> None:
    generator = torch.Generator().manual_seed(68)
    for case in _CAUSAL_CASES:
        _run_causal_case(kernel, case, generator)


def _run_causal_case(kernel: KernelUnderTest, case: _CausalCase, generator) -> None:
    scenario = case.scenario
    scale = 1.0 / math.sqrt(case.head_dim)
    q = torch.randn(case.new_tokens, case.head_dim, generator=generator)
    k = torch.randn(case.total, case.head_dim, generator=generator)
    out = torch.full((case.new_tokens, case.total), UNWRITTEN)
    kernel.launch(
        scenario,
        case.grid,
        [q, k, out, case.start, case.new_tokens, scale, case.tile, case.block, case.head_dim],
        writable={2},
        iterations=math.prod(case.grid),
        stray_hint="q holds exactly new_tokens rows, k exactly start + new_tokens, and out is [new_tokens, "
        "start + new_tokens]: the last tile's rows past new_tokens and the last block's keys past start + "
        "new_tokens must be masked, on the loads and on the store.",
    )
    expected = _causal_as(q, k, case.start, scale, "right")
    if _scores_close(out, expected):
        return
    shown = f"out[t, j] = scale * (q[t] . k[j]) where key j <= position {case.start} + t, -inf where j is in its future"
    unwritten = _unwritten(out)
    if bool(unwritten.any()):
        t, j = (int(i) for i in torch.nonzero(unwritten)[0])
        fail(
            scenario,
            shown,
            f"{int(unwritten.sum())} scores never written (first: out[{t}, {j}])",
            "every program stores its whole [TILE, BLOCK] tile at out_ptr + rows[:, None] * (start + new_tokens) "
            "+ keys[None, :] (a row of out holds a score for every key), -inf included (a key in a row's future "
            "still needs its -inf), masked only where a row or a key does not exist: "
            "mask=(rows < new_tokens)[:, None] & (keys < start + new_tokens)[None, :].",
        )
    _named_mistake(
        scenario,
        shown,
        out,
        expected,
        (
            (
                _causal_as(q, k, case.start, scale, "rows"),
                f"the mask compared key positions with row numbers t: new token t sits at position start + t (here "
                f"{case.start} + t), and may see every key up to there, the whole history included. Mask with "
                "keys[None, :] <= (start + rows)[:, None].",
            ),
            (
                _causal_as(q, k, case.start, scale, "strict"),
                "each query did not see its own key: a token attends to itself. The mask is key position <= query "
                "position (<=, not <).",
            ),
            (
                _causal_as(q, k, case.start, scale, "one past"),
                "each query also saw the next position, its future: the mask is key position <= query position.",
            ),
            (
                _causal_as(q, k, case.start, scale, "zero"),
                "masked scores were stored as 0: a score of 0 would take part in a softmax. Masked scores are "
                "-inf: tl.where(causal, s, -float('inf')).",
            ),
            (
                _causal_as(q, k, case.start, scale, "no scale"),
                "the scores are not multiplied by scale (1/sqrt(head_dim)).",
            ),
        ),
    )
    fail(
        scenario,
        shown,
        _describe_scores(out, expected, ("new token", "key")),
        "program (t, b) answers rows t * TILE + tl.arange(0, TILE) (positions start + rows) against keys "
        "b * BLOCK + tl.arange(0, BLOCK): scores tl.dot(q, tl.trans(k)) (or tl.sum(q[:, None, :] * k[None, :, :], "
        "axis=2)) times scale, -inf where keys[None, :] > (start + rows)[:, None], stored at out_ptr + "
        "rows[:, None] * (start + new_tokens) + keys[None, :].",
    )


def _causal_kind(kind: str):
    def run(kernel: KernelUnderTest, rng) -> None:
        tile, block, head_dim = rng.choice((4, 8)), rng.choice((4, 8)), rng.choice((16, 32))
        if kind == "mid-block":  # start mid-block, a partly filled last tile, keys ending mid-block
            start = block * rng.randint(0, 2) + rng.randint(1, block - 1)
            new_tokens = tile * rng.randint(1, 2) + rng.randint(1, tile - 1)
            if (start + new_tokens) % block == 0:
                start += 1 if start % block < block - 1 else -1
        elif kind == "fresh":
            start, new_tokens = 0, rng.randint(2, 3 * tile)
        else:
            start, new_tokens = rng.randint(block, 4 * block), 1
        case = _CausalCase("hidden", start, new_tokens, tile, block, head_dim)
        _run_causal_case(kernel, case, torch.Generator().manual_seed(rng.getrandbits(31)))

    return run


HIDDEN_CAUSAL_KINDS = {
    "a chunk after a history that ends mid-block, its last tile partly filled": _causal_kind("mid-block"),
    "a fresh prompt (no history)": _causal_kind("fresh"),
    "one new token after a history": _causal_kind("one"),
}
