"""Shared by the nbgrader tests: one released course per test session, and submissions built from it.

The course is released once (``released_course``) into a temporary folder and copied for each
test module that grades (``graded_course``), so every module has its own gradebook. Grading
runs ``autograde/course.py`` in a subprocess with PYTHONPATH pointing at a private copy of
``paged_helpers`` (``isolated_site``): the grading kernels import that copy, so a submission
that edits the helper package on disk edits the copy, never this repository, and edits other
people make to the repository during a run cannot race the grader.

Submissions are the instructor notebooks (right) or the released ones (nothing done), edited by
the tests: ``replace_in_cell`` edits solution text, ``insert_cell_after`` adds a cell.
"""

from __future__ import annotations

import atexit
import copy
import functools
import html
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

# Re-exported for the test modules (``paged_grading`` is installed with the package: setup.py).
from paged_grading.administration import (
    class_report,
    collect,
    feedback_files,
    gradebook,
    release_check,
    throwaway_postgres,
)
from paged_grading.clean_run import checker, learner_host, runners, secret_seeds
from paged_grading.preprocessors import execute, guard, hidden_tests, outputs, sanitize, second_opinion
from paged_grading.sandbox import bubblewrap, grading_kernels, kernel_guard, package_copies

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
AUTOGRADE = ROOT / "autograde"


__all__ = [
    "bubblewrap",
    "checker",
    "class_report",
    "collect",
    "execute",
    "feedback_files",
    "gradebook",
    "grading_kernels",
    "guard",
    "hidden_tests",
    "kernel_guard",
    "learner_host",
    "outputs",
    "package_copies",
    "release_check",
    "runners",
    "sanitize",
    "second_opinion",
    "secret_seeds",
    "throwaway_postgres",
]

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@functools.cache
def course_script():
    """autograde/course.py, the instructor's command, as a module (it is a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course", AUTOGRADE / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def course_notebooks() -> list[str]:
    return course_script().course_notebooks(NOTEBOOKS)


def _scratch(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.cache
def isolated_site() -> Path:
    site = _scratch("graded-site-")
    shutil.copytree(ROOT / "paged_helpers", site / "paged_helpers", ignore=shutil.ignore_patterns("__pycache__"))
    # The data folder where an installed package keeps it (paged_helpers.course_data.data_dir).
    shutil.copytree(ROOT / "data", site / "paged_helpers" / "course_data" / "files")
    return site


def grading_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(isolated_site()),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


def write_config(root: Path, **overrides: object) -> None:
    """A course root that reads autograde/nbgrader_config.py, then ``Class.trait=value`` overrides."""
    root.mkdir(parents=True, exist_ok=True)
    lines = [
        "c = get_config()  # noqa: F821",
        f"load_subconfig({str(AUTOGRADE / 'nbgrader_config.py')!r})  # noqa: F821",
    ]
    lines += [f"c.{name} = {value!r}" for name, value in overrides.items()]
    (root / "nbgrader_config.py").write_text("\n".join(lines) + "\n")


def course(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run autograde/course.py on ``root``; its output is returned (and shown if it fails)."""
    done = subprocess.run(
        [sys.executable, str(AUTOGRADE / "course.py"), "--root", str(root), *args],
        env=grading_env(),
        capture_output=True,
        text=True,
    )
    if check and done.returncode:
        raise AssertionError(f"course.py {' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


@functools.cache
def released_course() -> Path:
    """Every notebook of notebooks/ released once per session (source/, release/, gradebook.db)."""
    root = _scratch("released-course-") / "course"
    write_config(root)
    course(root, "release")
    return root


def graded_course(name: str, **config: object) -> Path:
    """A private copy of the released course (its own gradebook), with config overrides."""
    root = _scratch(f"{name}-") / "course"
    source = released_course()
    root.mkdir(parents=True)
    for part in ("source", "release"):
        shutil.copytree(source / part, root / part)
    shutil.copyfile(source / "gradebook.db", root / "gradebook.db")
    write_config(root, **config)
    return root


def instructor(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{assignment}.ipynb", as_version=4)


def released(assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(released_course() / "release" / assignment / f"{assignment}.ipynb", as_version=4)


def cell_of(notebook: nbformat.NotebookNode, grade_id: str) -> int:
    for index, cell in enumerate(notebook.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return index
    raise KeyError(f"no cell {grade_id!r}")


def replace_in_cell(notebook, grade_id: str, old: str, new: str) -> nbformat.NotebookNode:
    """A copy of ``notebook`` with ``old`` (which must be there) replaced in cell ``grade_id``."""
    notebook = copy.deepcopy(notebook)
    cell = notebook.cells[cell_of(notebook, grade_id)]
    assert old in cell.source, f"{old!r} is not in cell {grade_id}: the notebook changed, update the test"
    cell.source = cell.source.replace(old, new)
    return notebook


def insert_cell_after(notebook, grade_id: str | None, source: str, metadata: dict | None = None):
    """A copy with a new code cell after cell ``grade_id`` (at the top when None)."""
    notebook = copy.deepcopy(notebook)
    index = 0 if grade_id is None else cell_of(notebook, grade_id) + 1
    cell = nbformat.v4.new_code_cell(source, metadata=metadata or {})
    notebook.cells.insert(index, cell)
    return notebook


def write_submission(folder: Path, student: str, notebooks: dict[str, nbformat.NotebookNode]) -> None:
    """A student's folder as collect expects it: <folder>/<student>/<assignment>.ipynb."""
    (folder / student).mkdir(parents=True, exist_ok=True)
    for assignment, notebook in notebooks.items():
        nbformat.write(notebook, folder / student / f"{assignment}.ipynb")


def scores_of(root: Path) -> dict[tuple[str, str], dict[str, tuple[float, float]]]:
    """(student, assignment) -> {test cell: (score, max)} from the gradebook (autograded cells only)."""
    scores: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    for row in class_report.autograded_scores(f"sqlite:///{root / 'gradebook.db'}"):
        scores.setdefault((row.student, row.assignment), {})[row.check] = (row.score, row.max_score)
    return scores


def manual_scores(root: Path) -> list[float | None]:
    """Every manual_score in the gradebook (None unless an instructor, or an attack, set one)."""
    import sqlite3

    with sqlite3.connect(root / "gradebook.db") as db:
        return [row[0] for row in db.execute("SELECT manual_score FROM grade")]


def total(cells: dict[str, tuple[float, float]]) -> tuple[float, float]:
    return sum(s for s, _ in cells.values()), sum(m for _, m in cells.values())


def max_points(assignment: str) -> dict[str, float]:
    """Autograded test cells of an assignment and their points, from the instructor notebook."""
    points = {}
    for cell in instructor(assignment).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            points[meta["grade_id"]] = float(meta["points"])
    return points


def feedback_text(root: Path, student: str, assignment: str) -> str:
    page = (root / "feedback" / student / assignment / f"{assignment}.html").read_text()
    page = re.sub(r"<style.*?</style>|<script.*?</script>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def autograded_notebook(root: Path, student: str, assignment: str) -> nbformat.NotebookNode:
    return nbformat.read(root / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)


def errors_of(notebook, grade_id: str) -> list[str]:
    cell = notebook.cells[cell_of(notebook, grade_id)]
    return [ANSI.sub("", f"{o.ename}: {o.evalue}") for o in cell.outputs if o.output_type == "error"]
