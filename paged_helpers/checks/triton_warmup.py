"""Checks for notebook 06, the Triton warm-up: four small kernels before the paged one.

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

import torch

from ..device import DEVICE
from .guard_bands import GUARD, SENTINEL, Guarded
from .isolated import Outcome, run_isolated
from .launcher_reads import launcher_inputs
from .report import CheckFailed, NotImplementedYet, check, fail, refuse
from .strict import genuine_triton_kernel, strict_allclose

__all__ = ["check_scale_kernel", "check_row_max_kernel", "check_gather_rows_kernel", "check_softmax_kernel"]

TIME_LIMIT_S = 15.0
ATOL = RTOL = 1e-5


def _watched_call(launcher: Callable, args: tuple, outputs: tuple[Guarded, ...]) -> Callable[[], tuple]:
    """A call of the launcher that also counts Triton launches and returns the output buffers whole."""

    def call():
        from triton.runtime import jit

        launches = 0
        original = jit.KernelInterface.__getitem__
        # The output buffers just before the first launch and just after the last one: the kernel's
        # own writes lie between, so any other change to them was made outside the kernel.
        first_before: list[tuple] = []
        last_after: list[tuple] = []
        not_triton: list[str] = []

        def snapshot() -> tuple:
            with torch._C.DisableTorchFunction():
                return tuple(output.buffer.detach().clone() for output in outputs)

        def counting(kernel, grid):
            nonlocal launches
            launches += 1
            if not genuine_triton_kernel(kernel):
                not_triton.append(type(kernel).__name__)
            launch = original(kernel, grid)

            def run(*launch_args, **launch_kwargs):
                if not first_before:
                    first_before.append(snapshot())
                returned = launch(*launch_args, **launch_kwargs)
                last_after[:] = [snapshot()]
                return returned

            return run

        jit.KernelInterface.__getitem__ = counting
        try:
            with launcher_inputs(args):
                returned = launcher(*args)
        finally:
            jit.KernelInterface.__getitem__ = original
        return (
            returned,
            launches,
            tuple(output.buffer for output in outputs),
            first_before[0] if first_before else None,
            last_after[0] if last_after else None,
            bool(not_triton),
        )

    return call


def _last_lines(text: str, count: int = 12) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-count:])


def _run(what: str, launcher: Callable, args: tuple, outputs: tuple[Guarded, ...], scenario: str) -> tuple:
    """Run the launcher (isolated under the interpreter); every failure becomes a learner's message.

    Returns the output buffers as they were after the call.
    """
    initial = tuple(output.buffer.detach().cpu().clone() for output in outputs)
    outcome: Outcome = run_isolated(_watched_call(launcher, args, outputs), (), TIME_LIMIT_S)
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


# --------------------------------------------------------------------------- puzzle 1: scale

_SCALE_CASES = ((1, 8), (8, 8), (13, 8), (29, 8), (29, 16))  # (n, BLOCK)


@check(notebook="06_triton_warmup", builds="scale")
def check_scale_kernel(scale: Callable) -> str:
    """Puzzle 1: ``scale(x, out, factor, block)`` fills out[i] = factor * x[i] with one program per tile.

    Lengths: 1, exactly one tile, one tile and a bit, several tiles with a ragged end.
    """
    generator = torch.Generator().manual_seed(6)
    for n, block in _SCALE_CASES:
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
    return f"{len(_SCALE_CASES)} lengths, guard bands intact"


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
def check_row_max_kernel(row_max: Callable) -> str:
    """Puzzle 2: ``row_max(x, out)``: out[r] = max of row r, one program per row, rows strided."""
    generator = torch.Generator().manual_seed(62)
    cases = _row_max_inputs(generator)
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
def check_gather_rows_kernel(gather_rows: Callable) -> str:
    """Puzzle 3: ``gather_rows(table, index, out)``: out[i] = table[index[i]], one program per output row.

    The table's row r holds r + 0.01 * column, so a wrong row is named by the values it brought back.
    """
    cases = (
        ("5 rows from a table of 7, scrambled, row 4 twice", [4, 0, 6, 4, 2], 7, 8),
        ("1 row", [3], 4, 16),
        ("6 rows in table order", [0, 1, 2, 3, 4, 5], 6, 8),
    )
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
def check_softmax_kernel(softmax: Callable) -> str:
    """Puzzle 4: ``softmax(x, out, block)``: a row softmax computed tile by tile with a running max and sum."""
    generator = torch.Generator().manual_seed(64)
    cases = _softmax_cases(generator)
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
