"""The student release of every notebook in notebooks/: nothing given away, nothing that crashes.

For each notebook: nbgrader generates the release (once per session, shared with the other
nbgrader tests); no line of a solution or hidden-test region is left in it, nor a fragment of
one in the installed ``paged_helpers``; and executed as a learner receives it (all releases
side by side, nothing implemented), every autograded test cell fails with "not implemented
yet" rather than crashing or passing. The leak detector itself is shown to catch leaks.
"""

from __future__ import annotations

import copy
import shutil

import nbformat
import pytest

from autograde_helpers import NOTEBOOKS, course, course_notebooks, max_points, release_check, released_course

pytestmark = pytest.mark.nbgrader

ASSIGNMENTS = course_notebooks()


@pytest.fixture(scope="module")
def release_runs():
    root = released_course()
    return {run.assignment: run for run in release_check.run_release(root / "release", ASSIGNMENTS, timeout=600)}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_leaves_no_solution_text(assignment):
    released = released_course() / "release" / assignment / f"{assignment}.ipynb"
    leaks = release_check.find_leaks(NOTEBOOKS / f"{assignment}.ipynb", released, release_check.installed_package_dir())
    assert leaks == [], "\n".join(f"{leak.secret!r} in {leak.where}" for leak in leaks)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_holds_only_the_notebook(assignment):
    folder = released_course() / "release" / assignment
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [f"{assignment}.ipynb"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_test_cell_of_the_release_says_not_implemented(release_runs, assignment):
    run = release_runs[assignment]
    assert [v.grade_id for v in run.verdicts] == list(max_points(assignment))
    bad = [f"{v.grade_id}: {v.message}" for v in run.verdicts if not v.ok]
    assert not bad, "\n".join(bad)


def test_check_release_command_is_clean():
    done = course(released_course(), "check-release", "--skip-run")
    assert "release check: clean" in done.stdout


def test_leak_detector_finds_solution_text_in_a_release(tmp_path):
    assignment = "02_block_allocator" if "02_block_allocator" in ASSIGNMENTS else ASSIGNMENTS[0]
    source = NOTEBOOKS / f"{assignment}.ipynb"
    secret = sorted(release_check.secret_lines(source), key=len)[-1]
    notebook = nbformat.read(released_course() / "release" / assignment / f"{assignment}.ipynb", as_version=4)
    leaky = copy.deepcopy(notebook)
    leaky.cells.append(nbformat.v4.new_markdown_cell(f"A hint:\n\n    {secret}\n"))
    nbformat.write(leaky, tmp_path / "leaky.ipynb")
    package = tmp_path / "package"
    package.mkdir()
    leaks = release_check.find_leaks(source, tmp_path / "leaky.ipynb", package)
    assert [leak.secret for leak in leaks] == [secret]


def test_leak_detector_finds_a_solution_in_the_package(tmp_path):
    assignment = "02_block_allocator" if "02_block_allocator" in ASSIGNMENTS else ASSIGNMENTS[0]
    source = NOTEBOOKS / f"{assignment}.ipynb"
    package = tmp_path / "package"
    shutil.copytree(release_check.installed_package_dir(), package, ignore=shutil.ignore_patterns("__pycache__"))
    fragment = release_check.secret_fragments(source)[0]
    body = "\n".join("    " + line for line in fragment)
    (package / "sneaky.py").write_text(f"def helper(self):\n{body}\n")
    released = released_course() / "release" / assignment / f"{assignment}.ipynb"
    leaks = release_check.find_leaks(source, released, package)
    assert [leak.where for leak in leaks] == [str(package / "sneaky.py")]
