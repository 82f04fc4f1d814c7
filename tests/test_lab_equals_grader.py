"""The lab and the grader give one verdict on a kernel: Run All in a Jupyter kernel, then the clean run.

Issue 35: after Run All the lab printed "passed" for kernels the grader scored 0, because the
Try-it cells had run the kernel before the check and the check took that run as its evidence.
Now both judge the kernel's text, launched by the check in a process of its own: the lab builds
the module from the cells the Jupyter kernel ran, the grader from the submitted notebook. Each
notebook below runs top to bottom (Try-it cells included, errors allowed, as Run All goes on in
a learner's workspace), then its kernel cell is graded by the real clean run; the verdicts agree,
for kernels a GPU rejects and for valid ones in designs other than the course's.
"""

from __future__ import annotations

import shutil

import nbformat
import pytest
from nbclient import NotebookClient

from autograde_helpers import instructor
from conftest import NOTEBOOKS, strip_ansi

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

# 09's kernel with P x V on tensor cores: its inner dimension is the block size, which is 4 in the
# Try-it cell and the check's scenarios: right in the interpreter, refused by the GPU compiler.
DOT_FOR_PV = (
    "acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)",
    'acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")',
)
# 07's online-softmax update moved into a @triton.jit helper named with a leading underscore, as
# Triton's tutorials name theirs (the old rules refused it in 07 and accepted it in 06).
ONLINE_STEP_HELPER = '''
@triton.jit
def _online_step(m, l, acc, s, v):
    m_new = tl.maximum(m, tl.max(s, axis=0))
    alpha = tl.exp(m - m_new)
    p = tl.exp(s - m_new)
    return m_new, l * alpha + tl.sum(p, axis=0), acc * alpha + tl.sum(p[:, None] * v, axis=0)


'''
DECODE_UPDATE = """        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)                               # rescales what was summed so far
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
"""


def _with_kernel_edit(notebook: str, kernel: str, old: str, new: str, before: str = "") -> nbformat.NotebookNode:
    nb = instructor(notebook)
    cell = next(c for c in nb.cells if c.cell_type == "code" and f"def {kernel}(" in c.source)
    assert old in cell.source, f"{old!r} is not in {kernel}'s cell: the notebook changed, update the test"
    cell.source = before + cell.source.replace(old, new)
    return nb


def _lab_verdict(tmp_path, notebook: str, nb: nbformat.NotebookNode, grade_id: str) -> tuple[bool, str]:
    """Run All of ``nb`` in a fresh Jupyter kernel, beside the course's earlier notebooks; whether the
    cell ``grade_id`` passed, and what it showed."""
    folder = tmp_path / "lab"
    folder.mkdir()
    for earlier in NOTEBOOKS.glob("0[0-8]_*.ipynb"):
        shutil.copy(earlier, folder / earlier.name)
    path = folder / f"{notebook}.ipynb"
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    nbformat.write(nb, path)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    errors = [o for o in cell.outputs if o.get("output_type") == "error"]
    shown = "\n".join(strip_ansi("\n".join(o.get("traceback", []))) or o.get("text", "") for o in cell.outputs)
    return not errors, shown


def _grader_verdict(tmp_path, notebook: str, nb: nbformat.NotebookNode, test: str) -> dict:
    from test_verdict_boundary import _clean_run

    return _clean_run(tmp_path / "graded", nb, notebook, test)


CASES = {
    "09: a tl.dot a GPU rejects": (
        "09_paged_prefill_kernel",
        "paged_prefill_kernel",
        DOT_FOR_PV,
        "",
        "test_paged_prefill_kernel",
        False,
    ),
    "09: the course's kernel": (
        "09_paged_prefill_kernel",
        "paged_prefill_kernel",
        ("", ""),
        "",
        "test_paged_prefill_kernel",
        True,
    ),
    "07: a helper named _online_step": (
        "07_paged_decode_kernel",
        "paged_decode_kernel",
        (DECODE_UPDATE, "        m, l, acc = _online_step(m, l, acc, s, v)\n"),
        ONLINE_STEP_HELPER,
        "test_paged_decode_kernel",
        True,
    ),
}


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_lab_and_the_grader_agree_after_run_all(tmp_path, case):
    notebook, kernel, (old, new), before, grade_id, passes = CASES[case]
    nb = _with_kernel_edit(notebook, kernel, old, new, before)
    lab_passed, shown = _lab_verdict(tmp_path, notebook, nb, grade_id)
    source = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    graded = _grader_verdict(tmp_path, notebook, nb, source)
    assert lab_passed is graded["passed"] is passes, (shown, graded)
    if not passes:  # the same reason, in the same words
        assert "compiled for a GPU (sm_80" in shown and "compiled for a GPU (sm_80" in graded["message"]
