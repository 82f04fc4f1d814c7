"""The loader that carries a learner's classes from one notebook to the next."""

from __future__ import annotations

import nbformat
import pytest

from paged_helpers.notebook_loader import NotebookLoadError, find_notebook, load_from_notebook


def write_notebook(path, *cells: str):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


ALLOCATOR_CELLS = (
    "import paged_helpers as ph\n%matplotlib inline\nfrom collections import deque",
    "BLOCKS = 4\nclass Counter:\n    def __init__(self):\n        self.free = deque(range(BLOCKS))\n"
    "    def take(self):\n        return self.free.popleft()",
    "demo = Counter()\nprint('demo ran', demo.take())\nraise SystemExit('the demo cell must not run')",
    "!echo shell lines are skipped\nassert False, 'test cells must not run'",
)


def test_takes_definitions_without_running_demos_or_tests(tmp_path, capsys):
    write_notebook(tmp_path / "02_alloc.ipynb", *ALLOCATOR_CELLS)
    Counter = load_from_notebook("02_alloc", "Counter", search=[tmp_path])
    assert Counter().take() == 0
    assert "demo ran" not in capsys.readouterr().out


def test_several_names_come_back_as_a_tuple(tmp_path):
    write_notebook(tmp_path / "02_alloc.ipynb", *ALLOCATOR_CELLS)
    counter_class, blocks = load_from_notebook("02_alloc.ipynb", ["Counter", "BLOCKS"], search=[tmp_path])
    assert blocks == 4 and counter_class.__module__ == "learner_02_alloc"


def test_missing_name_says_where_to_define_it(tmp_path):
    write_notebook(tmp_path / "02_alloc.ipynb", *ALLOCATOR_CELLS)
    with pytest.raises(NotebookLoadError, match="02_alloc.ipynb defines no `BlockAllocator`"):
        load_from_notebook("02_alloc", "BlockAllocator", search=[tmp_path])


def test_unfinished_code_is_named_and_refused_on_request(tmp_path, capsys):
    write_notebook(
        tmp_path / "02_alloc.ipynb",
        "class BlockAllocator:\n    def allocate(self):\n        # YOUR CODE HERE\n"
        "        raise NotImplementedError()\n"
        "    def share(self, block):\n        return block",
    )
    with pytest.raises(NotebookLoadError, match=r"BlockAllocator.allocate still raise"):
        load_from_notebook("02_alloc", "BlockAllocator", search=[tmp_path], allow_unimplemented=False)
    allocator_class = load_from_notebook("02_alloc", "BlockAllocator", search=[tmp_path])
    assert allocator_class().share(3) == 3
    printed = capsys.readouterr()
    assert "note: `BlockAllocator` in 02_alloc.ipynb is not finished: BlockAllocator.allocate" in printed.out
    assert printed.err == ""


def test_missing_notebook_lists_the_places_searched(tmp_path):
    with pytest.raises(NotebookLoadError, match="not found. Looked in") as caught:
        load_from_notebook("09_nothing", "X", search=[tmp_path])
    assert str(tmp_path) in str(caught.value)


def test_syntax_error_names_the_cell(tmp_path):
    write_notebook(tmp_path / "02_alloc.ipynb", "x = 1", "def broken(:\n    pass")
    with pytest.raises(NotebookLoadError, match="code cell 1"):
        load_from_notebook("02_alloc", "x", search=[tmp_path])


def test_a_notebook_can_load_from_an_earlier_one_beside_it(tmp_path):
    write_notebook(tmp_path / "02_alloc.ipynb", *ALLOCATOR_CELLS)
    write_notebook(
        tmp_path / "03_cache.ipynb",
        "import paged_helpers as ph",
        "Counter = ph.load_from_notebook('02_alloc', 'Counter')",
        "class Cache:\n    def __init__(self):\n        self.allocator = Counter()",
    )
    Cache = load_from_notebook("03_cache", "Cache", search=[tmp_path])
    assert Cache().allocator.take() == 0


def test_nbgrader_layouts_are_searched(tmp_path, monkeypatch):
    """autograded/<student>/03/ finds 02 in submitted/<student>/02/, the truth after a resubmission."""
    course = tmp_path / "course"
    write_notebook(course / "submitted" / "ada" / "02_alloc" / "02_alloc.ipynb", *ALLOCATOR_CELLS)
    grading_dir = course / "autograded" / "ada" / "03_cache"
    grading_dir.mkdir(parents=True)
    monkeypatch.chdir(grading_dir)
    assert find_notebook("02_alloc") == course / "submitted" / "ada" / "02_alloc" / "02_alloc.ipynb"
    write_notebook(course / "autograded" / "ada" / "02_alloc" / "02_alloc.ipynb", *ALLOCATOR_CELLS)
    assert find_notebook("02_alloc") == course / "submitted" / "ada" / "02_alloc" / "02_alloc.ipynb"
    monkeypatch.chdir(course / "submitted" / "ada" / "02_alloc")
    write_notebook(course / "submitted" / "ada" / "01_slots" / "01_slots.ipynb", "x = 1")
    assert find_notebook("01_slots") == course / "submitted" / "ada" / "01_slots" / "01_slots.ipynb"


def test_checks_name_the_earlier_notebook_that_is_unfinished(tmp_path):
    from paged_helpers.checks.reading.calls import call_learner
    from paged_helpers.checks.speaking.failure import NotImplementedYet

    write_notebook(
        tmp_path / "02_alloc.ipynb",
        "class BlockAllocator:\n    def allocate(self):\n        raise NotImplementedError()",
    )
    allocator = load_from_notebook("02_alloc", "BlockAllocator", search=[tmp_path])()
    with pytest.raises(
        NotImplementedYet, match="The code that raised is in 02_alloc.ipynb: finish that notebook"
    ):
        call_learner("cache.reserve", lambda: allocator.allocate())

    def typed_here():
        raise NotImplementedError()

    with pytest.raises(NotImplementedYet, match="Replace `raise NotImplementedError\\(\\)` in its cell"):
        call_learner("fork", typed_here)


# --------------------------------------------------------------------------- issue 25: nbformat 3 notebooks

_CLEAN_RUN_OF_A_V3_NOTEBOOK = """
import sys
sys.path[:0] = [sys.argv[2]]  # this tree's paged_helpers
from paged_grading.clean_run import learner_host  # records the import system, as the clean run's learner process does
from paged_helpers.notebook_loader import load_definitions

module = load_definitions(sys.argv[1], module_name="learner_submission")
changes = learner_host._restore_import_system()
assert changes == [], changes
from paged_helpers.checks import check_block_allocator

check_block_allocator(module.BlockAllocator, seed=5)
print("clean", "nbformat" in sys.modules)
"""


def test_a_version_3_notebook_loads_without_touching_the_import_system(tmp_path):
    """Notebook 02 saved as nbformat 3 (JupyterLab still writes it for an old notebook): its definitions
    load as from version 4, and the grader's clean run sees no change to sys.meta_path while they load
    (nbformat's import would append six's importer there, read as the student's import finder)."""
    import subprocess
    import sys

    from conftest import NOTEBOOKS, ROOT

    solved = nbformat.read(NOTEBOOKS / "02_block_allocator.ipynb", as_version=4)
    path = tmp_path / "02_block_allocator.ipynb"
    nbformat.write(nbformat.convert(solved, 3), path, version=3)
    assert '"worksheets"' in path.read_text() and '"nbformat": 3' in path.read_text()
    run = subprocess.run(
        [sys.executable, "-c", _CLEAN_RUN_OF_A_V3_NOTEBOOK, str(path), str(ROOT)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "clean False" in run.stdout, run.stdout


def test_a_version_3_notebook_gives_the_same_definitions(tmp_path):
    from conftest import NOTEBOOKS

    solved = nbformat.read(NOTEBOOKS / "02_block_allocator.ipynb", as_version=4)
    nbformat.write(nbformat.convert(solved, 3), tmp_path / "02_block_allocator.ipynb", version=3)
    allocator_class = load_from_notebook("02_block_allocator", "BlockAllocator", search=[tmp_path])
    pool = allocator_class(3)
    assert pool.allocate() == 0 and list(pool.free) == [1, 2] and pool.refs == [1, 0, 0]


def test_an_earlier_notebook_that_cannot_be_loaded_costs_only_what_uses_it(tmp_path):
    """09 without 04: its kernels and launchers load; the name from 04, and a class built on it,
    raise the loader's error when used (a published solution still replaces a direct load)."""
    from paged_helpers.notebook_loader import Unavailable, load_definitions

    path = write_notebook(
        tmp_path / "09_later.ipynb",
        "import paged_helpers as ph\nCache = ph.load_from_notebook('04_missing', 'Cache')",
        "class Child(Cache):\n    pass",
        "def launcher(x):\n    return x + 1",
    )
    module = load_definitions(path, module_name="later_without_04")
    assert module.launcher(1) == 2
    assert isinstance(module.Cache, Unavailable) and isinstance(module.Child, Unavailable)
    with pytest.raises(NotebookLoadError, match="04_missing.ipynb not found"):
        module.Cache(4)
    with pytest.raises(NotebookLoadError, match="Child in 09_later.ipynb could not be defined"):
        module.Child()
    with pytest.raises(NotebookLoadError, match="Cache in 09_later.ipynb could not be defined"):
        load_from_notebook("09_later", "Cache", search=[tmp_path])
