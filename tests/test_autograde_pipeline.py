"""The instructor's pipeline end to end, with real nbgrader and real kernels.

One class is graded once (module fixture): a student who submits the instructor notebooks,
one who submits the release untouched, students with one planted bug each (derived from the
instructor source by editing solution text), and one whose notebook 02 is blank while 03 is
right (03 must load the student's OWN 02). Then: collect (folders and an LMS zip), grade,
feedback and the class report, through autograde/course.py.
"""

from __future__ import annotations

import csv
import re
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograde_helpers import (
    NOTEBOOKS as NOTEBOOK_DIR,
)
from autograde_helpers import (
    autograded_notebook,
    course,
    course_notebooks,
    errors_of,
    feedback_text,
    graded_course,
    instructor,
    max_points,
    released,
    replace_in_cell,
    scores_of,
    total,
    write_submission,
)

pytestmark = pytest.mark.nbgrader

NOTEBOOKS = course_notebooks()

# Planted bugs: (assignment, solution cell, old text, new text, checks it breaks, words the feedback shows)
PLANTED = {
    "no_copy_on_write": (
        "04_fork_and_copy_on_write",
        "fork_and_copy_on_write",
        "copies = self.blocks_to_copy(seq, new_tokens)",
        "copies = []",
        {"test_copy_on_write", "test_fork_logits"},
        ["copy"],
    ),
    "prefix_key_without_history": (
        "05_prefix_caching",
        "prefix_cache",
        "key = tuple(prompt[:reused + size])",
        "key = tuple(prompt[reused:reused + size])",
        {"test_prefix_cache"},
        ["prefix"],
    ),
    "kernel_without_length_mask": (
        "07_paged_decode_kernel",
        "paged_decode_kernel",
        "valid = i * BLOCK + slots < length",
        "valid = slots < BLOCK",
        # the kernel's own check, and the launcher's, which runs the launcher end to end on that kernel
        {"test_paged_decode_kernel", "test_paged_decode"},
        ["length"],
    ),
}


def _planted_notebook(student: str) -> nbformat.NotebookNode:
    assignment, cell, old, new, _, _ = PLANTED[student]
    return replace_in_cell(instructor(assignment), cell, old, new)


def _prerequisites(assignment: str) -> list[str]:
    """The earlier notebooks ``assignment`` loads classes from (directly or not), in course order."""
    needed: set[str] = set()
    todo = [assignment]
    while todo:
        source = (NOTEBOOK_DIR / f"{todo.pop()}.ipynb").read_text()
        for name in re.findall(r'load_from_notebook\(\\"(\d\d_[a-z0-9_]+)\\"', source):
            if name not in needed:
                needed.add(name)
                todo.append(name)
    return sorted(needed)


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    root = graded_course("pipeline")
    folder = tmp_path_factory.mktemp("class")
    write_submission(folder, "correct", {name: instructor(name) for name in NOTEBOOKS})
    for student in PLANTED:
        assignment = PLANTED[student][0]
        notebooks = {name: instructor(name) for name in _prerequisites(assignment)}
        write_submission(folder, student, {**notebooks, assignment: _planted_notebook(student)})
    write_submission(
        folder,
        "own_02_blank",
        {
            "02_block_allocator": released("02_block_allocator"),
            "03_paged_kv_cache": instructor("03_paged_kv_cache"),
        },
    )
    # the blank student comes as a Canvas zip export
    archive = tmp_path_factory.mktemp("lms") / "submissions.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for index, name in enumerate(NOTEBOOKS):
            zf.writestr(f"blank_{1000 + index}_{2000 + index}_{name}.ipynb", nbformat.writes(released(name)))
        zf.writestr("blank_999_998_notes.txt", "not a notebook")
    course(root, "collect", str(folder), str(archive))
    # The whole course for "correct" and "blank" (one nbgrader run each), then only the notebook
    # under test for the others: their earlier notebooks are loaded from submitted/ (never graded).
    runs = [course(root, "grade", "--student", student, check=False) for student in ("correct", "blank")]
    for student, (assignment, *_) in PLANTED.items():
        runs.append(course(root, "grade", assignment, "--student", student, check=False))
    runs.append(course(root, "grade", "03_paged_kv_cache", "--student", "own_02_blank", check=False))
    course(root, "feedback")
    report = course(root, "report")
    return root, runs, report


def test_grading_completes(graded_class):
    for run in graded_class[1]:
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.parametrize("assignment", NOTEBOOKS)
def test_correct_submission_scores_full_marks(graded_class, assignment):
    cells = scores_of(graded_class[0])[("correct", assignment)]
    assert set(cells) == set(max_points(assignment))
    assert total(cells) == (sum(max_points(assignment).values()),) * 2, cells


@pytest.mark.parametrize("assignment", NOTEBOOKS)
def test_release_as_submitted_scores_zero(graded_class, assignment):
    cells = scores_of(graded_class[0])[("blank", assignment)]
    assert total(cells) == (0.0, sum(max_points(assignment).values())), cells


@pytest.mark.parametrize("student", list(PLANTED))
def test_planted_bug_loses_exactly_its_checks(graded_class, student):
    assignment, _, _, _, broken, _ = PLANTED[student]
    scores = scores_of(graded_class[0])
    assert {a for s, a in scores if s == student} == {assignment}
    cells = scores[(student, assignment)]
    lost = {check for check, (score, maximum) in cells.items() if score < maximum}
    assert lost == broken, cells
    assert all(cells[check][0] == 0 for check in broken)


@pytest.mark.parametrize("student", list(PLANTED))
def test_feedback_names_the_bug(graded_class, student):
    assignment, _, _, _, broken, words = PLANTED[student]
    root = graded_class[0]
    notebook = autograded_notebook(root, student, assignment)
    text = feedback_text(root, student, assignment)
    for check in broken:
        messages = errors_of(notebook, check)
        assert messages and "CheckFailed" in messages[-1], messages
        first_line = messages[-1].splitlines()[0].split(": ", 1)[1]
        assert first_line in text, f"{check}: the feedback does not show {first_line!r}"
    assert all(word in text.lower() for word in words), words


def test_later_notebooks_load_the_students_own_earlier_work(graded_class):
    root = graded_class[0]
    scores = scores_of(root)
    assert total(scores[("own_02_blank", "03_paged_kv_cache")])[0] == 0
    notebook = autograded_notebook(root, "own_02_blank", "03_paged_kv_cache")
    # Either the load refuses the unfinished class, or the check traces NotImplementedError to 02:
    # both name the student's own notebook 02 (the instructor's would have passed).
    errors = [o.evalue for cell in notebook.cells for o in cell.get("outputs", []) if o.output_type == "error"]
    assert any("02_block_allocator" in error for error in errors), errors
    assert total(scores[("correct", "03_paged_kv_cache")])[0] > 0


def test_feedback_never_shows_hidden_tests_or_the_guard(graded_class):
    root = graded_class[0]
    pages = sorted((root / "feedback").rglob("*.html"))
    assert len(pages) >= 2 * len(NOTEBOOKS)
    for page in pages:
        text = page.read_text()
        assert "HIDDEN TESTS" not in text and "seed=2026" not in text, page
        assert "autograde guard" not in text and "fresh_helpers" not in text, page


def test_release_feedback_says_not_implemented(graded_class):
    root = graded_class[0]
    for assignment in NOTEBOOKS:
        assert "not implemented yet" in feedback_text(root, "blank", assignment), assignment


def test_class_report(graded_class):
    root, _, report = graded_class
    reports = root / "reports"
    with open(reports / "grades.csv") as handle:
        grades = list(csv.DictReader(handle))
    assert {(row["student_id"], row["assignment"]) for row in grades} >= {("correct", a) for a in NOTEBOOKS}
    with open(reports / "pass_rates.csv") as handle:
        rates = {(row["assignment"], row["check"]): row for row in csv.DictReader(handle)}
    for assignment in NOTEBOOKS:
        for check in max_points(assignment):
            row = rates[(assignment, check)]
            assert 0 < float(row["pass_rate"]) < 1, row  # "correct" passes, "blank" fails
    assert (reports / "score_histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "pass rate" in report.stdout


def test_lms_zip_skips_what_is_not_a_course_notebook(tmp_path):
    from autograde_helpers import collect

    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("jdoe_12_34_02_block_allocator.ipynb", "{}")
        zf.writestr("jdoe_LATE_12_35_02_block_allocator-1.ipynb", "{}")
        zf.writestr("Jane Roe_77_assignsubmission_file_/01_block_tables.ipynb", "{}")
        zf.writestr("jdoe_12_36_scratch.ipynb", "{}")
    result = collect.collect_zip(archive, tmp_path / "submitted", {"01_block_tables", "02_block_allocator"})
    assert sorted(set(result.placed)) == [("Jane_Roe", "01_block_tables"), ("jdoe", "02_block_allocator")]
    assert result.skipped == ["jdoe_12_36_scratch.ipynb"]
    assert Path(tmp_path / "submitted" / "jdoe" / "02_block_allocator" / "timestamp.txt").exists()
