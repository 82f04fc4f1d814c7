"""Honest students never lose silently, in a class graded by parallel workers into PostgreSQL.

One class, graded once (module fixture) through ``course.py collect -> grade -> feedback ->
report`` on notebooks 01 and 02. Where Debian's PostgreSQL is installed, the gradebook is a
throwaway PostgreSQL server (``paged_grading.administration.throwaway_postgres``: started as the ``postgres`` user when
the tests run as root, socket in a temporary folder) and ``grade --jobs 2`` grades two students
at a time; otherwise the same class is graded serially into SQLite and the PostgreSQL test is
skipped, saying why. Each honest case asserts the score it deserves:

* names in other scripts keep their letters and stay distinct (two all-non-ASCII names used to
  become one student ``unknown``), and two names that clean up the same stay two students;
* a draft in ``backup/`` does not replace the newer notebook, and the choice is reported;
* cells pasted into a new notebook (no nbgrader metadata) are matched to the release and
  graded; a notebook with nothing to match is reported, not silently zero;
* a comment containing the hidden-test marker does not cost anyone their feedback;
* a 20 MiB file and a 3 MiB output do not go back in feedback;
* a cell that runs too long says which cell and how long, and the rest is still graded.
"""

from __future__ import annotations

import copy
import csv
import os
import time
from pathlib import Path

import nbformat
import pytest

from autograde_helpers import (
    autograded_notebook,
    cell_of,
    course,
    feedback_files,
    feedback_text,
    graded_course,
    insert_cell_after,
    instructor,
    released,
    throwaway_postgres,
)

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]

A1, A2 = "01_block_tables", "02_block_allocator"
TIMEOUT = 40  # `import torch` alone can take 15 s on a loaded 2-core machine
BIG_FILE_MIB = 20

WRITE_BIG_FILE = f"""\
with open("big.bin", "wb") as handle:
    handle.write(b"x" * ({BIG_FILE_MIB} * 2**20))
print("y" * (3 * 2**20))
"""

SLEEP = "import time\ntime.sleep(600)\n"


def _solved(assignment: str) -> nbformat.NotebookNode:
    """What a student who finished the notebook has: the release with the solution cells filled in."""
    notebook = released(assignment)
    source = instructor(assignment)
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            cell.source = source.cells[cell_of(source, meta["grade_id"])].source
    return notebook


def _pasted(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The same cells pasted into a new notebook: no cell metadata, new ids."""
    new = nbformat.v4.new_notebook()
    make = {"code": nbformat.v4.new_code_cell, "markdown": nbformat.v4.new_markdown_cell}
    new.cells = [make[cell.cell_type](cell.source) for cell in notebook.cells if cell.cell_type in make]
    return new


def _with_marker_comment(notebook: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    notebook = copy.deepcopy(notebook)
    cell = notebook.cells[cell_of(notebook, grade_id)]
    cell.source += "\n# my notes: ### BEGIN HIDDEN TESTS would go here, says the course\n"
    return notebook


def _write(folder: Path, student: str, notebooks: dict[str, nbformat.NotebookNode], sub: str = "") -> None:
    (folder / student / sub).mkdir(parents=True, exist_ok=True)
    for assignment, notebook in notebooks.items():
        nbformat.write(notebook, folder / student / sub / f"{assignment}.ipynb")


def _solution_id(assignment: str) -> str:
    return next(
        c.metadata["nbgrader"]["grade_id"]
        for c in instructor(assignment).cells
        if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"
    )


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    reason = throwaway_postgres.unavailable_reason()
    server = None if reason else throwaway_postgres.ThrowawayPostgres().start()
    try:
        config = {"FairExecute.timeout": TIMEOUT, "FairExecute.responsive_grace": 5}
        if server:
            config["CourseDirectory.db_url"] = server.url
        root = graded_course("class", **config)
        if server:
            course(root, "release", A1, A2)  # registers the two assignments in the new gradebook
        folder = tmp_path_factory.mktemp("class")
        # Seven students, several honest cases each (every student costs an nbgrader run).
        zoe = "Zoë Šimková"  # Unicode name; a marker comment in 01; a stale draft of 02 in backup/
        _write(folder, zoe, {A1: _with_marker_comment(instructor(A1), _solution_id(A1)), A2: instructor(A2)})
        _write(folder, zoe, {A2: released(A2)}, sub="backup")
        day_ago = time.time() - 86400
        os.utime(folder / zoe / "backup" / f"{A2}.ipynb", (day_ago, day_ago))
        _write(folder, "李雷", {A2: _pasted(_solved(A2))})  # all non-ASCII; cells pasted into a new notebook
        _write(folder, "韩梅梅", {A2: released(A2)})  # all non-ASCII, nothing done
        big = insert_cell_after(instructor(A2), "test_block_allocator", WRITE_BIG_FILE)
        _write(folder, "Anna Lee", {A2: big})  # right, and writes a big file and a big output
        lost = nbformat.v4.new_notebook()
        lost.cells = [nbformat.v4.new_code_cell("print('my allocator is in another file')")]
        _write(folder, "Anna_Lee", {A2: lost})  # cleans up to the same id; nothing to match
        _write(folder, "sleepy", {A2: insert_cell_after(instructor(A2), _solution_id(A2), SLEEP)})
        tagged = released(A2)
        tagged.cells[cell_of(tagged, "test_block_allocator")].metadata["tags"] = ["skip-execution", "skip-autograde"]
        _write(folder, "tagger", {A2: tagged})
        collected = course(root, "collect", str(folder))
        jobs = ["--jobs", "2"] if server else []
        grade = course(root, "grade", A1, A2, *jobs, check=False)
        feedback = course(root, "feedback", A1, A2, check=False)
        report = course(root, "report", check=False)
        yield {
            "root": root,
            "server": server,
            "reason": reason,
            "collect": collected,
            "grade": grade,
            "feedback": feedback,
            "report": report,
        }
    finally:
        if server:
            server.stop()


def _checks(root: Path) -> dict[tuple[str, str], float]:
    """(student, assignment) -> autograded score, from the class report's checks.csv."""
    scores: dict[tuple[str, str], float] = {}
    with open(root / "reports" / "checks.csv", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            key = (row["student"], row["assignment"])
            scores[key] = scores.get(key, 0.0) + float(row["score"])
    return scores


def _max(assignment: str) -> float:
    return sum(
        float(c.metadata["nbgrader"]["points"])
        for c in instructor(assignment).cells
        if c.cell_type == "code"
        and c.metadata.get("nbgrader", {}).get("grade")
        and not c.metadata["nbgrader"].get("solution")
    )


def test_the_pipeline_runs(graded):
    for step in ("grade", "feedback", "report"):
        done = graded[step]
        assert done.returncode == 0, f"{step}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def test_graded_by_two_workers_into_postgresql(graded):
    if graded["server"] is None:
        pytest.skip(f"PostgreSQL is not available here: {graded['reason']}")
    out = graded["grade"].stdout
    assert "with 2 workers into postgresql" in out, out[-3000:]
    logs = graded["root"] / "reports" / "grading-logs"
    assert (logs / "李雷.log").exists() and (logs / f"{ZOE}.log").exists()


ZOE = "Zoë_Šimková"
TWIN = "Anna_Lee"


def _twin(scores) -> str:
    """The id the second 'Anna Lee' got (Anna_Lee-<hash>)."""
    return next(student for student, _ in scores if student.startswith(f"{TWIN}-"))


def test_names_in_any_script_stay_distinct_students(graded):
    scores = _checks(graded["root"])
    assert scores[(ZOE, A1)] == _max(A1)
    assert scores[("李雷", A2)] == _max(A2)
    assert scores[("韩梅梅", A2)] == 0
    assert not any(student == "unknown" for student, _ in scores)


def test_two_names_that_clean_up_the_same_stay_two_students(graded):
    scores = _checks(graded["root"])
    twins = sorted(student for student, _ in scores if student.startswith(TWIN))
    assert len(twins) == 2, twins
    assert scores[(TWIN, A2)] == 0 and scores[(_twin(scores), A2)] == _max(A2)  # 'Anna_Lee' keeps its id
    assert f"{TWIN}-" in graded["collect"].stdout


def test_a_draft_in_backup_does_not_replace_the_newer_notebook(graded):
    assert _checks(graded["root"])[(ZOE, A2)] == _max(A2)
    log = (graded["root"] / "reports" / "collect.log").read_text(encoding="utf-8")
    line = next(line for line in log.splitlines() if f"{ZOE}/{A2}" in line)
    assert "2 copies" in line and "not graded:" in line and "backup" in line.split("not graded:")[1]
    assert "newest modification time" in log


def test_pasted_cells_are_matched_and_graded(graded):
    root = graded["root"]
    assert _checks(root)[("李雷", A2)] == _max(A2)
    log = (root / "reports" / "recovered_metadata.log").read_text(encoding="utf-8")
    assert f"李雷/{A2}: no nbgrader metadata" in log


def test_nothing_to_match_is_reported_not_silent(graded):
    root = graded["root"]
    assert _checks(root)[(TWIN, A2)] == 0
    log = (root / "reports" / "recovered_metadata.log").read_text(encoding="utf-8")
    assert f"{TWIN}/{A2}: UNGRADABLE" in log


def test_a_marker_comment_costs_no_one_their_feedback(graded):
    root = graded["root"]
    for student, assignment in [(ZOE, A1), (ZOE, A2), ("李雷", A2), ("韩梅梅", A2), ("sleepy", A2)]:
        assert (root / "feedback" / student / assignment / f"{assignment}.html").exists(), (student, assignment)
    assert "NO FEEDBACK" not in graded["feedback"].stdout


def test_big_files_and_outputs_stay_out_of_feedback(graded):
    root = graded["root"]
    twin = _twin(_checks(root))
    folder = root / "feedback" / twin / A2
    # The kernel wrote big.bin in its working folder, a scratch thrown away with its sandbox:
    # nothing a kernel writes reaches autograded/ or feedback/ at all.
    assert not (folder / "big.bin").exists() and not (folder / f"big.bin{feedback_files.NOTE_SUFFIX}").exists()
    assert not (root / "autograded" / twin / A2 / "big.bin").exists()
    assert (folder / f"{A2}.html").stat().st_size < 2 * 2**20
    assert "is left out of this feedback page" in feedback_text(root, twin, A2)


def test_a_timeout_names_the_cell_and_how_long(graded):
    root = graded["root"]
    assert _checks(root)[("sleepy", A2)] == _max(A2)
    notebook = autograded_notebook(root, "sleepy", A2)
    messages = [o.evalue for c in notebook.cells for o in c.get("outputs", []) if o.output_type == "error"]
    timeout = next(m for m in messages if "was stopped after" in m)
    assert "(import time) was stopped after" in timeout, messages  # the cell, by its first line
    assert f"the limit is {TIMEOUT} s per cell" in timeout, messages


def test_a_skip_tag_on_a_test_cell_does_not_skip_it(graded):
    # a blank notebook whose test cell carries nbclient's and the course's skip tags: still run, 0 points
    assert _checks(graded["root"])[("tagger", A2)] == 0


def test_grades_csv_says_what_each_row_is(graded):
    with open(graded["root"] / "reports" / "grades.csv", encoding="utf-8") as handle:
        rows = {(row["student_id"], row["assignment"]): row["status"] for row in csv.DictReader(handle)}
    assert rows[("李雷", A2)] == "graded"
    assert rows[("李雷", A1)] == "not submitted"
    assert rows[(TWIN, A2)] == "graded"
