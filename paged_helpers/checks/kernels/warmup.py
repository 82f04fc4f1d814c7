"""Checks for notebook 06, the Triton warm-up: five small kernels before the paged one.

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
softmax that never rescales its sum, a pool read with a contiguous pool's strides) and names
the mistake if the learner's output matches it. Every scenario is a few dozen
program-iterations (a few ms each in the interpreter).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ..reading.strict import strict_allclose
from ..speaking.failure import fail
from ..speaking.report import check, run_hidden_scenarios
from .launching import KernelLaunchFailed, KernelUnderTest, Parameter

__all__ = [
    "GATHER_ROWS_PARAMETERS",
    "LOAD_BLOCK_PARAMETERS",
    "ROW_MAX_PARAMETERS",
    "SCALE_PARAMETERS",
    "SOFTMAX_PARAMETERS",
    "UNWRITTEN",
    "check_gather_rows_kernel",
    "check_load_block_kernel",
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
    "pool_ptr", "table_ptr", "out_ptr", "length", "logical_block", "head", "s_block", "s_slot", "s_head",
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


def _hidden(run_cases: Callable, draw_cases: Callable, kernel: KernelUnderTest, seed: int) -> str:
    """The hidden scenarios of a puzzle: its own scenario loop on cases drawn from the grader's seed."""
    run_hidden_scenarios(
        {"sizes drawn from the grader's seed": lambda learner, rng: run_cases(learner, draw_cases(rng))},
        seed,
        1,
        kernel,
    )
    return "hidden scenarios"


# --------------------------------------------------------------------------- puzzle 1: scale

_SCALE_CASES = ((1, 8, 2.5), (8, 8, 2.5), (13, 8, 2.5), (29, 8, 2.5), (29, 16, 2.5))  # (n, BLOCK, factor)


@check(notebook="06_triton_warmup", builds="scale_kernel", kernel=True)
def check_scale_kernel(scale_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 1: `scale_kernel`, launched by the check with grid (cdiv(n, BLOCK),): out[i] = factor * x[i].

    Lengths: 1, exactly one tile, one tile and a bit, several tiles with a ragged end; hidden: lengths,
    tile sizes and factors drawn from the grader's seed.
    """
    with KernelUnderTest(scale_kernel, "scale_kernel", SCALE_PARAMETERS) as kernel:
        if hidden:
            return _hidden(_scale_cases, _random_scale_cases, kernel, seed)
        return _scale_cases(kernel, _SCALE_CASES)


def _random_scale_cases(rng) -> tuple:
    blocks = [rng.choice((4, 8, 16, 32)) for _ in range(3)]
    return tuple((rng.randint(1, 5 * block - 1), block, rng.choice((2.5, -0.75, 3.0))) for block in blocks)


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
        if hidden:
            return _hidden(_row_max_cases, _random_row_max_inputs, kernel, seed)
        return _row_max_cases(kernel, _row_max_inputs(torch.Generator().manual_seed(62)))


def _random_row_max_inputs(rng) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    for _ in range(3):
        rows, cols = rng.randint(1, 5), rng.randint(1, 12)
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
        if hidden:
            return _hidden(_gather_rows_cases, _random_gather_cases, kernel, seed)
        return _gather_rows_cases(kernel, _GATHER_CASES)


def _random_gather_cases(rng) -> list[tuple]:
    cases = []
    for _ in range(3):
        table_rows, width = rng.randint(2, 9), rng.choice((4, 8, 16))
        picks = [rng.randrange(table_rows) for _ in range(rng.randint(1, 7))]
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
        if hidden:
            return _hidden(_softmax_run, _random_softmax_cases, kernel, seed)
        return _softmax_run(kernel, _softmax_cases(torch.Generator().manual_seed(64)))


def _random_softmax_cases(rng) -> list[tuple[str, torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    for _ in range(3):
        rows, cols, block = rng.randint(1, 3), rng.randint(1, 24), rng.choice((4, 8))
        shift = rng.choice((0.0, -3.0, 1000.0))  # around 0, all negative, or where exp overflows without the max
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

# A pool element holds its own offset from the pool's first element plus 0.5, so every value the
# kernel stored says which address it loaded from; 0 (a masked lane) and UNWRITTEN (never
# written) are whole numbers, so neither can be taken for a pool value. The slots past the
# sequence's length in its last block hold NaN (what an earlier sequence left there).


def _coded_pool(case: _BlockCase) -> torch.Tensor:
    """The 4-D pool [num_blocks, block_size, heads, head_dim]: a view of a coded storage-shaped
    tensor (columns past ``head_dim`` are padding, so the head stride may exceed head_dim), its
    own storage; the stale slots of the sequence's last block set to NaN."""
    storage = case.storage_shape
    coded = (0.5 + torch.arange(math.prod(storage), dtype=torch.float32)).view(storage)
    used = case.length - (len(case.table) - 1) * case.block_size  # tokens in the sequence's last block
    coded[case.table[-1], used:] = math.nan
    return coded[..., : case.head_dim]


def _where_from(value: float, shape: tuple[int, int, int, int], head_dim: int) -> str:
    """The pool element whose code is ``value``, as ``pool[block, slot, head, column]``; ``shape``
    is the storage's (head_dim with its padding)."""
    if math.isnan(value):
        return "NaN (a stale slot past the sequence's length)"
    if value == 0.0:
        return "0 (a masked lane)"
    offset = int(value - 0.5)
    if value != offset + 0.5 or not 0 <= offset < math.prod(shape):
        return f"{value:g} (not a pool value)"
    _, block_size, heads, storage_dim = shape
    block, rest = divmod(offset, block_size * heads * storage_dim)
    slot, rest = divmod(rest, heads * storage_dim)
    head, column = divmod(rest, storage_dim)
    padding = f" (padding past head_dim {head_dim}, not part of the pool)" if column >= head_dim else ""
    return f"pool[{block}, {slot}, {head}, {column}]{padding}"


def _block_as(pool: torch.Tensor, physical: int, head: int, rows: int, by: str) -> torch.Tensor | None:
    """The [BLOCK, D] tile a kernel loads from ``pool`` (a view of a storage that starts where the
    pool does), right or as a bug does; None where the bug's addresses leave the pool.

    by: "right" (rows < ``rows`` loaded, the rest 0), "unmasked" (every slot loaded), "columns"
    (the mask switched off columns >= rows instead), "swapped" (slot and column strides exchanged),
    "packed heads" (head * D where head * s_head belongs).
    """
    _, block_size, _, head_dim = pool.shape
    s_block, s_slot, s_head = pool.stride(0), pool.stride(1), pool.stride(2)
    flat = pool.as_strided((pool.untyped_storage().nbytes() // pool.element_size(),), (1,))
    slots = torch.arange(block_size)[:, None]  # [BLOCK, 1]
    columns = torch.arange(head_dim)[None, :]  # [1, D]
    base = physical * s_block + head * (head_dim if by == "packed heads" else s_head)
    if by == "swapped":
        at = base + slots * 1 + columns * s_slot  # [BLOCK, D]
        if int(at.max()) >= flat.numel():
            return None
        return torch.where(slots < rows, flat[at], torch.zeros(()))
    tile = flat[base + slots * s_slot + columns]  # [BLOCK, D]
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
    head_padding: int = 0  # columns of storage past head_dim in each head: s_head = head_dim + head_padding

    @property
    def rows(self) -> int:
        """How many slots of the logical block hold tokens."""
        return min(self.block_size, self.length - self.logical * self.block_size)

    @property
    def storage_shape(self) -> tuple[int, int, int, int]:
        return self.num_blocks, self.block_size, self.heads, self.head_dim + self.head_padding

    @property
    def scenario(self) -> str:
        stale = self.length % self.block_size
        stale_note = (
            f", slots {stale} to {self.block_size - 1} of physical block {self.table[-1]} stale (NaN)" if stale else ""
        )
        return (
            f"load_block: {self.description}: pool [{self.num_blocks}, {self.block_size}, {self.heads}, "
            f"{self.head_dim}]{self.strides_note}, block table {list(self.table)}, length {self.length}"
            f"{stale_note}, logical block {self.logical}, head {self.head}, grid (1,)"
        )

    @property
    def strides_note(self) -> str:
        if not self.head_padding:
            return ""
        s_head = self.head_dim + self.head_padding
        return f" with strides ({self.block_size * self.heads * s_head}, {self.heads * s_head}, {s_head}, 1)"


_BLOCK_CASES = (
    # Physical block 3, not 2: a kernel with the strides of a smaller pool hard-coded (s_block 32 where this
    # pool's is 64) would read 2 * 32, exactly logical block 1, and be told it skipped the table.
    _BlockCase("a full block in the middle of a sequence", (5, 3, 7), 9, 8, 2, 4, 21, 1, 1),
    _BlockCase("the last block, 3 of its 8 slots hold tokens", (3, 0, 6), 8, 8, 2, 4, 19, 2, 0),
    _BlockCase("one token in a block of 4, head 2 of 3", (4, 1), 6, 4, 3, 4, 5, 1, 2),
    _BlockCase(
        "a pool whose heads lie 6 apart, not head_dim 4 (a view of a wider tensor)", (2, 0), 4, 4, 2, 4, 7, 0, 1, 2
    ),
)


def _random_block_case(description: str, rng) -> _BlockCase:
    """A case drawn from ``rng`` (a random.Random): sizes, a scrambled table, a ragged length."""
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
    padding = rng.choice((0, 0, 2))
    return _BlockCase(
        description, table, num_blocks, block_size, heads, head_dim, length, logical, rng.randrange(heads), padding
    )


def _run_block_case(kernel: KernelUnderTest, case: _BlockCase) -> None:
    scenario = case.scenario
    shape = case.storage_shape
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
    shown = f"out[s, :] = pool[{physical}, s, {case.head}, :] for " + (
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
    if case.head_padding:
        named.append(
            (
                _block_as(pool, physical, case.head, rows, "packed heads"),
                f"the head was found at head * D, as if heads were packed (a contiguous pool's layout): here "
                f"they lie s_head = {case.head_dim + case.head_padding} apart (the pool is a view of a wider "
                "tensor). Use the strides the kernel is handed: base = pool_ptr + physical * s_block + "
                "head * s_head.",
            )
        )
    named += [
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
    want = (
        "0 (a slot without a token)" if row >= rows else _where_from(float(expected[row, column]), shape, case.head_dim)
    )
    fail(
        scenario,
        shown,
        f"out[{row}, {column}] holds {_where_from(float(got[row, column]), shape, case.head_dim)} instead of {want}",
        "element (s, c) of the block lives at pool_ptr + physical * s_block + s * s_slot + head * s_head + c: "
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


HIDDEN_BLOCK_KINDS = {
    "the last block of a sequence with a single token in it": _hidden_last_token_alone,
    "the last head of a pool with several heads": _hidden_last_head,
    "a random block of a random pool and table": _hidden_random,
}


@check(notebook="06_triton_warmup", builds="load_block_kernel", kernel=True)
def check_load_block_kernel(load_block_kernel: object, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 5: `load_block_kernel`, launched by the check with grid (1,) and the pool's strides,
    copies one [BLOCK, D] block of a 4-D pool, found through the block table, into out; slots
    without a token give 0.

    Each pool element holds its own offset + 0.5, so a wrong value says which address was loaded;
    the stale slots past the sequence's length hold NaN. ``hidden=True`` (the hidden tests) runs two
    of ``HIDDEN_BLOCK_KINDS``, chosen and sized by ``seed``, in place of the visible block drawn
    from ``seed``.
    """
    # The hidden run's seed is the grader's secret: a case drawn from it runs only as a hidden kind,
    # whose message shows none of its sizes.
    drawn = (
        () if hidden else (_random_block_case(f"a block drawn with seed {seed}", random.Random(f"load_block/{seed}")),)
    )
    cases = (*_BLOCK_CASES, *drawn)
    with KernelUnderTest(load_block_kernel, "load_block_kernel", LOAD_BLOCK_PARAMETERS) as kernel:
        for case in cases:
            _run_block_case(kernel, case)
        if hidden:
            run_hidden_scenarios(HIDDEN_BLOCK_KINDS, seed, 2, kernel)
    blocks = len(cases) + (2 if hidden else 0)
    return f"{blocks} blocks, including a partly filled last block with stale slots and a padded pool"
