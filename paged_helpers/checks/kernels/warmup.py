"""Checks for notebook 06, the Triton warm-up: five small kernels before the paged one.

Each puzzle gives the learner a launcher and asks for its kernel. The check calls the launcher
on seeded inputs that sit inside larger buffers:

* around every input, ``GUARD`` elements of poison (NaN, or a huge value where a reduction would
  hide NaN), and in 2-D inputs a few poisoned columns past each row (the row stride is larger
  than the row), so a load that is not masked, or a wrong stride, changes the answer;
* around every output, ``GUARD`` elements of a sentinel that must still be there afterwards, so a
  store that is not masked is caught by its footprint, not by the luck of a crash.

With Triton's interpreter the launcher runs in a forked child (see ``isolated``): a segfault or a
hang becomes a message and the notebook survives. When an answer is wrong, the check recomputes
the scenario as the classic mistake of that puzzle would (masked lanes loaded as 0 before a max,
the index table skipped, an online softmax that never rescales its sum) and names the mistake if
the learner's output matches it. Every scenario is a few dozen program-iterations (about 2.8 ms
each in the interpreter).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ...device import DEVICE
from ...learner_view.calls import run_watched
from ...running.guard_bands import GUARD, SENTINEL, Guarded
from ...running.isolated import Outcome
from ..reading.strict import strict_allclose
from ..speaking.failure import CheckFailed, NotImplementedYet, fail, refuse
from ..speaking.report import check, run_hidden_scenarios

__all__ = [
    "check_scale_kernel",
    "check_row_max_kernel",
    "check_gather_rows_kernel",
    "check_softmax_kernel",
    "check_load_block_kernel",
]

TIME_LIMIT_S = 15.0
ATOL = RTOL = 1e-5


def _last_lines(text: str, count: int = 12) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-count:])


def _run(what: str, launcher: Callable, args: tuple, outputs: tuple[Guarded, ...], scenario: str) -> tuple:
    """Run the launcher (isolated under the interpreter); every failure becomes a learner's message.

    Returns the output buffers as they were after the call.
    """
    initial = tuple(output.buffer.detach().cpu().clone() for output in outputs)
    buffers = tuple(output.buffer for output in outputs)
    outcome: Outcome = run_watched("warmup", launcher, args, TIME_LIMIT_S, buffers)
    if outcome.not_implemented:
        raise NotImplementedYet(
            f"not implemented yet: {what} raised NotImplementedError. Replace `raise NotImplementedError()` "
            "in the kernel's cell with your code, run that cell, then this check."
        )
    if outcome.kind == "crashed":
        fail(
            scenario,
            "the kernel to finish",
            f"it crashed the process ({outcome.signal_name})",
            "a load or store without a mask read or wrote far outside a tensor. The check ran your kernel "
            "in a separate process, so this notebook is still alive.",
        )
    if outcome.kind == "timed out":
        fail(
            scenario,
            "the kernel to finish (it needs well under a second)",
            f"still running after {TIME_LIMIT_S:g} s",
            "look for a loop whose bound is not the number of tiles (range(0, cols, BLOCK)).",
        )
    if outcome.kind == "raised":
        raise CheckFailed(
            f"{scenario}: {what} raised {outcome.error_type}: {outcome.error_message}\n"
            f"  where (last lines of the traceback):\n{_last_lines(outcome.error_traceback)}"
        )
    _, launches, buffers, first_before, last_after, not_triton = outcome.value
    buffers = tuple(buffer.cpu() for buffer in buffers)
    if launches == 0:
        fail(
            scenario,
            "one Triton kernel launch (kernel[grid](...))",
            "no launch",
            f"{what} returned without launching the kernel: the answer must come from your kernel.",
        )
    if not_triton:
        refuse(
            scenario,
            "a launch of your @triton.jit kernel",
            "a launch of an object that is not Triton's kernel (its class or its run method is not Triton's)",
            f"{what} must launch the kernel made by @triton.jit, unchanged: the answer must come from it.",
        )
    _require_written_by_the_kernel(scenario, what, initial, buffers, first_before, last_after)
    return buffers


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():
        a, b = a.cpu(), b.cpu()
        return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def _require_written_by_the_kernel(
    scenario: str,
    what: str,
    initial: tuple,
    buffers: tuple,
    first_before: tuple | None,
    last_after: tuple | None,
) -> None:
    """Outputs change only during kernel launches: the launcher itself must not write an answer."""
    if first_before is None or last_after is None:  # a launch object that was never called
        fail(
            scenario,
            "one Triton kernel launch (kernel[grid](...))",
            "the launch was never run",
            f"{what} made a launch object but never called it: the answer must come from your kernel.",
        )
    for before, start in zip(first_before, initial, strict=True):
        if not _same_bits(before, start):
            refuse(
                scenario,
                "the output untouched until your kernel runs",
                "the output had already changed before the kernel was launched",
                f"{what} wrote the output itself (torch, numpy or Python) before launching the kernel: the "
                "answer must come from your kernel. Keep the launcher as the notebook gives it.",
            )
    for after, final in zip(last_after, buffers, strict=True):
        if not _same_bits(after, final):
            refuse(
                scenario,
                "the output as your kernel left it",
                "the output changed after the kernel had finished",
                f"{what} changed the output after the launch (torch, numpy or Python arithmetic): the answer "
                "must come from your kernel. Keep the launcher as the notebook gives it.",
            )


def _require_guards_intact(scenario: str, name: str, output: Guarded, after: torch.Tensor, hint: str) -> None:
    outside = output.outside_writes(after, SENTINEL)
    if outside:
        shown = ", ".join(str(i) for i in outside[:6]) + (" ..." if len(outside) > 6 else "")
        fail(
            scenario,
            f"no writes outside `{name}` (shape {tuple(output.shape)})",
            f"{len(outside)} element(s) written outside it, at offsets {shown} from its first element",
            hint,
        )


def _describe_worst(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, ...]) -> str:
    error = (got - expected).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
    where = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    return f"at {where}: {float(got[index]):.6g} instead of {float(expected[index]):.6g}"


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return strict_allclose(got, expected, atol=ATOL, rtol=RTOL)


def _hidden(run_cases: Callable, draw_cases: Callable, launcher: Callable, seed: int) -> str:
    """The hidden scenarios of a puzzle: its own scenario loop on cases drawn from the grader's seed."""
    run_hidden_scenarios(
        {"sizes drawn from the grader's seed": lambda learner, rng: run_cases(learner, draw_cases(rng))},
        seed,
        1,
        launcher,
    )
    return "hidden scenarios"


# --------------------------------------------------------------------------- puzzle 1: scale

_SCALE_CASES = ((1, 8), (8, 8), (13, 8), (29, 8), (29, 16))  # (n, BLOCK)


@check(notebook="06_triton_warmup", builds="scale")
def check_scale_kernel(scale: Callable, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 1: ``scale(x, out, factor, block)`` fills out[i] = factor * x[i] with one program per tile.

    Lengths: 1, exactly one tile, one tile and a bit, several tiles with a ragged end; hidden: lengths
    and tile sizes drawn from the grader's seed.
    """
    if hidden:
        return _hidden(_scale_cases, _random_scale_cases, scale, seed)
    return _scale_cases(scale, _SCALE_CASES)


def _random_scale_cases(rng) -> tuple:
    blocks = [rng.choice((4, 8, 16, 32)) for _ in range(3)]
    return tuple((rng.randint(1, 5 * block - 1), block) for block in blocks)


def _scale_cases(scale: Callable, cases: tuple) -> str:
    # The values of x: seeded by the cases themselves (hidden cases come from the grader's seed).
    generator = torch.Generator().manual_seed(6 if cases == _SCALE_CASES else hash(cases) & 0x7FFFFFFF)
    for n, block in cases:
        scenario = f"scale: n = {n}, BLOCK = {block} ({-(-n // block)} program(s))"
        x = Guarded.around(torch.randn(n, generator=generator), fill=math.nan)
        out = Guarded.around(torch.full((n,), SENTINEL), fill=SENTINEL)
        (after,) = _run("scale", scale, (x.inner, out.inner, 2.5, block), (out,), scenario)
        _require_guards_intact(
            scenario,
            "out",
            out,
            after,
            "the last tile runs past n: store with mask=offsets < n (and load with the same mask).",
        )
        got, expected = out.inner_of(after), 2.5 * x.inner.cpu()
        unwritten = [int(i) for i in torch.nonzero(got == SENTINEL).flatten()]
        if unwritten:
            fail(
                scenario,
                f"all {n} elements written",
                f"{len(unwritten)} never written (first: element {unwritten[0]})",
                "each program handles its own tile: offsets = pid * BLOCK + tl.arange(0, BLOCK), with "
                "pid = tl.program_id(0).",
            )
        if torch.isnan(got).any():
            fail(
                scenario,
                "finite numbers",
                f"NaN at element {int(torch.nonzero(torch.isnan(got))[0])}",
                "the kernel read outside x (the check surrounds x with NaN): load with mask=offsets < n.",
            )
        if not _close(got, expected):
            fail(scenario, "out = factor * x", _describe_worst(got, expected, ("element",)), "multiply by factor.")
    return f"{len(cases)} lengths, guard bands intact"


# --------------------------------------------------------------------------- puzzle 2: row max

_POISON = 1e4  # past each row and around x: a max that sees it was not masked


def _row_max_inputs(generator: torch.Generator) -> list[tuple[str, torch.Tensor]]:
    mixed = torch.randn(3, 5, generator=generator)
    mixed[1] = -1.0 - torch.rand(5, generator=generator)  # a row of negative numbers only
    return [
        ("3 rows of 5 (row 1 entirely negative)", mixed),
        ("4 rows of 8 (a power of two: no masked lanes)", torch.randn(4, 8, generator=generator)),
        ("2 rows of 1", -torch.rand(2, 1, generator=generator) - 0.5),
    ]


@check(notebook="06_triton_warmup", builds="row_max")
def check_row_max_kernel(row_max: Callable, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 2: ``row_max(x, out)``: out[r] = max of row r, one program per row, rows strided."""
    if hidden:
        return _hidden(_row_max_cases, _random_row_max_inputs, row_max, seed)
    return _row_max_cases(row_max, _row_max_inputs(torch.Generator().manual_seed(62)))


def _random_row_max_inputs(rng) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    for _ in range(3):
        rows, cols = rng.randint(1, 5), rng.randint(1, 12)
        values = torch.randn(rows, cols, generator=generator)
        values[rng.randrange(rows)] = -1.0 - torch.rand(cols, generator=generator)  # one row all negative
        cases.append((f"{rows} rows of {cols}", values))
    return cases


def _row_max_cases(row_max: Callable, cases: list) -> str:
    for description, values in cases:
        scenario = f"row_max: {description}, row stride {values.shape[1] + 3}"
        x = Guarded.around(values, fill=_POISON, extra_columns=3)
        out = Guarded.around(torch.full((values.shape[0],), SENTINEL), fill=SENTINEL)
        (after,) = _run("row_max", row_max, (x.inner, out.inner), (out,), scenario)
        _require_guards_intact(
            scenario, "out", out, after, "one program per row stores one number: out_ptr + row, nothing else."
        )
        got, expected = out.inner_of(after), values.max(dim=1).values
        if _close(got, expected):
            continue
        as_if_zero = torch.cat([values, torch.zeros(values.shape[0], 1)], dim=1).max(dim=1).values
        if not _close(as_if_zero, expected) and _close(got, as_if_zero):
            fail(
                scenario,
                f"row maxima {expected.tolist()}",
                f"{got.tolist()}: a row of negative numbers came back as 0",
                "masked lanes were loaded as 0 (the default `other`), and 0 beats every negative number. "
                "For a max, load masked lanes as -inf: tl.load(..., mask=mask, other=-float('inf')).",
            )
        if bool((got >= _POISON).any()):
            fail(
                scenario,
                f"row maxima {expected.tolist()}",
                f"{got.tolist()}",
                f"a max of {_POISON:g} is one of the values the check put just past each row: the kernel "
                "read lanes beyond `cols` (mask them: mask = offsets < cols) or used `cols` where the row "
                "stride belongs (row r starts at x_ptr + r * stride_row).",
            )
        fail(scenario, f"row maxima {expected.tolist()}", f"{got.tolist()}", "reduce the row with tl.max(row, axis=0).")
    return f"{len(cases)} shapes, including an all-negative row"


# --------------------------------------------------------------------------- puzzle 3: gather rows


@check(notebook="06_triton_warmup", builds="gather_rows")
def check_gather_rows_kernel(gather_rows: Callable, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 3: ``gather_rows(table, index, out)``: out[i] = table[index[i]], one program per output row.

    The table's row r holds r + 0.01 * column, so a wrong row is named by the values it brought back.
    """
    if hidden:
        return _hidden(_gather_rows_cases, _random_gather_cases, gather_rows, seed)
    cases = (
        ("5 rows from a table of 7, scrambled, row 4 twice", [4, 0, 6, 4, 2], 7, 8),
        ("1 row", [3], 4, 16),
        ("6 rows in table order", [0, 1, 2, 3, 4, 5], 6, 8),
    )
    return _gather_rows_cases(gather_rows, cases)


def _random_gather_cases(rng) -> list[tuple]:
    cases = []
    for _ in range(3):
        table_rows, width = rng.randint(2, 9), rng.choice((4, 8, 16))
        picks = [rng.randrange(table_rows) for _ in range(rng.randint(1, 7))]
        cases.append((f"{len(picks)} rows from a table of {table_rows}", picks, table_rows, width))
    return cases


def _gather_rows_cases(gather_rows: Callable, cases) -> str:
    for description, picks, table_rows, width in cases:
        scenario = f"gather_rows: {description} (D = {width})"
        coded = torch.arange(table_rows, dtype=torch.float32)[:, None] + 0.01 * torch.arange(width)[None, :]
        table = Guarded.around(coded, fill=math.nan)
        index = torch.tensor(picks, dtype=torch.int32, device=DEVICE)
        out = Guarded.around(torch.full((len(picks), width), SENTINEL), fill=SENTINEL)
        (after,) = _run("gather_rows", gather_rows, (table.inner, index, out.inner), (out,), scenario)
        _require_guards_intact(
            scenario, "out", out, after, "program i writes exactly row i of out: out_ptr + i * D + arange(D)."
        )
        got, expected = out.inner_of(after), coded[index.long().cpu()]
        if _close(got, expected):
            continue
        brought = [int(math.floor(float(row[0]) + 1e-6)) if math.isfinite(float(row[0])) else None for row in got]
        if brought == list(range(len(picks))) and picks != list(range(len(picks))):
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
            f"rows {brought} ({_describe_worst(got, expected, ('output row', 'column'))})",
            "row r of the table starts at table_ptr + r * D; load D consecutive values from there.",
        )
    return f"{len(cases)} index tables, guard bands intact"


# --------------------------------------------------------------------------- puzzle 4: tiled softmax


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
    padded = -(-cols // block) * block
    zeros = torch.zeros(values.shape[0], padded - cols, dtype=values.dtype)
    wide = torch.cat([values, zeros], dim=1).double()
    m = wide.max(dim=1, keepdim=True).values
    return (torch.exp(values.double() - m) / torch.exp(wide - m).sum(dim=1, keepdim=True)).float()


def _rows_placed_with_stride(buffer_after: torch.Tensor, shape: tuple[int, ...], stride: int) -> torch.Tensor | None:
    """The output as the kernel left it, read as if row r were at out_ptr + r * ``stride``.

    None when such rows would run past the buffer."""
    rows, cols = shape
    if GUARD + (rows - 1) * stride + cols > buffer_after.numel():
        return None
    at = GUARD + torch.arange(rows)[:, None] * stride + torch.arange(cols)[None, :]
    return buffer_after[at]


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


@check(notebook="06_triton_warmup", builds="softmax")
def check_softmax_kernel(softmax: Callable, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 4: ``softmax(x, out, block)``: a row softmax computed tile by tile with a running max and sum."""
    if hidden:
        return _hidden(_softmax_run, _random_softmax_cases, softmax, seed)
    return _softmax_run(softmax, _softmax_cases(torch.Generator().manual_seed(64)))


def _random_softmax_cases(rng) -> list[tuple[str, torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    for _ in range(3):
        rows, cols, block = rng.randint(1, 3), rng.randint(1, 24), rng.choice((4, 8))
        shift = rng.choice((0.0, -3.0, 1000.0))  # around 0, all negative, or where exp overflows without the max
        cases.append((f"{rows} rows of {cols}", shift + 2 * torch.randn(rows, cols, generator=generator), block))
    return cases


def _softmax_run(softmax: Callable, cases: list) -> str:
    for description, values, block in cases:
        scenario = f"softmax: {description}, BLOCK = {block}"
        x = Guarded.around(values, fill=math.nan, extra_columns=2)
        out = Guarded.around(torch.full(values.shape, SENTINEL), fill=SENTINEL)
        (after,) = _run("softmax", softmax, (x.inner, out.inner, block), (out,), scenario)
        expected = torch.softmax(values.double(), dim=1).float()
        rows, cols = values.shape
        if rows > 1 and out.outside_writes(after, SENTINEL):
            # A masked store in the wrong place: each row right, but rows x's stride apart, running past out's end.
            placed = _rows_placed_with_stride(after, values.shape, x.row_stride)
            if placed is not None and _close(placed, expected):
                fail(
                    scenario,
                    f"row r of out at out_ptr + r * cols (out is contiguous: its rows are {cols} apart)",
                    f"every row's softmax right, but row r stored at out_ptr + r * {x.row_stride}, x's row stride, "
                    "so the last rows ran past the end of out",
                    "the store used stride_row, which is x's row stride (here x's rows are wider in memory than "
                    f"{cols} columns); out has its own layout: store row r at out_ptr + row * cols + offsets.",
                )
        _require_guards_intact(
            scenario,
            "out",
            out,
            after,
            "the second pass stores a whole tile: mask the store with offsets < cols, like the loads.",
        )
        got = out.inner_of(after)
        if _close(got, expected):
            continue
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
# kernel stored says which address it loaded from; 0 (a masked lane) and SENTINEL (never written)
# are whole numbers, so neither can be taken for a pool value.
_POOL_FILL = math.nan  # around the pool: a load that leaves it reads NaN


def _coded_pool(storage: tuple[int, int, int, int], head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The 4-D pool [*storage[:3], head_dim] for the kernel, and the same view on the CPU.

    The pool is a view of a coded ``storage``-shaped tensor (columns past ``head_dim`` are padding,
    so the head stride may exceed head_dim) that sits in a flat buffer with ``GUARD`` NaN on each side.
    """
    numel = math.prod(storage)
    buffer = torch.full((GUARD + numel + GUARD,), _POOL_FILL)
    buffer[GUARD : GUARD + numel] = 0.5 + torch.arange(numel, dtype=torch.float32)
    on_cpu = buffer[GUARD : GUARD + numel].view(storage)[..., :head_dim]
    return buffer.to(DEVICE)[GUARD : GUARD + numel].view(storage)[..., :head_dim], on_cpu


def _where_from(value: float, shape: tuple[int, int, int, int], head_dim: int) -> str:
    """The pool element whose code is ``value``, as ``pool[block, slot, head, column]``; ``shape``
    is the storage's (head_dim with its padding)."""
    if math.isnan(value):
        return "NaN (from outside the pool)"
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


def _block_as(pool: torch.Tensor, physical: int, head: int, rows: int, by: str) -> torch.Tensor:
    """The [BLOCK, D] tile a kernel loads from ``pool`` (on the CPU; a view of a contiguous storage
    that starts where the pool does), right or as a bug does.

    by: "right" (rows < ``rows`` loaded, the rest 0), "unmasked" (every slot loaded), "columns"
    (the mask switched off columns >= rows instead), "swapped" (slot and column strides exchanged),
    "packed heads" (head * D where head * s_head belongs).
    """
    _, block_size, _, head_dim = pool.shape
    s_block, s_slot, s_head = pool.stride(0), pool.stride(1), pool.stride(2)
    flat = pool.as_strided((pool.shape[0] * s_block,), (1,))
    slots = torch.arange(block_size)[:, None]  # [BLOCK, 1]
    columns = torch.arange(head_dim)[None, :]  # [1, D]
    base = physical * s_block + head * (head_dim if by == "packed heads" else s_head)
    if by == "swapped":
        at = base + slots * 1 + columns * s_slot  # [BLOCK, D]
        if int(at.max()) >= flat.numel():
            return torch.full((block_size, head_dim), math.nan)
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
    def scenario(self) -> str:
        return (
            f"load_block: {self.description}: pool [{self.num_blocks}, {self.block_size}, {self.heads}, "
            f"{self.head_dim}]{self.strides_note}, block table {list(self.table)}, length {self.length}, "
            f"logical block {self.logical}, head {self.head}"
        )

    @property
    def strides_note(self) -> str:
        if not self.head_padding:
            return ""
        s_head = self.head_dim + self.head_padding
        return f" with strides ({self.block_size * self.heads * s_head}, {self.heads * s_head}, {s_head}, 1)"


_BLOCK_CASES = (
    _BlockCase("a full block in the middle of a sequence", (5, 2, 7), 9, 8, 2, 4, 21, 1, 1),
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


def _run_block_case(load_block: Callable, case: _BlockCase) -> None:
    scenario = case.scenario
    shape = (case.num_blocks, case.block_size, case.heads, case.head_dim + case.head_padding)
    pool, pool_cpu = _coded_pool(shape, case.head_dim)
    table = torch.tensor(case.table, dtype=torch.int32, device=DEVICE)
    out = Guarded.around(torch.full((case.block_size, case.head_dim), SENTINEL), fill=SENTINEL)
    args = (pool, table, case.length, case.logical, case.head, out.inner)
    (after,) = _run("load_block", load_block, args, (out,), scenario)
    physical, rows = case.table[case.logical], case.rows
    _require_guards_intact(
        scenario,
        "out",
        out,
        after,
        "out is [BLOCK, D] and contiguous: store at out_ptr + slots[:, None] * D + rd[None, :], an address "
        "tile of exactly BLOCK x D elements.",
    )
    got = out.inner_of(after)
    expected = _block_as(pool_cpu, physical, case.head, rows, "right")
    if _same_bits(got, expected):
        return
    shown = f"out[s, :] = pool[{physical}, s, {case.head}, :] for " + (
        f"every slot (all {rows} hold tokens)" if rows == case.block_size else f"slots s < {rows}, 0 for the rest"
    )
    unwritten = got == SENTINEL
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
                _block_as(pool_cpu, case.logical, case.head, rows, "right"),
                f"the tile came from physical block {case.logical}, the logical block's own number: look the "
                f"physical block up first, physical = tl.load(table_ptr + logical_block) (here block "
                f"{physical}), then address pool_ptr + physical * s_block.",
            )
        )
    if case.head_padding:
        named.append(
            (
                _block_as(pool_cpu, physical, case.head, rows, "packed heads"),
                f"the head was found at head * D, as if heads were packed: here they lie s_head = "
                f"{case.head_dim + case.head_padding} apart (the pool is a view of a wider tensor). Use the "
                "stride the launcher passes: base = pool_ptr + physical * s_block + head * s_head.",
            )
        )
    named += [
        (
            _block_as(pool_cpu, physical, case.head, rows, "swapped"),
            "the slot and column strides are exchanged: slots[:, None] * 1 + rd[None, :] * s_slot walks down "
            "a column. Rows of the tile are slots (step s_slot), columns are head_dim (step 1): "
            "slots[:, None] * s_slot + rd[None, :].",
        ),
        (
            _block_as(pool_cpu, physical, case.head, rows, "unmasked"),
            f"the slots past the sequence's length (position logical_block * BLOCK + s >= length, here slots "
            f"{rows} and on) were loaded: they hold whatever an earlier sequence left there. Mask the load: "
            "valid = logical_block * BLOCK + slots < length (shape [BLOCK]), mask=valid[:, None], other=0.0.",
        ),
        (
            _block_as(pool_cpu, physical, case.head, rows, "columns"),
            "the mask switched off columns instead of slots: a token is a row of the tile, so its [BLOCK] "
            "mask must stand on the rows, valid[:, None] (shape [BLOCK, 1], broadcast along the columns), not "
            "valid[None, :] or a mask built from rd.",
        ),
    ]
    for wrong, diagnosis in named:
        if not _same_bits(wrong, expected) and _same_bits(got, wrong):
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
        "build that address as a [BLOCK, D] tile, slots[:, None] * s_slot + rd[None, :].",
    )


def _hidden_last_token_alone(load_block: Callable, rng) -> None:
    case = _random_block_case("hidden", rng)
    logical = len(case.table) - 1
    _run_block_case(load_block, replace(case, logical=logical, length=logical * case.block_size + 1))


def _hidden_last_head(load_block: Callable, rng) -> None:
    heads = rng.randint(3, 6)
    _run_block_case(load_block, replace(_random_block_case("hidden", rng), heads=heads, head=heads - 1))


def _hidden_random(load_block: Callable, rng) -> None:
    _run_block_case(load_block, _random_block_case("hidden", rng))


HIDDEN_BLOCK_KINDS = {
    "the last block of a sequence with a single token in it": _hidden_last_token_alone,
    "the last head of a pool with several heads": _hidden_last_head,
    "a random block of a random pool and table": _hidden_random,
}


@check(notebook="06_triton_warmup", builds="load_block")
def check_load_block_kernel(load_block: Callable, *, seed: int = 0, hidden: bool = False) -> str:
    """Puzzle 5: ``load_block(pool, block_table, length, logical_block, head, out)`` copies one
    [BLOCK, D] block of a 4-D pool, found through the block table, into out; slots without a
    token give 0.

    Each pool element holds its own offset + 0.5, so a wrong value says which address was loaded.
    ``hidden=True`` (the hidden tests) runs two of ``HIDDEN_BLOCK_KINDS``, chosen and sized by ``seed``,
    in place of the visible block drawn from ``seed``.
    """
    import random

    # The hidden run's seed is the grader's secret: a case drawn from it runs only as a hidden kind,
    # whose message shows none of its sizes.
    drawn = (
        () if hidden else (_random_block_case(f"a block drawn with seed {seed}", random.Random(f"load_block/{seed}")),)
    )
    cases = (*_BLOCK_CASES, *drawn)
    for case in cases:
        _run_block_case(load_block, case)
    if hidden:
        run_hidden_scenarios(HIDDEN_BLOCK_KINDS, seed, 2, load_block)
    blocks = len(cases) + (2 if hidden else 0)
    return f"{blocks} blocks, including a partly filled last block and a padded pool, guard bands intact"
