"""The kernel checks (notebooks 07 and 09) must pass right kernels in any design and name the bug in wrong ones.

Right kernels come from the instructor notebooks (``solution``) or are written here in other
designs. Wrong kernels are small text edits of the notebook's kernel cell, read the way the
checks read every kernel: as text (``LearnerKernel``), launched by the check in a process of its
own. The launchers have checks of their own, for fewer points, and never affect the kernel's.
"""

from __future__ import annotations

import argparse
import random

import nbformat
import pytest
import torch

from paged_helpers.checks import (
    CheckFailed,
    NotImplementedYet,
    check_paged_decode,
    check_paged_decode_kernel,
    check_paged_prefill,
    check_paged_prefill_kernel,
    check_split_k_decode,
)
from paged_helpers.checks.kernels import launching
from paged_helpers.checks.kernels import paged_attention as kernel_checks
from paged_helpers.kernel_inputs import validate_decode_inputs, validate_prefill_inputs
from paged_helpers.notebook_loader import load_definitions
from paged_helpers.reference import gather_history, paged_decode_reference, paged_prefill_reference
from paged_helpers.running.isolated import isolation_available, run_isolated
from paged_helpers.running.learner_kernel import LearnerKernel, learner_kernel

from conftest import NOTEBOOKS, solution, strip_ansi
from student_release import release_definition, write_release

DECODE = "07_paged_decode_kernel"
PREFILL = "09_paged_prefill_kernel"
# Crashes and hangs of a launcher are only survivable in a child process (the interpreter on Linux).
needs_isolation = pytest.mark.skipif(not isolation_available(), reason="launchers run in-process here (GPU)")


def _edited(notebook: str, *edits: tuple[str, str], cell: str = "") -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    for old, new in edits:
        cells = [c for c in nb.cells if c.cell_type == "code" and old in c.source and cell in c.source]
        assert len(cells) == 1, f"the edit target {old!r} is not in exactly one cell of {notebook}"
        assert cells[0].source.count(old) == 1, f"the edit target {old!r} occurs more than once"
        cells[0].source = cells[0].source.replace(old, new)
    return nb


def kernel_variant(tmp_path, notebook: str, name: str, *edits: tuple[str, str]) -> LearnerKernel:
    """``name`` as a copy of ``notebook`` with each (old, new) edit made in exactly one code cell."""
    folder = tmp_path / f"variant{random.getrandbits(32)}"
    folder.mkdir()
    path = folder / f"{notebook}.ipynb"
    nbformat.write(_edited(notebook, *edits, cell=f"def {name}("), path)
    return LearnerKernel.from_notebook(path, name)


def launcher_variant(tmp_path, notebook: str, name: str, *edits: tuple[str, str], cell: str = ""):
    """The launcher ``name`` loaded from a copy of ``notebook`` with the edits (09's copy loads 04 and
    07, which it finds beside the instructor notebooks)."""
    folder = tmp_path / f"variant{random.getrandbits(32)}"
    folder.mkdir()
    path = folder / f"{notebook}.ipynb"
    nbformat.write(_edited(notebook, *edits, cell=cell), path)
    return getattr(load_definitions(path, module_name=f"variant_{random.getrandbits(32)}"), name)


def message_of(check, *impl) -> str:
    try:
        check(*impl)
    except CheckFailed as error:
        return strip_ansi(str(error))
    pytest.fail(f"{check.__name__} passed a wrong kernel")


def kernel_source(notebook: str, name: str) -> str:
    """The module the check builds from the instructor's kernel cell."""
    return LearnerKernel.from_notebook(NOTEBOOKS / f"{notebook}.ipynb", name).module().source


# --------------------------------------------------------------------------- right kernels pass


# Each right kernel also proves its check silent: any stderr would zero the nbgrader cell.


@pytest.mark.parametrize(
    ("check", "notebook", "name"),
    [
        (check_paged_decode_kernel, DECODE, "paged_decode_kernel"),
        (check_paged_decode, DECODE, "paged_decode_attention"),
        (check_split_k_decode, DECODE, "split_k_decode_attention"),
        (check_paged_prefill_kernel, PREFILL, "paged_prefill_kernel"),
        (check_paged_prefill, PREFILL, "paged_prefill_attention"),
    ],
)
def test_the_notebooks_kernels_and_launchers_pass_silently(capfd, check, notebook, name):
    implementation = solution(notebook, name)
    capfd.readouterr()  # only what the check itself writes counts
    check(implementation)
    assert capfd.readouterr().err == ""


def test_the_kernel_checks_pass_for_random_31_bit_seeds():
    draw = random.Random()
    for check, notebook, name in (
        (check_paged_decode_kernel, DECODE, "paged_decode_kernel"),
        (check_paged_prefill_kernel, PREFILL, "paged_prefill_kernel"),
    ):
        for seed in (draw.getrandbits(31) for _ in range(2)):
            check(solution(notebook, name), seed=seed)


# Another design: the kernel of notebook 07's Q1 (its "Going further" describes it). One program per
# KV head handles its whole query group (a [group, D] tile of queries, each K/V block loaded once),
# inside the grid the check states (B, heads): program (seq, h) with h % group == 0 does the group's
# work, the others nothing. A
# helper named with a leading underscore, and a constant made with tl.constexpr(float("-inf")), as
# Triton's own tutorials write them.
GROUPED_DECODE = """
import triton
import triton.language as tl

NEG_INF = tl.constexpr(float("-inf"))
_GROUP_TILE = tl.constexpr(8)


@triton.jit
def _online_step(m, l, acc, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=1))
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new[:, None])
    return m_new, l * alpha + tl.sum(p, axis=1), acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)


@triton.jit
def paged_decode_kernel(q_ptr, k_pool, v_pool, tables_ptr, lengths_ptr, out_ptr, max_blocks, heads, group, scale,
                        s_pool_block, s_pool_head, s_pool_slot, D: tl.constexpr, BLOCK: tl.constexpr):
    seq, h = tl.program_id(0), tl.program_id(1)
    if h % group == 0:
        kvh = h // group
        rows = tl.arange(0, _GROUP_TILE)
        row_valid = rows < group
        rd = tl.arange(0, D)
        slots = tl.arange(0, BLOCK)
        q_offsets = (seq * heads + h + rows[:, None]) * D + rd[None, :]
        q = tl.load(q_ptr + q_offsets, mask=row_valid[:, None], other=0.0).to(tl.float32)
        length = tl.load(lengths_ptr + seq)
        m = tl.full((_GROUP_TILE,), NEG_INF, tl.float32)
        l = tl.zeros((_GROUP_TILE,), tl.float32)
        acc = tl.zeros((_GROUP_TILE, D), tl.float32)
        for i in range(0, tl.cdiv(length, BLOCK)):
            block = tl.load(tables_ptr + seq * max_blocks + i)
            valid = i * BLOCK + slots < length
            offsets = block * s_pool_block + kvh * s_pool_head + slots[:, None] * s_pool_slot + rd[None, :]
            k = tl.load(k_pool + offsets, mask=valid[:, None], other=0.0).to(tl.float32)
            v = tl.load(v_pool + offsets, mask=valid[:, None], other=0.0).to(tl.float32)
            s = tl.where(valid[None, :], tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale, NEG_INF)
            m, l, acc = _online_step(m, l, acc, s, v)
        tl.store(out_ptr + q_offsets, (acc / l[:, None]).to(out_ptr.dtype.element_ty), mask=row_valid[:, None])
"""


def test_a_grouped_kernel_with_private_helpers_and_constexpr_constants_passes():
    check_paged_decode_kernel(LearnerKernel.from_text(GROUPED_DECODE, "paged_decode_kernel"))


def test_a_kernel_defined_in_a_cell_is_read_from_the_cells_ipython_ran():
    """A kernel written in a notebook cell is read from the cells the Jupyter kernel ran (its history)."""
    source = kernel_source(DECODE, "paged_decode_kernel")
    namespace = {"_ih": ["", "import torch", source, "print('a try-it cell')"]}
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102  (the instructor's kernel, as a cell would)
    found = learner_kernel(namespace["paged_decode_kernel"], "paged_decode_kernel")
    assert found.cell_word == "In" and "def paged_decode_kernel(" in found.module().source


# --------------------------------------------------------------------------- wrong decode kernels

TABLE_LOAD = "block = tl.load(tables_ptr + seq * max_blocks + i)      # logical block i -> physical block"
DECODE_WRONG = {
    "no table lookup": [(TABLE_LOAD, "block = i")],
    "no length mask (scores)": [('        s = tl.where(valid, s, -float("inf"))\n', "")],
    "no length mask at all": [
        ('        s = tl.where(valid, s, -float("inf"))\n', ""),
        ("valid = i * BLOCK + slots < length ", "valid = slots < BLOCK "),
    ],
    "query head as KV head": [("kvh = h // group ", "kvh = h ")],
    "query head modulo KV heads": [("kvh = h // group ", "kvh = h % (heads // group) ")],
    "missing scale": [("s = tl.sum(k * q[None, :], axis=1) * scale ", "s = tl.sum(k * q[None, :], axis=1) ")],
    "no running-max rescale": [
        ("l = l * alpha + tl.sum(p, axis=0)", "l = l + tl.sum(p, axis=0)"),
        (
            "acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)",
            "acc = acc + tl.sum(p[:, None] * v, axis=0)",
        ),
    ],
    "no max subtracted before exp": [
        ("alpha = tl.exp(m - m_new)  ", "alpha = 1.0  "),
        ("p = tl.exp(s - m_new)\n", "p = tl.exp(s)\n"),
    ],
    "V loaded without a mask": [
        (
            "v = tl.load(v_pool + offsets, mask=valid[:, None], other=0.0).to(tl.float32)",
            "v = tl.load(v_pool + offsets).to(tl.float32)",
        )
    ],
    "strides as if the pool were contiguous": [
        (
            "offsets = block * s_pool_block + kvh * s_pool_head + slots[:, None] * s_pool_slot + rd[None, :]",
            "offsets = ((block * (heads // group) + kvh) * BLOCK + slots[:, None]) * D + rd[None, :]",
        )
    ],
    "running max started at 0": [
        (
            'm = tl.full((), -float("inf"), tl.float32)                  # running max of the scores',
            "m = tl.zeros((), tl.float32)",
        )
    ],
}


@pytest.mark.parametrize("bug", list(DECODE_WRONG))
def test_the_decode_kernel_check_names_the_bug(tmp_path, bug, message_snapshot):
    wrong = kernel_variant(tmp_path, DECODE, "paged_decode_kernel", *DECODE_WRONG[bug])
    assert message_of(check_paged_decode_kernel, wrong) == message_snapshot


def test_a_stray_load_is_stopped_and_named_with_its_tensor_and_line(tmp_path):
    wild = kernel_variant(
        tmp_path,
        DECODE,
        "paged_decode_kernel",
        (TABLE_LOAD, "block = tl.load(tables_ptr + seq * max_blocks + i + 4096)"),
    )
    message = message_of(check_paged_decode_kernel, wild)
    assert "expected: every load and store inside the tensors the kernel was given" in message
    assert "elements past the end of tables_ptr" in message
    assert "07_paged_decode_kernel.ipynb, code cell" in message and "block = tl.load(tables_ptr" in message


def test_a_store_one_row_too_far_is_stopped_before_it_happens(tmp_path):
    wrong = kernel_variant(
        tmp_path,
        DECODE,
        "paged_decode_kernel",
        ("tl.store(out_ptr + (seq * heads + h) * D + rd,", "tl.store(out_ptr + (seq * heads + h + 1) * D + rd,"),
    )
    message = message_of(check_paged_decode_kernel, wrong)
    assert "a store of 16 of its 16 addresses outside every tensor" in message and "of out_ptr" in message


def test_a_store_into_an_input_is_named(tmp_path):
    wrong = kernel_variant(
        tmp_path,
        DECODE,
        "paged_decode_kernel",
        ("tl.store(out_ptr + (seq * heads + h) * D + rd,", "tl.store(q_ptr + (seq * heads + h) * D + rd,"),
    )
    assert "a store into q_ptr, which the kernel may only read" in message_of(check_paged_decode_kernel, wrong)


def test_a_kernel_that_never_ends_is_stopped_by_its_cpu_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(launching, "_BUDGET_FIXED_S", 3.0)
    stuck = kernel_variant(
        tmp_path,
        DECODE,
        "paged_decode_kernel",
        ("for i in range(0, tl.cdiv(length, BLOCK)):", "i = length * 0\n    while i < tl.cdiv(length, BLOCK):"),
    )
    message = message_of(check_paged_decode_kernel, stuck)
    assert "it was still running when the budget was spent" in message and "a loop that never ends" in message


def test_a_changed_signature_is_named(tmp_path):
    wrong = kernel_variant(
        tmp_path,
        DECODE,
        "paged_decode_kernel",
        ("D: tl.constexpr, BLOCK: tl.constexpr):", "D: tl.constexpr, BLOCK: tl.constexpr, SPLITS):"),
    )
    message = message_of(check_paged_decode_kernel, wrong)
    assert "expected: paged_decode_kernel(q_ptr, k_pool" in message and "keep its parameters" in message


def test_a_refused_kernel_cell_names_the_line_and_the_rule(tmp_path):
    wrong = kernel_variant(
        tmp_path, DECODE, "paged_decode_kernel", ("kvh = h // group ", "kvh = h // group + len(__name__) ")
    )
    message = message_of(check_paged_decode_kernel, wrong)
    assert "code cell" in message and "(rule: names)" in message and "the rules for kernel cells" in message


def test_a_kernel_that_only_copies_fails_the_kernel_check(tmp_path):
    """The kernel of issue 35's hostile design (its launcher computes the answer in torch and launches
    a kernel that only copies it into ``out``): judged alone, it fails. The whole design through a
    real clean run: ``test_verdict_boundary.test_a_torch_launcher_with_a_copy_kernel_gets_no_kernel_points``."""
    copy_kernel = kernel_variant(
        tmp_path,
        DECODE,
        "paged_decode_kernel",
        (
            "    seq, h = tl.program_id(0), tl.program_id(1)\n",
            "    seq, h = tl.program_id(0), tl.program_id(1)\n"
            "    rd = tl.arange(0, D)\n"
            "    tl.store(out_ptr + (seq * heads + h) * D + rd, tl.load(q_ptr + (seq * heads + h) * D + rd))\n"
            "    return\n",
        ),
    )
    assert "expected: the reference output" in message_of(check_paged_decode_kernel, copy_kernel)


# --------------------------------------------------------------------------- the launchers


def test_the_launcher_check_requires_input_validation(tmp_path):
    unchecked = launcher_variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        ("    validate_decode_inputs(q, k_pool, v_pool, block_tables, lengths, block_size)\n    batch,", "    batch,"),
    )
    message = message_of(check_paged_decode, unchecked)
    assert "length 0" in message and "names `lengths`" in message


def test_a_wrong_launcher_is_told_to_look_at_what_it_hands_the_kernel(tmp_path):
    wrong = launcher_variant(
        tmp_path,
        DECODE,
        "paged_decode_attention",
        (
            "k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),",
            "k_pool.stride(1), k_pool.stride(1), k_pool.stride(2),",
        ),
        cell="def paged_decode_attention(",
    )
    message = message_of(check_paged_decode, wrong)
    assert "Your kernel is judged by its own check" in message and "the scale (1 / sqrt(head_dim))" in message


@needs_isolation
def test_a_launcher_that_hangs_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_checks, "TIME_LIMIT_S", 2.0)

    def stuck(*args):
        while True:
            pass

    assert "to return within 2 s" in message_of(check_paged_decode, stuck)


def test_a_launcher_returning_the_wrong_thing_is_named():
    def wrong_shape(q, k_pool, v_pool, block_tables, lengths, block_size):
        validate_decode_inputs(q, k_pool, v_pool, block_tables, lengths, block_size)
        return q[:, :1].clone()

    assert "allocate the output with torch.empty_like(q)" in message_of(check_paged_decode, wrong_shape)


# --------------------------------------------------------------------------- unfinished work


@pytest.mark.parametrize(
    ("notebook", "name", "check"),
    [
        (DECODE, "paged_decode_kernel", check_paged_decode_kernel),
        (PREFILL, "paged_prefill_kernel", check_paged_prefill_kernel),
    ],
)
def test_a_fresh_release_of_a_kernel_is_not_implemented_yet(tmp_path, notebook, name, check):
    kernel = LearnerKernel.from_notebook(write_release(notebook, tmp_path), name)
    with pytest.raises(NotImplementedYet):
        check(kernel)


@pytest.mark.parametrize(
    ("notebook", "name", "check", "finished"),
    [
        (DECODE, "paged_decode_attention", check_paged_decode, ()),
        (DECODE, "split_k_decode_attention", check_split_k_decode, ()),
        (PREFILL, "paged_prefill_attention", check_paged_prefill,
         ("02_block_allocator", "03_paged_kv_cache", "04_fork_and_copy_on_write", DECODE)),
    ],
)  # fmt: skip
def test_a_fresh_release_of_a_launcher_is_not_implemented_yet(tmp_path, notebook, name, check, finished):
    launcher = release_definition(tmp_path, notebook, name, finished=finished)
    with pytest.raises(NotImplementedYet):
        check(launcher)


# --------------------------------------------------------------------------- wrong split-K kernels

SPLIT_MERGE = "out = (weight[..., None] * acc).sum(dim=-2) / (weight * l).sum(dim=-1, keepdim=True)"


def test_split_k_check_catches_averaged_splits(tmp_path):
    """Words, not a snapshot: the message shows the measured difference, which is the device's arithmetic."""
    averaged = launcher_variant(
        tmp_path,
        DECODE,
        "split_k_decode_attention",
        (SPLIT_MERGE, "out = (acc / l[..., None]).nan_to_num().sum(dim=-2) / (l > 0).sum(-1, True)"),
    )
    message = message_of(check_split_k_decode, averaged)
    assert "Averaging per-split outputs is not the same" in message


def test_split_k_check_catches_empty_splits_that_poison_the_merge(tmp_path, message_snapshot):
    naive = launcher_variant(
        tmp_path,
        DECODE,
        "split_k_decode_attention",
        ("weight = torch.exp(m - m_all) ", "weight = torch.exp(m - m) "),
    )
    assert message_of(check_split_k_decode, naive) == message_snapshot


def test_split_k_check_names_a_decode_bug_inside_the_splits(tmp_path, message_snapshot):
    wrong = launcher_variant(
        tmp_path,
        DECODE,
        "split_k_decode_attention",
        ("        block = tl.load(tables_ptr + seq * max_blocks + i)\n", "        block = i\n"),
    )
    assert message_of(check_split_k_decode, wrong) == message_snapshot


# --------------------------------------------------------------------------- wrong prefill kernels

CAUSAL = "causal = (k_positions[None, :] <= q_positions[:, None]) & in_cache[None, :]"
PREFILL_SCORES = 's = tl.dot(q, tl.trans(k), input_precision="ieee") * scale'
PREFILL_PV_DOT = 'acc = tl.dot(p, v, acc * alpha[:, None], input_precision="ieee")'
PREFILL_WRONG = {
    "causal mask excludes the diagonal": [
        (CAUSAL, "causal = (k_positions[None, :] < q_positions[:, None]) & in_cache[None, :]")
    ],
    "causal mask one past": [
        (CAUSAL, "causal = (k_positions[None, :] <= q_positions[:, None] + 1) & in_cache[None, :]")
    ],
    "mask forgets start": [("q_positions = start + rows ", "q_positions = rows ")],
    "history skipped": [
        (
            "for i in range(0, tl.cdiv(last_position, BLOCK)):",
            "for i in range(start // BLOCK, tl.cdiv(last_position, BLOCK)):",
        )
    ],
    "no table lookup": [("block = tl.load(table_ptr + i) ", "block = i ")],
    "query head as KV head": [("kvh = h // group\n", "kvh = h\n")],
    "missing scale": [(PREFILL_SCORES, PREFILL_SCORES.replace(" * scale", ""))],
    "no running-max rescale": [
        ("l = l * alpha + tl.sum(p, axis=1)", "l = l + tl.sum(p, axis=1)"),
        ("acc = acc * alpha[:, None] + ", "acc = acc + "),
        ("tl.dot(p, v, acc * alpha[:, None], ", "tl.dot(p, v, acc, "),
    ],
    "running max started at 0": [
        ('m = tl.full((TILE,), -float("inf"), tl.float32)', "m = tl.zeros((TILE,), tl.float32)")
    ],
    "strides as if the pool were contiguous": [
        (
            "offsets = block * s_pool_block + kvh * s_pool_head + slots[:, None] * s_pool_slot + rd[None, :]",
            "offsets = ((block * (heads // group) + kvh) * BLOCK + slots[:, None]) * D + rd[None, :]",
        )
    ],
    "query rows past T loaded without a mask": [
        (
            "q = tl.load(q_ptr + q_offsets, mask=row_valid[:, None], other=0.0)",
            "q = tl.load(q_ptr + q_offsets)",
        )
    ],
    "rows past T stored": [
        (
            "tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty), mask=row_valid[:, None])",
            "tl.store(out_ptr + q_offsets, out.to(out_ptr.dtype.element_ty))",
        )
    ],
}


@pytest.mark.parametrize("bug", list(PREFILL_WRONG))
def test_the_prefill_kernel_check_names_the_bug(tmp_path, bug, message_snapshot):
    wrong = kernel_variant(tmp_path, PREFILL, "paged_prefill_kernel", *PREFILL_WRONG[bug])
    assert message_of(check_paged_prefill_kernel, wrong) == message_snapshot


def test_the_instructor_prefill_kernel_takes_tl_dot_where_the_shapes_allow():
    """Notebook 09's kernel: the scores by tl.dot at every block size (its inner dimension is head_dim),
    p @ v by tl.dot only where a block holds 16 tokens or more (a constexpr branch: the other is never
    compiled), so no [TILE, BLOCK, D] tile of products where a block is large."""
    source = kernel_source(PREFILL, "paged_prefill_kernel")
    assert PREFILL_SCORES in source and "q[:, None, :] * k[None, :, :]" not in source
    assert "if BLOCK >= 16:" in source and PREFILL_PV_DOT in source


def test_a_prefill_kernel_without_tl_dot_passes_too(tmp_path):
    """The check judges what a kernel computes: the broadcast-and-sum design (no tl.dot) passes as well."""
    broadcast = kernel_variant(
        tmp_path,
        PREFILL,
        "paged_prefill_kernel",
        (PREFILL_SCORES, "s = tl.sum(q[:, None, :].to(tl.float32) * k[None, :, :].to(tl.float32), axis=2) * scale"),
        (PREFILL_PV_DOT, "acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)"),
    )
    check_paged_prefill_kernel(broadcast)


def test_the_prefill_kernel_check_needs_no_earlier_notebook(tmp_path):
    """Notebook 09 alone (no 04 or 07 beside it): its kernel is still judged, and passes."""
    path = tmp_path / f"{PREFILL}.ipynb"
    nbformat.write(nbformat.read(NOTEBOOKS / f"{PREFILL}.ipynb", as_version=4), path)
    check_paged_prefill_kernel(LearnerKernel.from_notebook(path, "paged_prefill_kernel"))


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


def _print_a_partial_line_and_leave():
    import os

    print("the last words", end="")
    os._exit(3)


@needs_isolation
def test_an_isolated_call_keeps_what_it_printed_before_it_died():
    outcome = run_isolated(_print_a_partial_line_and_leave, (), time_limit=10)
    assert outcome.kind == "crashed" and "the last words" in outcome.printed
