"""The learner's path, fast (no JupyterLab, no nbgrader run): Run All over unfinished code (every
notebook as released, in one kernel), what a check prints, graded runs, the workspace that keeps the
learner's edits, and the fallback to a published solution (04 graded with the course's 03 when the
learner's 03 is unfinished).
"""

from __future__ import annotations

import itertools
import linecache
import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient
from paged_grading.administration import publish, workspace

import paged_helpers as ph
from paged_helpers.checks import check_block_allocator, check_copy_on_write, check_physical_slot
from paged_helpers.checks.speaking.failure import CheckFailed, NotImplementedYet
from paged_helpers.notebook_loader import NotebookLoadError, load_from_notebook
from paged_helpers.running.graded import GRADED_ENV

from autograde_helpers import checker, kernel_guard, learner_host
from conftest import NOTEBOOKS, ROOT, solution, strip_ansi
from student_release import write_release

_cells = itertools.count()


def run_cell(source: str, namespace: dict) -> None:
    """Run ``source`` as IPython runs a notebook cell: under an ipykernel file name, in linecache."""
    filename = f"/tmp/ipykernel_4242/{next(_cells)}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)


STUB = """
class BlockAllocator:
    def __init__(self, num_blocks):
        raise NotImplementedError()
"""


# --- Run All over unfinished code -------------------------------------------------------------


def test_try_it_turns_the_learners_stub_into_one_line(capsys):
    namespace = {"ph": ph}
    run_cell(STUB, namespace)
    run_cell("with ph.try_it():\n    pool = BlockAllocator(4)\n    print('never')\n", namespace)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "never" not in out
    assert "`BlockAllocator.__init__` is not implemented yet" in out and "raise NotImplementedError()" in out


def test_a_later_cell_waits_for_the_name_the_skipped_cell_would_have_made(capsys):
    namespace = {"ph": ph}
    run_cell(STUB, namespace)
    run_cell("with ph.try_it():\n    shelf = BlockAllocator(4)\n", namespace)
    capsys.readouterr()
    run_cell("with ph.try_it('The widget'):\n    shelf.allocate()\n", namespace)
    out = capsys.readouterr().out
    assert out.startswith("The widget is waiting for your code. `shelf` was not made")
    run_cell("with ph.try_it():\n    view = shelf.free\n", namespace)
    run_cell("with ph.try_it():\n    view.clear()\n", namespace)  # a chain of skipped cells
    assert capsys.readouterr().out.count("was not made") == 2
    with pytest.raises(NameError):  # a typo is not an unfinished exercise
        run_cell("with ph.try_it():\n    shlef.allocate()\n", namespace)


def test_try_it_lets_real_errors_through():
    namespace = {"ph": ph}
    run_cell("def physical_slot(table, position, block_size):\n    return table[position]\n", namespace)
    with pytest.raises(IndexError):  # the learner's bug: feedback, where it happens
        run_cell("with ph.try_it():\n    physical_slot([1], 5, 4)\n", namespace)
    # a NotImplementedError with a message is deliberate, not an unfinished stub: still raised
    run_cell("def fancy():\n    raise NotImplementedError('sparse tensors are not supported')\n", namespace)
    with pytest.raises(NotImplementedError):
        run_cell("with ph.try_it():\n    fancy()\n", namespace)
    with pytest.raises(NotImplementedError):
        with ph.try_it():  # raised outside any notebook cell
            raise NotImplementedError()


def test_a_stub_inside_a_triton_kernel_is_unfinished_too(capsys):
    """The interpreter reports it as an InterpreterError caused by the stub's NotImplementedError."""
    if ph.DEVICE.type == "cuda":
        pytest.skip("compiled Triton rejects a raise inside a kernel at compile time")
    namespace = {"ph": ph}
    run_cell(
        "import torch\nimport triton\nimport triton.language as tl\n\n"
        "@triton.jit\ndef double_kernel(x_ptr, n, BLOCK: tl.constexpr):\n    raise NotImplementedError()\n\n"
        "def double(x):\n    double_kernel[(1,)](x, x.numel(), BLOCK=8)\n",
        namespace,
    )
    run_cell("with ph.try_it():\n    double(torch.zeros(4))\n", namespace)
    assert "`double_kernel` is not implemented yet" in capsys.readouterr().out


def test_code_loaded_from_an_earlier_notebook_points_there(tmp_path, capsys):
    write_release("02_block_allocator", tmp_path)
    allocator = load_from_notebook("02_block_allocator", "BlockAllocator", search=[tmp_path])
    capsys.readouterr()
    with ph.try_it():
        allocator(4)
    assert "in 02_block_allocator.ipynb is not implemented yet: finish it in that notebook" in capsys.readouterr().out


# --- Run All on every notebook as released ----------------------------------------------------

RELEASED = sorted(path.stem for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))

# Between notebooks: a fresh namespace, and the little state a notebook leaves in the helpers (the
# names skipped "Try it" cells did not make, shown hints, open figures). The appended "default"
# warning filter changes no warning's fate; adding a filter makes Python forget which warnings it
# has shown, so each notebook's warnings reach its stderr as they would in a fresh kernel.
RESET = """\
%reset -f
import os, warnings
import matplotlib.pyplot
from paged_helpers import unfinished
from paged_helpers.checks.speaking.failure import HINT_TIERS
matplotlib.pyplot.close("all")
unfinished._NOT_MADE.clear()
HINT_TIERS.forget()
warnings.simplefilter("default", append=True)
os.chdir({folder!r})
%reset -f
"""


@pytest.fixture(scope="module")
def released_workspace(tmp_path_factory):
    """Every notebook as a class receives it, side by side as in a fresh workspace/, and one kernel
    started there. One kernel for all of them: a kernel start and the imports of torch, Triton and
    matplotlib cost several seconds a notebook, and the browser test runs some in fresh kernels."""
    folder = tmp_path_factory.mktemp("workspace")
    for name in RELEASED:
        write_release(name, folder)
    kernel = KernelManager(kernel_name="python3")
    # A learner's run, not a graded one, whatever ran in this process before.
    kernel.start_kernel(cwd=str(folder), env={k: v for k, v in os.environ.items() if k != GRADED_ENV})
    try:
        yield folder, kernel
    finally:
        kernel.shutdown_kernel(now=True)


def run_all(notebook, folder: Path, kernel: KernelManager):
    client = NotebookClient(
        notebook, km=kernel, timeout=300, allow_errors=True, resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    return notebook


@pytest.mark.parametrize("name", RELEASED)
def test_run_all_on_a_fresh_notebook_reaches_the_end(name, released_workspace):
    """No cell raises or writes to stderr, and every check cell says "not implemented yet"."""
    folder, kernel = released_workspace
    reset = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(RESET.format(folder=str(folder)))])
    run_all(reset, folder, kernel)
    notebook = run_all(nbformat.read(folder / f"{name}.ipynb", as_version=4), folder, kernel)
    code = [(index, cell) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    for index, cell in code:
        for output in cell.outputs:
            assert output.output_type != "error", f"{name}, cell {index} raised:\n" + strip_ansi(
                "\n".join(output.traceback)
            )
            assert not (output.output_type == "stream" and output.name == "stderr"), (
                f"{name}, cell {index} wrote to stderr:\n{output.text}"
            )
    checks = [(index, cell) for index, cell in code if cell.metadata.get("nbgrader", {}).get("grade")]
    assert checks, f"{name} has no check cell"
    for index, cell in checks:
        text = "".join(output.get("text", "") for output in cell.outputs)
        assert "not implemented yet" in text, f"{name}, check cell {index} printed:\n{text}"


def test_a_cell_that_loads_an_earlier_notebook_and_runs_learner_code_is_a_try_it_cell():
    """Notebook 10's model demo loaded 05's class in the cell that builds 04's cache: Run All stopped there."""
    from tools import learner_cells

    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("import paged_helpers as ph"),
            nbformat.v4.new_code_cell('Cache = ph.load_from_notebook("04_fork_and_copy_on_write", "PagedKVCache")'),
            nbformat.v4.new_code_cell(
                'earlier = {"Prefix": ph.load_from_notebook("05_prefix_caching", "PrefixCache")}\n'
                "cache = Cache(layers=1, num_blocks=4, block_size=4, kv_heads=1, head_dim=2)"
            ),
        ]
    )
    assert learner_cells.learner_notebook(notebook)
    assert notebook.cells[1].source.startswith("Cache = ")  # only loads: nothing to wrap
    assert notebook.cells[2].source.startswith("with ph.try_it():\n    earlier = ")
    assert learner_cells.main(["--check"]) == 0, "run tools/learner_cells.py"


# --- checks: unfinished, graded, passing, failing -------------------------------------------


def unfinished_slot(table, position, block_size):
    raise NotImplementedError()


def test_a_check_cell_notes_unfinished_code_and_a_graded_run_fails_it(capsys, monkeypatch):
    check_physical_slot(unfinished_slot, unfinished="note")
    assert "check_physical_slot: not implemented yet" in capsys.readouterr().out
    monkeypatch.setenv(GRADED_ENV, "1")
    with pytest.raises(NotImplementedYet):
        check_physical_slot(unfinished_slot, unfinished="note")


def test_learner_code_cannot_switch_grading_off_during_a_check(monkeypatch):
    monkeypatch.setenv(GRADED_ENV, "1")

    def sneaky(table, position, block_size):
        os.environ.pop(GRADED_ENV, None)
        raise NotImplementedError()

    with pytest.raises(NotImplementedYet):
        check_physical_slot(sneaky, unfinished="note")


def test_the_grading_guard_marks_its_runs_as_graded():
    assert kernel_guard.GRADED_ENV == GRADED_ENV
    source = Path(kernel_guard.__file__).read_text()
    assert "os.environ[GRADED_ENV] = \"1\"" in source
    for module in (checker, learner_host):  # the clean run's checker and learner process
        script, runner = Path(module.__file__).name, Path(module.__file__).read_text()
        marked = runner.index(f'os.environ["{GRADED_ENV}"] = "1"')
        assert marked < runner.index("import paged_helpers"), f"{script} is graded before the package is imported"


def test_a_passing_check_says_what_it_verified(capsys):
    check_block_allocator(solution("02_block_allocator", "BlockAllocator"))
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("check_block_allocator: ") and "scenarios passed" in line and "calls to your code" in line


def test_a_hidden_calls_pass_line_says_it_is_hidden_and_names_no_seed(capsys):
    allocator, slot = solution("02_block_allocator", "BlockAllocator"), solution("01_block_tables", "physical_slot")
    capsys.readouterr()
    check_block_allocator(allocator)
    check_block_allocator(allocator, seed=2026, hidden=True)
    check_physical_slot(slot, seed=987654321)  # a check with no `hidden`: another seed is its hidden call
    check_physical_slot(slot, seed=0)  # the default seed, passed explicitly: the visible scenarios
    visible, hidden_allocator, hidden_slot, default_seed = capsys.readouterr().out.strip().splitlines()
    assert visible.startswith("check_block_allocator: ")
    for line, name in ((hidden_allocator, "check_block_allocator"), (hidden_slot, "check_physical_slot")):
        assert line.startswith(f"{name} (hidden test; when graded, its scenarios come from the grader's secret seed): ")
        assert "scenarios passed" in line and "2026" not in line and "987654321" not in line
    assert default_seed.startswith("check_physical_slot: ")


def rendered(error: BaseException) -> str:
    return "\n".join(error._render_traceback_())


def test_a_failing_check_shows_its_message_first_without_the_checks_frames():
    with pytest.raises(CheckFailed) as caught:
        check_physical_slot(lambda table, position, block_size: (position // block_size, table[0]))
    text = strip_ansi(rendered(caught.value))
    assert text.startswith("CheckFailed: ") and "expected:" in text and "hint:" in text
    assert "paged_helpers/checks" not in text and "File " not in text


def test_when_the_learners_code_raised_its_frames_stay():
    namespace: dict = {}
    run_cell(
        "def physical_slot(table, position, block_size):\n"
        "    offset = position % block_size\n"
        "    return table[position // block_size + 10], offset\n",
        namespace,
    )
    with pytest.raises(CheckFailed) as caught:
        check_physical_slot(namespace["physical_slot"])
    text = strip_ansi(rendered(caught.value))
    first, *rest = text.splitlines()
    assert first.startswith("CheckFailed: ") and "raised IndexError" in first
    assert "/tmp/ipykernel_4242/" in text and "return table[position // block_size + 10]" in text
    assert "paged_helpers" not in "".join(line for line in rest if line.lstrip().startswith("File "))
    # the frames IPython would otherwise show: dozens, through the checks
    assert "paged_helpers/checks" in "".join(traceback.format_exception(caught.value))


# --- the learner's workspace ------------------------------------------------------------------


def test_the_workspace_adds_updates_and_never_overwrites_an_edited_notebook(tmp_path):
    sources = {name: tmp_path / "src" / f"{name}.ipynb" for name in ("01_a", "02_b")}
    released = {name: tmp_path / "rel" / f"{name}.ipynb" for name in sources}
    for path in [*sources.values(), *released.values()]:
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"v1 {path.name}")
    ws = tmp_path / "ws"
    assert {p.action for p in workspace.sync(ws, sources, released)} == {"added"}
    (ws / "02_b.ipynb").write_text("the learner's work")
    for path in [*sources.values(), *released.values()]:
        path.write_text(f"v2 {path.name}")
    placed = {p.name: p for p in workspace.sync(ws, sources, released)}
    assert placed["01_a"].action == "updated" and (ws / "01_a.ipynb").read_text() == "v2 01_a.ipynb"
    assert placed["02_b"].action == "kept" and placed["02_b"].newer
    assert (ws / "02_b.ipynb").read_text() == "the learner's work"
    lines = "\n".join(workspace.describe(ws, list(placed.values())))
    assert "kept your 02_b.ipynb" in lines and "rename or delete" in lines
    (ws / "02_b.ipynb").unlink()  # how a learner asks for a fresh copy
    assert {p.name: p.action for p in workspace.sync(ws, sources, released)} == {"01_a": "unchanged", "02_b": "added"}


# --- the fallback to a published solution -----------------------------------------------------


@pytest.fixture
def course_with_unfinished_03(tmp_path, monkeypatch):
    """A learner's folder: 02 done, 03 a fresh (unfinished) release, 04 done."""
    learner = tmp_path / "workspace"
    learner.mkdir()
    shutil.copy(NOTEBOOKS / "02_block_allocator.ipynb", learner)
    write_release("03_paged_kv_cache", learner)
    shutil.copy(NOTEBOOKS / "04_fork_and_copy_on_write.ipynb", learner)
    monkeypatch.chdir(learner)
    return tmp_path


def test_without_a_published_03_notebook_04_waits_for_the_learners_03(course_with_unfinished_03, capsys):
    cache = load_from_notebook("04_fork_and_copy_on_write", "PagedKVCache")
    assert "03_paged_kv_cache.ipynb is not finished" in capsys.readouterr().out
    with pytest.raises(NotImplementedYet, match="03_paged_kv_cache.ipynb"):
        check_copy_on_write(cache)
    with pytest.raises(NotebookLoadError, match="not been published"):
        load_from_notebook("03_paged_kv_cache", "PagedKVCache", use="published")


def test_an_unpublished_solution_is_never_a_fallback(course_with_unfinished_03, capsys):
    # nbgrader's layout: the instructor's source (with solutions) sits in the course root
    root = course_with_unfinished_03
    for folder in ("source/03_paged_kv_cache", "release/03_paged_kv_cache", "notebooks"):
        (root / folder).mkdir(parents=True)
        shutil.copy(NOTEBOOKS / "03_paged_kv_cache.ipynb", root / folder)
    cache = load_from_notebook("03_paged_kv_cache", "PagedKVCache")
    assert "PagedKVCache.__init__" in cache.__init__.__code__.co_filename or cache.__module__.startswith("learner_")
    assert "published" not in capsys.readouterr().out


def test_notebook_04_is_graded_with_the_published_03(course_with_unfinished_03, capsys):
    root = course_with_unfinished_03
    path = publish.publish(NOTEBOOKS / "03_paged_kv_cache.ipynb", root / "published")
    assert path == root / "published" / "03_paged_kv_cache.ipynb"
    text = path.read_text()
    assert "### BEGIN" not in text and "### END" not in text and "HIDDEN" not in text
    cache = load_from_notebook("04_fork_and_copy_on_write", "PagedKVCache")
    printed = capsys.readouterr().out
    assert "using the course's published `PagedKVCache` from" in printed
    assert "03_paged_kv_cache.ipynb is not finished" in printed
    check_copy_on_write(cache)
    assert capsys.readouterr().out.startswith("check_copy_on_write: ")
    # the learner's own, finished code is used again as soon as it exists
    shutil.copy(NOTEBOOKS / "03_paged_kv_cache.ipynb", root / "workspace")
    load_from_notebook("03_paged_kv_cache", "PagedKVCache")
    assert "using your `PagedKVCache` from 03_paged_kv_cache.ipynb" in capsys.readouterr().out


def test_autograde_finds_the_published_solution_in_the_course_root(tmp_path, monkeypatch, capsys):
    grading = tmp_path / "autograded" / "alice" / "04_fork_and_copy_on_write"
    grading.mkdir(parents=True)
    submitted = tmp_path / "submitted" / "alice"
    (submitted / "02_block_allocator").mkdir(parents=True)
    shutil.copy(NOTEBOOKS / "02_block_allocator.ipynb", submitted / "02_block_allocator")
    (submitted / "03_paged_kv_cache").mkdir()
    write_release("03_paged_kv_cache", submitted / "03_paged_kv_cache")
    monkeypatch.chdir(grading)
    load_from_notebook("03_paged_kv_cache", "PagedKVCache")
    assert "is not finished" in capsys.readouterr().out
    publish.publish(NOTEBOOKS / "03_paged_kv_cache.ipynb", tmp_path / "published")
    load_from_notebook("03_paged_kv_cache", "PagedKVCache")
    assert f"published `PagedKVCache` from {tmp_path / 'published'}" in capsys.readouterr().out


def test_publishing_puts_nothing_in_the_package(tmp_path):
    package = Path(ph.__file__).parent
    before = sorted(p for p in package.rglob("*") if "__pycache__" not in p.parts)
    publish.publish(NOTEBOOKS / "03_paged_kv_cache.ipynb", tmp_path / "published")
    assert sorted(p for p in package.rglob("*") if "__pycache__" not in p.parts) == before
    assert not list(package.rglob("*.ipynb"))
    assert [p.name for p in (tmp_path / "published").iterdir()] == ["03_paged_kv_cache.ipynb"]
    assert nbformat.read(tmp_path / "published" / "03_paged_kv_cache.ipynb", as_version=4).cells


# --- rough edges ------------------------------------------------------------------------------


def test_importing_triton_first_names_the_fix_at_import_and_in_a_kernel_check():
    script = (
        "import triton\n"
        "import paged_helpers\n"
        "from conftest import solution\n"
        "from paged_helpers.checks import check_paged_decode\n"
        "try:\n"
        "    check_paged_decode(solution('07_paged_decode_kernel', 'paged_decode_attention'))\n"
        "except AssertionError as error:\n"
        "    print('CHECK', error._render_traceback_()[0])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT / "tests", env=env, capture_output=True, text=True, timeout=300
    )
    if "cuda" in done.stdout.split("|")[0]:
        pytest.skip("on a GPU, importing triton first is fine")
    banner, *_ = done.stdout.splitlines()
    assert "cannot run kernels here" in banner, done.stdout
    fix = "restart the kernel (Kernel > Restart Kernel) and run `import paged_helpers as ph` before any cell"
    assert fix in done.stdout.splitlines()[1]
    check_line = next(line for line in done.stdout.splitlines() if line.startswith("CHECK"))
    assert check_line.startswith("CHECK CheckFailed: triton was imported before paged_helpers") and fix in check_line


def test_a_notebook_load_error_says_what_to_do(tmp_path):
    (tmp_path / "02_broken.ipynb").write_text("{ not json")
    with pytest.raises(NotebookLoadError, match="rename it and run `make lab`"):
        load_from_notebook("02_broken", "BlockAllocator", search=[tmp_path])
    with pytest.raises(NotebookLoadError, match="What to do: put your 02_absent.ipynb in the same folder"):
        load_from_notebook("02_absent", "BlockAllocator", search=[tmp_path])
