"""The kernel checks (notebooks 07 and 09) must pass the right kernels and name the bug in wrong ones.

Right kernels come from the instructor notebooks (``solution``). Wrong kernels are small text
edits of those same cells: the notebook is copied with one edit, and its definitions are loaded
the way learners' notebooks are (Triton needs a kernel's source, so a wrong kernel must be source).
"""

from __future__ import annotations

import argparse
import itertools
import shutil

import nbformat
import pytest
import torch
import triton
import triton.language as tl

from paged_helpers.checks import (
    CheckFailed,
    NotImplementedYet,
    check_paged_decode,
    check_paged_prefill,
    check_split_k_decode,
)
from paged_helpers.checks.kernels import attention as kernel_checks
from paged_helpers.kernel_inputs import validate_decode_inputs, validate_prefill_inputs
from paged_helpers.notebook_loader import load_definitions
from paged_helpers.reference import gather_history, paged_decode_reference, paged_prefill_reference
from paged_helpers.running.isolated import isolation_available, run_isolated

from conftest import NOTEBOOKS, solution, strip_ansi
from student_release import release_definition

DECODE = "07_paged_decode_kernel"
PREFILL = "09_paged_prefill_kernel"
# Notebooks a copy of a kernel notebook needs beside it: 09's definitions load 04's cache and 07's
# decode kernel (for the model on the learner's kernels), and 04 loads 03, which loads 02.
EARLIER = {
    PREFILL: ("02_block_allocator", "03_paged_kv_cache", "04_fork_and_copy_on_write", "07_paged_decode_kernel"),
}
_counter = itertools.count()
# Crashes and hangs are only survivable in a child process (the interpreter on Linux). On a GPU a
# wild address can poison the CUDA context and a compiled endless loop can't be interrupted.
needs_isolation = pytest.mark.skipif(not isolation_available(), reason="kernels run in-process here (GPU)")


def variant(tmp_path, notebook: str, name: str, *edits: tuple[str, str], cell: str = ""):
    """``name`` from a copy of ``notebook`` with each (old, new) edit made in exactly one code cell
    (among the cells containing ``cell``, when given)."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    for old, new in edits:
        cells = [c for c in nb.cells if c.cell_type == "code" and old in c.source and cell in c.source]
        assert len(cells) == 1, f"the edit target {old!r} is not in exactly one cell of {notebook}"
        assert cells[0].source.count(old) == 1, f"the edit target {old!r} occurs more than once"
        cells[0].source = cells[0].source.replace(old, new)
    folder = tmp_path / f"variant{next(_counter)}"
    folder.mkdir()
    for earlier in EARLIER.get(notebook, ()):
        shutil.copy(NOTEBOOKS / f"{earlier}.ipynb", folder / f"{earlier}.ipynb")
    path = folder / f"{notebook}.ipynb"
    nbformat.write(nb, path)
    return getattr(load_definitions(path, module_name=f"kernel_variant_{next(_counter)}"), name)


def message_of(check, *impl) -> str:
    try:
        check(*impl)
    except CheckFailed as error:
        return strip_ansi(str(error))
    pytest.fail(f"{check.__name__} passed a wrong kernel")


# --------------------------------------------------------------------------- right kernels pass


# Each right kernel also proves its check silent: any stderr would zero the nbgrader cell.


def test_decode_check_passes_the_notebook_kernel(capfd):
    kernel = solution(DECODE, "paged_decode_attention")
    capfd.readouterr()  # only what the check itself writes counts
    check_paged_decode(kernel)
    assert capfd.readouterr().err == ""


def test_decode_check_passes_with_another_seed():
    check_paged_decode(solution(DECODE, "paged_decode_attention"), seed=7)


def test_split_k_check_passes_the_notebook_kernel(capfd):
    kernel = solution(DECODE, "split_k_decode_attention")
    capfd.readouterr()  # only what the check itself writes counts
    check_split_k_decode(kernel)
    assert capfd.readouterr().err == ""


def test_prefill_check_passes_the_notebook_kernel(capfd):
    kernel = solution(PREFILL, "paged_prefill_attention")
    capfd.readouterr()  # only what the check itself writes counts
    check_paged_prefill(kernel)
    assert capfd.readouterr().err == ""


# --------------------------------------------------------------------------- wrong decode kernels

TABLE_LOAD = "block = tl.load(tables_ptr + seq * max_blocks + i)      # logical block i -> physical block"
DECODE_WRONG = {
    "no table lookup": ([(TABLE_LOAD, "block = i")], "never looked the block up in the block table"),
    "no length mask (scores)": (
        [('        s = tl.where(valid, s, -float("inf"))\n', "")],
        "past the sequence's length took part in the softmax",
    ),
    "no length mask at all": (
        [
            ('        s = tl.where(valid, s, -float("inf"))\n', ""),
            ("valid = i * BLOCK + slots < length ", "valid = slots < BLOCK "),
        ],
        "past the sequence's length took part in the softmax",
    ),
    "query head as KV head": ([("kvh = h // group ", "kvh = h ")], "query head h read KV head h."),
    "query head modulo KV heads": (
        [("kvh = h // group ", "kvh = h % (heads // group) ")],
        "read KV head h % kv_heads",
    ),
    "missing scale": (
        [("s = tl.sum(k * q[None, :], axis=1) * scale ", "s = tl.sum(k * q[None, :], axis=1) ")],
        "not multiplied by scale = 1 / sqrt(head_dim)",
    ),
    "no running-max rescale": (
        [
            ("l = l * alpha + tl.sum(p, axis=0)", "l = l + tl.sum(p, axis=0)"),
            (
                "acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)",
                "acc = acc + tl.sum(p[:, None] * v, axis=0)",
            ),
        ],
        "does not rescale what it has already summed",
    ),
    "no max subtracted before exp": (
        [
            ("alpha = tl.exp(m - m_new)  ", "alpha = 1.0  "),
            ("p = tl.exp(s - m_new)\n", "p = tl.exp(s)\n"),
        ],
        "NaN or inf",
    ),
}


@pytest.mark.parametrize("bug", list(DECODE_WRONG))
def test_decode_check_names_the_bug(tmp_path, bug):
    edits, expected = DECODE_WRONG[bug]
    wrong = variant(tmp_path, DECODE, "paged_decode_attention", *edits, cell="def paged_decode_kernel(")
    assert expected in message_of(check_paged_decode, wrong)


@needs_isolation
def test_decode_check_reports_a_crash_and_survives(tmp_path):
    wild = variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        (TABLE_LOAD, "block = tl.load(tables_ptr + seq * max_blocks + i + (1 << 40))"),
    )
    message = message_of(check_paged_decode, wild)
    assert "your kernel crashed the process" in message
    assert "look for a load without a mask" in message


@needs_isolation
def test_decode_check_reports_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_checks, "TIME_LIMIT_S", 2.0)
    stuck = variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        (
            "for i in range(0, tl.cdiv(length, BLOCK)):",
            "i = length * 0\n    while i < tl.cdiv(length, BLOCK):",
        ),
    )
    assert "did not finish within 2 s" in message_of(check_paged_decode, stuck)


def test_decode_check_requires_input_validation(tmp_path):
    unchecked = variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        (
            "    validate_decode_inputs(q, k_pool, v_pool, block_tables, lengths, block_size)\n"
            "    batch, q_heads, head_dim = q.shape\n    out = torch.empty_like(q)\n    ### BEGIN",
            "    batch, q_heads, head_dim = q.shape\n    out = torch.empty_like(q)\n    ### BEGIN",
        ),
    )
    message = message_of(check_paged_decode, unchecked)
    assert "length 0" in message and "names `lengths`" in message


def _unimplemented(source: str) -> str:
    """What nbgrader's generate_assignment leaves of a solution cell."""
    lines, out, inside = source.splitlines(), [], False
    for line in lines:
        if line.strip() == "### BEGIN SOLUTION":
            inside = True
            out.append(line.replace("### BEGIN SOLUTION", "raise NotImplementedError()"))
        elif line.strip() == "### END SOLUTION":
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


@pytest.mark.parametrize(
    ("notebook", "name", "check"),
    [
        (DECODE, "paged_decode_attention", check_paged_decode),
        (DECODE, "split_k_decode_attention", check_split_k_decode),
        (PREFILL, "paged_prefill_attention", check_paged_prefill),
    ],
)
def test_a_fresh_release_is_not_implemented_yet(tmp_path, notebook, name, check):
    launcher = release_definition(tmp_path, notebook, name, finished=EARLIER.get(notebook, ()))
    with pytest.raises(NotImplementedYet):
        check(launcher)


def test_an_unfinished_kernel_behind_a_finished_launcher_is_not_implemented_yet(tmp_path):
    nb = nbformat.read(NOTEBOOKS / f"{DECODE}.ipynb", as_version=4)
    kernel_cell = next(c for c in nb.cells if c.cell_type == "code" and "def paged_decode_kernel" in c.source)
    kernel_cell.source = _unimplemented(kernel_cell.source)
    path = tmp_path / f"{DECODE}.ipynb"
    nbformat.write(nb, path)
    launcher = load_definitions(path, module_name=f"release_{next(_counter)}").paged_decode_attention
    with pytest.raises(NotImplementedYet):
        check_paged_decode(launcher)


# --------------------------------------------------------------------------- wrong split-K kernels

SPLIT_MERGE = "out = (weight[..., None] * acc).sum(dim=-2) / (weight * l).sum(dim=-1, keepdim=True)"


def test_split_k_check_catches_averaged_splits(tmp_path):
    averaged = variant(
        tmp_path,
        DECODE,
        "split_k_decode_attention",
        (SPLIT_MERGE, "out = (acc / l[..., None]).nan_to_num().sum(dim=-2) / (l > 0).sum(-1, True)"),
    )
    message = message_of(check_split_k_decode, averaged)
    assert "Averaging per-split outputs is not the same" in message


def test_split_k_check_catches_empty_splits_that_poison_the_merge(tmp_path):
    naive = variant(
        tmp_path,
        DECODE,
        "split_k_decode_attention",
        ("weight = torch.exp(m - m_all) ", "weight = torch.exp(m - m) "),
    )
    message = message_of(check_split_k_decode, naive)
    assert "some splits own no block" in message and "exp(-inf - -inf)" in message


def test_split_k_check_names_a_decode_bug_inside_the_splits(tmp_path):
    wrong = variant(
        tmp_path,
        DECODE,
        "split_k_decode_attention",
        ("        block = tl.load(tables_ptr + seq * max_blocks + i)\n", "        block = i\n"),
    )
    assert "never looked the block up in the block table" in message_of(check_split_k_decode, wrong)


# --------------------------------------------------------------------------- wrong prefill kernels

CAUSAL = "causal = (k_positions[None, :] <= q_positions[:, None]) & in_cache[None, :]"
PREFILL_WRONG = {
    "causal mask excludes the diagonal": (
        [(CAUSAL, "causal = (k_positions[None, :] < q_positions[:, None]) & in_cache[None, :]")],
        "did not attend to its own position",
    ),
    "causal mask one past": (
        [(CAUSAL, "causal = (k_positions[None, :] <= q_positions[:, None] + 1) & in_cache[None, :]")],
        "also attended to the next position",
    ),
    "mask forgets start": (
        [("q_positions = start + rows ", "q_positions = rows ")],
        "compared with position t instead of start + t",
    ),
    "history skipped": (
        [
            (
                "for i in range(0, tl.cdiv(last_position, BLOCK)):",
                "for i in range(start // BLOCK, tl.cdiv(last_position, BLOCK)):",
            )
        ],
        "your loop skipped the blocks before the one holding position start",
    ),
    "no table lookup": (
        [("block = tl.load(table_ptr + i) ", "block = i ")],
        "never looked the block up in the block table",
    ),
    "query head as KV head": ([("kvh = h // group\n", "kvh = h\n")], "query head h read KV head h."),
    "missing scale": (
        [
            (
                "s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale ",
                "s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) ",
            )
        ],
        "not multiplied by scale = 1 / sqrt(head_dim)",
    ),
    "no running-max rescale": (
        [
            ("l = l * alpha + tl.sum(p, axis=1)", "l = l + tl.sum(p, axis=1)"),
            ("acc = acc * alpha[:, None] + ", "acc = acc + "),
        ],
        "does not rescale what it has already summed",
    ),
}


@pytest.mark.parametrize("bug", list(PREFILL_WRONG))
def test_prefill_check_names_the_bug(tmp_path, bug):
    edits, expected = PREFILL_WRONG[bug]
    wrong = variant(tmp_path, PREFILL, "paged_prefill_attention", *edits)
    assert expected in message_of(check_paged_prefill, wrong)


@needs_isolation
def test_prefill_check_reports_a_crash(tmp_path):
    wild = variant(
        tmp_path,
        PREFILL,
        "paged_prefill_attention",
        ("block = tl.load(table_ptr + i) ", "block = tl.load(table_ptr + i + (1 << 40)) "),
    )
    assert "your kernel crashed the process" in message_of(check_paged_prefill, wild)


# --------------------------------------------------------------------------- isolation


def _print_and_fail():
    print("hello from the child")
    raise ValueError("boom")


@needs_isolation
def test_isolated_call_captures_output_and_errors(capfd):
    outcome = run_isolated(_print_and_fail, (), time_limit=10)
    assert outcome.kind == "raised" and outcome.error_type == "ValueError" and "boom" in outcome.error_message
    assert "hello from the child" in outcome.printed
    captured = capfd.readouterr()
    assert captured.err == "" and "hello" not in captured.out


@needs_isolation
def test_isolated_call_returns_tensors():
    outcome = run_isolated(torch.arange, (5,), time_limit=10)
    assert outcome.kind == "returned" and outcome.value.tolist() == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------- references and validation


def test_decode_reference_matches_attention_on_a_contiguous_cache():
    generator = torch.Generator().manual_seed(0)
    k_pool, v_pool = torch.randn(2, 6, 2, 4, 8, generator=generator)
    q = torch.randn(2, 4, 8, generator=generator)
    tables = torch.tensor([[4, 1, 0], [2, 5, 3]])
    lengths = torch.tensor([7, 12])
    out = paged_decode_reference(q, k_pool, v_pool, tables, lengths, 4, compute_dtype=torch.float64)
    for b, length in enumerate(lengths.tolist()):
        keys = torch.cat([k_pool[block] for block in tables[b]], dim=1)[:, :length]  # [Hkv, L, D]
        values = torch.cat([v_pool[block] for block in tables[b]], dim=1)[:, :length]
        expected = torch.nn.functional.scaled_dot_product_attention(
            q[b][:, None].double(),
            keys.repeat_interleave(2, 0).double(),
            values.repeat_interleave(2, 0).double(),
        )[:, 0]
        torch.testing.assert_close(out[b].double(), expected, atol=1e-6, rtol=1e-6)


def test_prefill_reference_last_token_equals_decode():
    generator = torch.Generator().manual_seed(1)
    k_pool, v_pool = torch.randn(2, 8, 1, 4, 16, generator=generator)
    table = torch.tensor([3, 6, 1, 0])
    q = torch.randn(5, 2, 16, generator=generator)
    prefill = paged_prefill_reference(q, k_pool, v_pool, table, 9, 4, compute_dtype=torch.float64)
    decode = paged_decode_reference(q[-1:], k_pool, v_pool, table[None], torch.tensor([14]), 4, torch.float64)
    torch.testing.assert_close(prefill[-1], decode[0])


def test_gather_history_marks_positions_past_the_length():
    pool = torch.arange(4 * 1 * 2 * 1, dtype=torch.float32).reshape(4, 1, 2, 1)
    history, valid = gather_history(pool, torch.tensor([[3, 0], [1, 2]]), torch.tensor([3, 1]), 2)
    assert valid.tolist() == [[True, True, True], [True, False, False]]
    assert history[0, 0, :, 0].tolist() == [6.0, 7.0, 0.0]


def _decode_args():
    return (
        torch.zeros(2, 4, 8),
        torch.zeros(6, 2, 4, 8),
        torch.zeros(6, 2, 4, 8),
        torch.zeros(2, 3, dtype=torch.int32),
        torch.tensor([5, 12], dtype=torch.int32),
        4,
    )


@pytest.mark.parametrize(
    ("position", "bad", "named"),
    [
        (0, torch.zeros(2, 4, 8, dtype=torch.float64), "q"),
        (5, 8, "block_size"),
        (2, torch.zeros(6, 2, 4, 8).transpose(0, 1).contiguous().transpose(0, 1), "v_pool"),
        (3, torch.zeros(2, 3), "block_tables"),
        (4, torch.tensor([0, 12], dtype=torch.int32), "lengths"),
        (4, torch.tensor([5, 13], dtype=torch.int32), "lengths"),
        (3, torch.tensor([[0, 0, 0], [0, 9, 0]], dtype=torch.int32), "block_tables"),
        (5, 3, "block_size"),
    ],
)
def test_decode_validation_names_the_argument(position, bad, named):
    args = list(_decode_args())
    args[position] = bad
    with pytest.raises((TypeError, ValueError), match=named):
        validate_decode_inputs(*args)


def test_prefill_validation_names_the_argument():
    q, pool = torch.zeros(5, 2, 8), torch.zeros(4, 1, 4, 8)
    validate_prefill_inputs(q, pool, pool, torch.tensor([0, 1, 2]), 4, 4)
    with pytest.raises(ValueError, match="block_table"):
        validate_prefill_inputs(q, pool, pool, torch.tensor([0, 1]), 4, 4)
    with pytest.raises(ValueError, match="start"):
        validate_prefill_inputs(q, pool, pool, torch.tensor([0, 1, 2]), -1, 4)


def test_tolerances_live_in_one_table():
    assert set(kernel_checks.TOLERANCES) == {torch.float32, torch.float16, torch.bfloat16}


# --------------------------------------------------------------------------- picture and demo


def test_kernel_walk_pictures_draw():
    import matplotlib

    matplotlib.use("Agg")
    from paged_helpers.plots.kernel_walk import plot_kernel_walk, plot_prefill_mask, split_ranges

    assert split_ranges(5, 2) == [range(0, 3), range(3, 5)]
    assert split_ranges(1, 3) == [range(0, 1), range(1, 1), range(1, 1)]
    figure = plot_kernel_walk([5, 1, 7, 0], 11, 4, num_blocks=10, splits=2)
    assert figure.axes
    with pytest.raises(ValueError, match="block_table"):
        plot_kernel_walk([5], 11, 4)
    assert plot_prefill_mask(5, 9, 4, tile=4).axes


def test_kernel_demo_on_cpu_runs_a_correctness_pass_only():
    from paged_helpers.demos import kernel

    args = argparse.Namespace(
        impl=NOTEBOOKS,
        batch_sizes=[1],
        context_lengths=[64],
        block_sizes=[16],
        dtype="bfloat16",
        peak_gbs=None,
    )
    result = kernel.run(args)
    assert "meaningless" in result["note"]
    assert result["max_abs_error"] < 1e-4
    assert "max_abs_error" in kernel.format_result(result)


def test_decode_check_refuses_the_reference_and_torch_code():
    assert "called the reference" in message_of(check_paged_decode, paged_decode_reference)

    def torch_only(q, k_pool, v_pool, block_tables, lengths, block_size):
        return torch.zeros_like(q)

    assert "without launching a Triton kernel" in message_of(check_paged_decode, torch_only)


def test_prefill_check_refuses_the_reference():
    assert "called the reference" in message_of(check_paged_prefill, paged_prefill_reference)


# --------------------------------------------------------------------------- edge cases (issue 11)

DECODE_M_INIT = 'm = tl.full((), -float("inf"), tl.float32)                  # running max of the scores'
SPLIT_M_INIT = (
    '    m = tl.full((), -float("inf"), tl.float32)\n    l = tl.zeros((), tl.float32)\n    acc = tl.zeros((D,)'
)
PREFILL_M_INIT = 'm = tl.full((TILE,), -float("inf"), tl.float32)'
NEGATIVE_ROWS = "Every score here is far below zero"


def test_decode_running_max_from_zero_fails_on_all_negative_scores(tmp_path):
    wrong = variant(tmp_path, DECODE, "paged_decode_attention", (DECODE_M_INIT, "m = tl.zeros((), tl.float32)"))
    message = message_of(check_paged_decode, wrong)
    assert "every score far below zero" in message
    assert NEGATIVE_ROWS in message and "The running max must start at -inf" in message


def test_split_k_running_max_from_zero_fails_on_all_negative_scores(tmp_path):
    wrong = variant(
        tmp_path,
        DECODE,
        "split_k_decode_attention",
        (SPLIT_M_INIT, SPLIT_M_INIT.replace('tl.full((), -float("inf"), tl.float32)', "tl.zeros((), tl.float32)")),
    )
    message = message_of(check_split_k_decode, wrong)
    assert "2 splits with every score far below zero" in message
    assert "The running max must start at -inf" in message


def test_prefill_running_max_from_zero_fails_on_all_negative_scores(tmp_path):
    wrong = variant(tmp_path, PREFILL, "paged_prefill_attention", (PREFILL_M_INIT, "m = tl.zeros((TILE,), tl.float32)"))
    message = message_of(check_paged_prefill, wrong)
    assert "every score far below zero" in message
    assert "The running max must start at -inf" in message


def test_prefill_store_without_the_row_mask_is_caught_by_the_guard_band(tmp_path):
    """Rows past the last new token are stored past the end of out: the band after it changes
    (deterministically; before the bands this was caught only when the write crashed the process)."""
    wrong = variant(
        tmp_path,
        PREFILL,
        "paged_prefill_attention",
        (
            "tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])",
            "tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty))",
        ),
    )
    message = message_of(check_paged_prefill, wrong)
    assert "a fresh prompt: 11 new tokens" in message
    assert "expected: stores only inside the output tensor [11, 2, 16]" in message
    assert "got:      your kernel wrote 160 values past its end" in message
    assert "row < new_tokens" in message


def test_decode_store_one_row_too_far_is_caught_by_the_guard_band(tmp_path):
    """Each program stores one head further on: the last head of the last sequence lands past the end."""
    wrong = variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        (
            "tl.store(out_ptr + (seq * heads + h) * D + rd,",
            "tl.store(out_ptr + (seq * heads + h + 1) * D + rd,",
        ),
    )
    message = message_of(check_paged_decode, wrong)
    assert "stores only inside the output tensor [1, 2, 16]" in message
    assert "16 values past its end" in message


def test_a_grid_that_misses_heads_leaves_values_never_written(tmp_path):
    wrong = variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        ("paged_decode_kernel[(batch, q_heads)](", "paged_decode_kernel[(batch, q_heads // 2)]("),
    )
    message = message_of(check_paged_decode, wrong)
    assert "16 values never written (they still hold 1234" in message
    assert "compare your grid with the output's shape" in message


def test_the_negative_scenarios_are_all_far_below_zero():
    from paged_helpers.checks.kernels.scenarios import DECODE_CASES, PREFILL_CASES, decode_inputs, prefill_inputs

    case = next(c for c in DECODE_CASES if c.negative_scores)
    inputs = decode_inputs(case, torch.float32)
    keys = inputs.k_pool[:, 0]  # [N, block, D]: every slot, stale ones too
    scores = torch.einsum("bhd,nsd->bhns", inputs.q, keys) / case.head_dim**0.5
    assert float(scores.max()) < -104  # exp underflows to 0 in float32 below about -104
    prefill = next(c for c in PREFILL_CASES if c.negative_scores)
    inputs = prefill_inputs(prefill, torch.float32)
    scores = torch.einsum("thd,nsd->thns", inputs.q, inputs.k_pool[:, 0]) / prefill.head_dim**0.5
    assert float(scores.max()) < -104


# ----------------------------------------------------------- answers computed outside the kernel (issue 12)


def _numpy_decode(q, k_pool, v_pool, block_tables, lengths, block_size):
    """Decode attention in numpy: what a launcher could compute without its kernel."""
    import numpy as np

    q_, k_, v_ = (t.detach().double().cpu().numpy() for t in (q, k_pool, v_pool))
    tables, lens = block_tables.cpu().numpy(), lengths.cpu().numpy()
    batch, q_heads, head_dim = q_.shape
    group = q_heads // k_.shape[1]
    out = np.zeros((batch, q_heads, head_dim))
    for b in range(batch):
        positions = np.arange(int(lens[b]))
        blocks, slots = tables[b][positions // block_size], positions % block_size
        for h in range(q_heads):
            keys, values = k_[blocks, h // group, slots], v_[blocks, h // group, slots]
            scores = keys @ q_[b, h] / np.sqrt(head_dim)
            weights = np.exp(scores - scores.max())
            out[b, h] = (weights / weights.sum()) @ values
    return out


@triton.jit
def _do_nothing_kernel(x_ptr):
    tl.program_id(0)


def _numpy_after_launch(q, k_pool, v_pool, block_tables, lengths, block_size):
    out = torch.empty_like(q)
    _do_nothing_kernel[(1,)](out)
    out.numpy()[:] = _numpy_decode(q, k_pool, v_pool, block_tables, lengths, block_size)
    return out


def _numpy_before_launch(q, k_pool, v_pool, block_tables, lengths, block_size):
    out = torch.empty_like(q)
    out.numpy()[:] = _numpy_decode(q, k_pool, v_pool, block_tables, lengths, block_size)
    _do_nothing_kernel[(1,)](out)
    return out


def _numpy_in_a_fresh_tensor(q, k_pool, v_pool, block_tables, lengths, block_size):
    _do_nothing_kernel[(1,)](q)
    return torch.from_numpy(_numpy_decode(q, k_pool, v_pool, block_tables, lengths, block_size)).to(q.dtype)


class _AlwaysClose(torch.Tensor):
    """A tensor subclass that answers torch.allclose / torch.equal with True."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("allclose", "equal", "isclose"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def _returns_a_lying_subclass(q, k_pool, v_pool, block_tables, lengths, block_size):
    out = torch.zeros_like(q)
    _do_nothing_kernel[(1,)](out)
    return out.as_subclass(_AlwaysClose)


@needs_isolation
@pytest.mark.parametrize(
    "launcher, words",
    [
        (_numpy_after_launch, "changed after your kernel's last launch"),
        (_numpy_before_launch, "already held the answer before your kernel was launched"),
        (_numpy_in_a_fresh_tensor, "was not written by a kernel"),
        (_returns_a_lying_subclass, "a tensor subclass"),
    ],
    ids=["numpy_after_launch", "numpy_before_launch", "numpy_in_a_fresh_tensor", "lying_tensor_subclass"],
)
def test_decode_check_refuses_an_answer_computed_outside_the_kernel(launcher, words):
    message = message_of(check_paged_decode, launcher)
    assert words in message, message


def test_a_launch_finished_in_numpy_is_refused():
    right = solution(DECODE, "paged_decode_attention")

    def kernel_then_numpy(q, k_pool, v_pool, block_tables, lengths, block_size):
        out = right(q, k_pool, v_pool, block_tables, lengths, block_size)
        half = q.shape[1] // 2
        out.numpy()[:, half:] = _numpy_decode(q, k_pool, v_pool, block_tables, lengths, block_size)[:, half:]
        return out

    assert "changed after your kernel's last launch" in message_of(check_paged_decode, kernel_then_numpy)
