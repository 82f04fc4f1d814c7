"""The warm-up checks (notebook 06) pass the instructor's kernels and name each classic mistake.

The checks are handed the kernel and launch it themselves (the given launchers are never called).
Each wrong kernel is the instructor's kernel with one edit of its text, read as a learner's cell
would be (``LearnerKernel.from_text``), so the only difference from the right answer is that edit.
"""

from __future__ import annotations

import random

import nbformat
import pytest

from paged_helpers.checks import (
    CheckFailed,
    NotImplementedYet,
    check_block_scores_kernel,
    check_causal_scores_kernel,
    check_gather_rows_kernel,
    check_load_block_kernel,
    check_online_attention_kernel,
    check_row_max_kernel,
    check_scale_kernel,
    check_softmax_kernel,
)
from paged_helpers.running.learner_kernel import LearnerKernel

from conftest import NOTEBOOKS, SECRET_SEEDS, solution, strip_ansi
from student_release import release_definition

NOTEBOOK = "06_triton_warmup"
CHECKS = {
    "scale_kernel": check_scale_kernel,
    "row_max_kernel": check_row_max_kernel,
    "gather_rows_kernel": check_gather_rows_kernel,
    "softmax_kernel": check_softmax_kernel,
    "load_block_kernel": check_load_block_kernel,
    "block_scores_kernel": check_block_scores_kernel,
    "online_attention_kernel": check_online_attention_kernel,
    "causal_scores_kernel": check_causal_scores_kernel,
}


def source_of(name: str) -> str:
    """The instructor's kernel ``name`` as the check reads it: its module, from the notebook's text."""
    return LearnerKernel.from_notebook(NOTEBOOKS / f"{NOTEBOOK}.ipynb", name).module().source


def edited(name: str, *edits: tuple[str, str]) -> LearnerKernel:
    """The instructor's kernel with each (old, new) edit of its text made once."""
    source = source_of(name)
    for old, new in edits:
        assert source.count(old) == 1, f"{old!r} is not once in {name}"
        source = source.replace(old, new)
    return LearnerKernel.from_text(source, name)


# --------------------------------------------------------------------------- the right kernels


@pytest.mark.parametrize("name", CHECKS)
def test_the_instructor_kernels_pass(name, capsys):
    check = CHECKS[name]
    check(solution(NOTEBOOK, name))
    assert capsys.readouterr().out.startswith(f"{check.__name__}: ")


@pytest.mark.parametrize("name", CHECKS)
def test_the_instructor_kernels_pass_random_seeds(name):
    """Visible (only load_block's visible call reads its seed) and hidden, at random 31-bit seeds."""
    check, kernel = CHECKS[name], solution(NOTEBOOK, name)
    for seed in random.Random().sample(range(2**31), 2):
        for hidden in (False, True) if name == "load_block_kernel" else (True,):
            try:
                check(kernel, seed=seed, hidden=hidden)
            except AssertionError as error:
                pytest.fail(f"seed {seed}, hidden={hidden}: {error}")


def test_the_kernel_text_is_what_is_judged():
    """Handed as text (as the grader reads a submission) the instructor's kernel passes as well."""
    check_scale_kernel(LearnerKernel.from_text(source_of("scale_kernel"), "scale_kernel"))


# --------------------------------------------------------------------------- wrong kernels

_SOFTMAX_STORE = "tl.store(out_ptr + row * cols + offsets, tl.exp(tile - m) / l, mask=mask)"
_NO_RESCALE = (
    ("m_new = tl.maximum(m, tl.max(tile, axis=0))", "m = tl.maximum(m, tl.max(tile, axis=0))"),
    ("l = l * tl.exp(m - m_new) + tl.sum(tl.exp(tile - m_new), axis=0)", "l = l + tl.sum(tl.exp(tile - m), axis=0)"),
    ("        m = m_new\n", ""),
)
_LOAD_BLOCK_LOAD = "tile = tl.load(base + slots[:, None] * s_slot + rd[None, :], mask=valid[:, None], other=0.0)"
_SCORES_STORE = 'tl.store(out_ptr + rows, tl.where(valid, s, -float("inf")))'
_ATTENTION_SCORES = 's = tl.where(valid, tl.sum(k * q[None, :], axis=1) * scale, -float("inf"))'
_CAUSAL = "causal = keys[None, :] <= (start + rows)[:, None]"

WRONG = {
    # puzzle 1
    "scale: store without a mask": (
        "scale_kernel",
        [("tl.store(out_ptr + offsets, factor * x, mask=mask)", "tl.store(out_ptr + offsets, factor * x)")],
    ),
    "scale: load without a mask": (
        "scale_kernel",
        [("x = tl.load(x_ptr + offsets, mask=mask)", "x = tl.load(x_ptr + offsets)")],
    ),
    "scale: every program on tile 0": (
        "scale_kernel",
        [("tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "tl.arange(0, BLOCK)")],
    ),
    "scale: factor ignored": ("scale_kernel", [("factor * x, mask=mask)", "x, mask=mask)")]),
    # puzzle 2
    "row_max: other left at 0": ("row_max_kernel", [(', other=-float("inf")', "")]),
    "row_max: cols as the row stride": ("row_max_kernel", [("x_ptr + row * stride_row", "x_ptr + row * cols")]),
    "row_max: load without a mask": ("row_max_kernel", [(', mask=offsets < cols, other=-float("inf")', "")]),
    # puzzle 3
    "gather_rows: the index ignored": ("gather_rows_kernel", [("table_ptr + row * D", "table_ptr + i * D")]),
    "gather_rows: row number without the width": ("gather_rows_kernel", [("table_ptr + row * D", "table_ptr + row")]),
    "gather_rows: out addressed with the row number": (
        "gather_rows_kernel",
        [("out_ptr + i * D", "out_ptr + row * D")],
    ),
    # puzzle 4
    "softmax: no rescale": ("softmax_kernel", _NO_RESCALE),
    "softmax: other left at 0": (
        "softmax_kernel",
        [('mask=offsets < cols, other=-float("inf")', "mask=offsets < cols, other=0.0")],
    ),
    "softmax: no max": (
        "softmax_kernel",
        [
            ("l = l * tl.exp(m - m_new) + tl.sum(tl.exp(tile - m_new), axis=0)", "l = l + tl.sum(tl.exp(tile))"),
            ("tl.exp(tile - m) / l", "tl.exp(tile) / l"),
        ],
    ),
    "softmax: store without a mask": (
        "softmax_kernel",
        [(_SOFTMAX_STORE, _SOFTMAX_STORE.replace(", mask=mask)", ")"))],
    ),
    "softmax: first loop's load without a mask": (
        "softmax_kernel",
        [(', mask=offsets < cols, other=-float("inf"))\n        m_new', ")\n        m_new")],
    ),
    "softmax: out addressed with x's row stride": (
        "softmax_kernel",
        [("tl.store(out_ptr + row * cols", "tl.store(out_ptr + row * stride_row")],
    ),
    # puzzle 5
    "load_block: logical block as the physical one": (
        "load_block_kernel",
        [("physical * s_block", "logical_block * s_block")],
    ),
    "load_block: slot and column strides swapped": (
        "load_block_kernel",
        [("slots[:, None] * s_slot + rd[None, :]", "slots[:, None] + rd[None, :] * s_slot")],
    ),
    "load_block: load without a mask": ("load_block_kernel", [(", mask=valid[:, None], other=0.0", "")]),
    "load_block: mask without the block's start": (
        "load_block_kernel",
        [("valid = logical_block * BLOCK + slots < length", "valid = slots < length")],
    ),
    "load_block: mask on the columns": (
        "load_block_kernel",
        [
            ("valid = logical_block * BLOCK + slots < length", "valid = logical_block * BLOCK + rd < length"),
            ("mask=valid[:, None]", "mask=valid[None, :]"),
        ],
    ),
    "load_block: store masked": (
        "load_block_kernel",
        [("rd[None, :], tile)", "rd[None, :], tile, mask=valid[:, None])")],
    ),
    "load_block: head ignored": ("load_block_kernel", [(" + head * s_head", "")]),
    # notebook 06's old order of the strides (block, slot, head) against 07's (block, head, slot)
    "load_block: head and slot strides exchanged": (
        "load_block_kernel",
        [("s_block, s_head, s_slot, BLOCK", "s_block, s_slot, s_head, BLOCK")],
    ),
    "load_block: a contiguous pool's strides by hand": (
        "load_block_kernel",
        [("head * s_head", "head * BLOCK * D"), ("slots[:, None] * s_slot", "slots[:, None] * D")],
    ),
    "load_block: hard-coded strides": (
        "load_block_kernel",
        [
            ("physical * s_block + head * s_head", "physical * 32 + head * 16"),
            ("slots[:, None] * s_slot", "slots[:, None] * 4"),
        ],
    ),
    "load_block: out addressed with the pool's slot stride": (
        "load_block_kernel",
        [("tl.store(out_ptr + slots[:, None] * D", "tl.store(out_ptr + slots[:, None] * s_slot")],
    ),
    # puzzle 6
    "block_scores: masked slots scored 0": ("block_scores_kernel", [(_SCORES_STORE, "tl.store(out_ptr + rows, s)")]),
    "block_scores: masked slots not stored": (
        "block_scores_kernel",
        [(_SCORES_STORE, "tl.store(out_ptr + rows, s, mask=valid)")],
    ),
    "block_scores: summed over the slots": (
        "block_scores_kernel",
        [("tl.sum(k * q[None, :], axis=1)", "tl.sum(k * q[None, :], axis=0)")],
    ),
    "block_scores: q along the slots": (
        "block_scores_kernel",
        [("tl.sum(k * q[None, :], axis=1)", "tl.sum(k * q[:, None], axis=1)")],
    ),
    "block_scores: no scale": ("block_scores_kernel", [("axis=1) * scale", "axis=1)")]),
    "block_scores: mask without the block's start": (
        "block_scores_kernel",
        [("valid = rows < length", "valid = tl.arange(0, BLOCK) < length")],
    ),
    "block_scores: every program on block 0": (
        "block_scores_kernel",
        [("rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "rows = tl.arange(0, BLOCK)")],
    ),
    # puzzle 7
    "online_attention: acc not rescaled": ("online_attention_kernel", [("acc = acc * alpha + ", "acc = acc + ")]),
    "online_attention: nothing rescaled": (
        "online_attention_kernel",
        [("acc = acc * alpha + ", "acc = acc + "), ("l = l * alpha + ", "l = l + ")],
    ),
    "online_attention: l not rescaled": ("online_attention_kernel", [("l = l * alpha + ", "l = l + ")]),
    "online_attention: masked slots scored 0": (
        "online_attention_kernel",
        [(_ATTENTION_SCORES, "s = tl.sum(k * q[None, :], axis=1) * scale")],
    ),
    "online_attention: acc not divided by l": (
        "online_attention_kernel",
        [("tl.store(out_ptr + rd, acc / l)", "tl.store(out_ptr + rd, acc)")],
    ),
    "online_attention: running max started at 0": (
        "online_attention_kernel",
        [('m = tl.full((), -float("inf"), tl.float32)', "m = tl.zeros((), tl.float32)")],
    ),
    "online_attention: no max subtracted": (
        "online_attention_kernel",
        [("alpha = tl.exp(m - m_new)", "alpha = 1.0"), ("p = tl.exp(s - m_new)", "p = tl.exp(s)")],
    ),
    "online_attention: V loaded without a mask": (
        "online_attention_kernel",
        [("v = tl.load(v_ptr + offsets, mask=valid[:, None], other=0.0)", "v = tl.load(v_ptr + offsets)")],
    ),
    # puzzle 8
    "causal_scores: the mask in row numbers": (
        "causal_scores_kernel",
        [(_CAUSAL, "causal = keys[None, :] <= rows[:, None]")],
    ),
    "causal_scores: the diagonal left out": (
        "causal_scores_kernel",
        [(_CAUSAL, "causal = keys[None, :] < (start + rows)[:, None]")],
    ),
    "causal_scores: masked scores 0": (
        "causal_scores_kernel",
        [('s = tl.where(causal, s, -float("inf"))', "s = tl.where(causal, s, 0.0)")],
    ),
    "causal_scores: query rows past the chunk loaded": (
        "causal_scores_kernel",
        [
            (
                "q = tl.load(q_ptr + rows[:, None] * D + rd[None, :], mask=row_valid[:, None], other=0.0)",
                "q = tl.load(q_ptr + rows[:, None] * D + rd[None, :])",
            )
        ],
    ),  # fmt: skip
    "causal_scores: rows past the chunk stored": (
        "causal_scores_kernel",
        [("mask=row_valid[:, None] & key_valid[None, :])", "mask=key_valid[None, :])")],
    ),
    "causal_scores: out's rows new_tokens apart": (
        "causal_scores_kernel",
        [("rows[:, None] * total + keys[None, :], s", "rows[:, None] * new_tokens + keys[None, :], s")],
    ),
}


@pytest.mark.parametrize("mistake", WRONG)
def test_a_wrong_kernel_is_named(mistake, failing_message, message_snapshot):
    name, edits = WRONG[mistake]
    assert failing_message(CHECKS[name], edited(name, *edits)) == message_snapshot


@pytest.mark.parametrize("mistake", WRONG)
def test_every_secret_seed_catches_a_wrong_kernel_in_the_hidden_call(mistake):
    """The hidden call runs every kind in full in every draw: a wrong kernel fails at every seed the grader
    may draw, with a message naming the kind and none of its sizes."""
    name, edits = WRONG[mistake]
    wrong = edited(name, *edits)
    for seed in SECRET_SEEDS:
        try:
            CHECKS[name](wrong, seed=seed, hidden=True)
        except CheckFailed as error:
            assert "hidden" in str(error) or name.removesuffix("_kernel") + ": " in str(error), str(error)
            continue
        pytest.fail(f"{mistake}: the hidden call passed at seed {seed}")


def test_a_hidden_kind_names_the_bug_without_its_sizes(failing_message):
    """A wrong kernel that only a hidden kind's shapes reach (the visible cases hold it to other shapes)
    is still told what it gets wrong, with no number of the hidden scenario."""
    name, edits = WRONG["online_attention: no max subtracted"]
    message = strip_ansi(
        failing_message(
            lambda k: check_online_attention_kernel(k, seed=SECRET_SEEDS[0], hidden=True), edited(name, *edits)
        )
    )
    assert "a hidden scenario failed: every score far below zero" in message, message
    assert "running max" in message and "length" not in message and "BLOCK =" not in message, message


def test_the_wrong_stride_is_not_blamed_on_a_mask(failing_message):
    name, edits = WRONG["softmax: out addressed with x's row stride"]
    message = strip_ansi(failing_message(check_softmax_kernel, edited(name, *edits)))
    assert "mask" not in message, message


def test_a_hidden_failure_names_its_kind_not_its_sizes(failing_message):
    name, edits = WRONG["scale: factor ignored"]
    message = strip_ansi(failing_message(lambda k: check_scale_kernel(k, seed=7, hidden=True), edited(name, *edits)))
    assert "a hidden scenario failed" in message and "n = " not in message, message


def test_a_stray_access_in_a_notebook_names_its_cell(tmp_path, failing_message):
    """The kernel the learner's cell defines (as loaded from a notebook) is read from that notebook."""
    from paged_helpers.notebook_loader import load_from_notebook

    notebook = nbformat.read(NOTEBOOKS / f"{NOTEBOOK}.ipynb", as_version=4)
    index = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and "def scale_kernel" in c.source)
    cell = notebook.cells[index]
    cell.source = cell.source.replace("factor * x, mask=mask)", "factor * x)")
    nbformat.write(notebook, tmp_path / f"{NOTEBOOK}.ipynb")
    kernel = load_from_notebook(NOTEBOOK, "scale_kernel", search=[tmp_path])
    message = strip_ansi(failing_message(check_scale_kernel, kernel))
    assert f"{NOTEBOOK}.ipynb, code cell {index} (the cell defining scale_kernel), line " in message, message
    assert "`tl.store(out_ptr + offsets, factor * x)`" in message, message


# --------------------------------------------------------------------------- what the check is handed


@pytest.mark.parametrize("name", CHECKS)
def test_a_fresh_release_is_not_implemented_yet(tmp_path, name):
    kernel = release_definition(tmp_path, NOTEBOOK, name)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        CHECKS[name](kernel)


def test_an_unfinished_kernel_is_a_note_when_asked(tmp_path, capsys):
    check_scale_kernel(release_definition(tmp_path, NOTEBOOK, "scale_kernel"), unfinished="note")
    assert "not implemented yet" in capsys.readouterr().out


def test_the_launcher_is_not_a_kernel(failing_message):
    message = strip_ansi(failing_message(check_scale_kernel, solution(NOTEBOOK, "scale")))
    assert "a @triton.jit kernel was expected, got function" in message, message


def test_a_changed_signature_is_refused(failing_message):
    wrong = edited("scale_kernel", ("BLOCK: tl.constexpr", "BLOCK"))
    message = strip_ansi(failing_message(check_scale_kernel, wrong))
    assert "the signature of scale_kernel" in message, message
    assert "scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr)" in message, message


def test_a_kernel_cell_with_more_than_a_kernel_is_refused(failing_message):
    source = "import os\n" + source_of("scale_kernel").replace(
        "mask = offsets < n\n", "mask = offsets < n\n    os.getpid()\n"
    )
    message = strip_ansi(failing_message(check_scale_kernel, LearnerKernel.from_text(source, "scale_kernel")))
    assert "lines the check refuses to load" in message and "Imports: only triton" in message, message


def test_a_kernel_that_never_ends_is_stopped(monkeypatch, failing_message):
    from paged_helpers.checks.kernels import launching

    monkeypatch.setattr(launching, "_BUDGET_FIXED_S", 3.0)
    wrong = edited(
        "scale_kernel", ("    mask = offsets < n\n", "    mask = offsets < n\n    while n > 0:\n        n = n + 1\n")
    )
    message = strip_ansi(failing_message(check_scale_kernel, wrong))
    assert "still running when the budget was spent" in message, message


# --------------------------------------------------------------------------- the notebook's pictures


def test_the_block_picture_draws_the_kernels_addresses():
    import math

    import matplotlib

    matplotlib.use("Agg")
    import torch

    from paged_helpers.plots.warmup import offset_coded_pool, plot_block

    pool = offset_coded_pool((8, 2, 4, 4))  # [num_blocks, heads, block_size, head_dim], as in 03 and 07
    out = torch.full((4, 4), math.nan)
    solution(NOTEBOOK, "load_block")(pool, torch.tensor([3, 0, 5], dtype=torch.int32), 11, 2, 1, out)
    figure = plot_block(block_size=4, heads=2, head_dim=4, physical=5, head=1, rows=3, stored=out)
    texts = [text.get_text() for text in figure.axes[0].texts]
    # block 5, head 1: base 5 * 32 + 1 * 16 = 176; slot 2, column 3: 176 + 2 * 4 + 3 = 187
    assert "176" in texts and "187" in texts and "slot 3: masked: no token" in texts, texts
    assert "(s_block 32, s_head 16, s_slot 4)" in " ".join(texts), texts
    red = [text.get_text() for text in figure.axes[0].texts if text.get_color() == "#C44E52"]
    assert red == [], red
    out[1, 2] = 7.0
    figure = plot_block(block_size=4, heads=2, head_dim=4, physical=5, head=1, rows=3, stored=out)
    assert [text.get_text() for text in figure.axes[0].texts if text.get_color() == "#C44E52"] == ["7"]
