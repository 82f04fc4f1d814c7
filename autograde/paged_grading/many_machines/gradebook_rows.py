"""One student's autograde, as rows: read from a worker's gradebook, written into the coordinator's.

nbgrader's autograde writes, for each graded notebook: the student, the submission (its time
stamp), and per cell the ``auto_score`` and ``needs_manual_grade`` of a grade and the
``auto_comment`` of a solution cell (``SaveAutoGrades``), and the notebook's late penalty
(``AssignLatePenalties``). A worker grades in a gradebook of its own (made from the same released
course, holding this one student only) and ``export`` reads exactly those fields back; the
coordinator's ``apply`` writes them through nbgrader's own Gradebook API, as autograde would have,
so every later step (feedback, ``nbgrader export``, formgrader, ``course.py report``) reads a
gradebook it cannot tell from one ``course.py grade`` wrote. A manual score an instructor already
gave is kept, and the cell is marked for review again, as nbgrader's ``SaveAutoGrades`` does.
"""

from __future__ import annotations

import datetime
from pathlib import Path


def export(db_url: str, student: str, assignments: list[str]) -> list[dict]:
    """The autograde rows of ``student`` for ``assignments`` (those nbgrader graded) in a worker's gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    with Gradebook(db_url) as gradebook:
        for assignment in assignments:
            try:
                submission = gradebook.find_submission(assignment, student)
            except MissingEntry:
                continue
            notebooks = []
            for notebook in submission.notebooks:
                notebooks.append(
                    {
                        "name": notebook.name,
                        "late_submission_penalty": notebook.late_submission_penalty,
                        "grades": {
                            g.name: {"auto_score": g.auto_score, "needs_manual_grade": bool(g.needs_manual_grade)}
                            for g in notebook.grades
                        },
                        "comments": {c.name: {"auto_comment": c.auto_comment} for c in notebook.comments},
                    }
                )
            timestamp = submission.timestamp.isoformat() if submission.timestamp else None
            rows.append({"assignment": assignment, "timestamp": timestamp, "notebooks": notebooks})
    return rows


def apply(db_url: str, course_id: str, student: str, rows: list[dict]) -> None:
    """Write the rows into the coordinator's gradebook, as nbgrader's autograde would have."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url, course_id) as gradebook:
        gradebook.update_or_create_student(student)
        for row in rows:
            if row["timestamp"]:
                timestamp = datetime.datetime.fromisoformat(row["timestamp"])
                gradebook.update_or_create_submission(row["assignment"], student, timestamp=timestamp)
            else:
                gradebook.update_or_create_submission(row["assignment"], student)
            for given in row["notebooks"]:
                notebook = gradebook.find_submission_notebook(given["name"], row["assignment"], student)
                notebook.late_submission_penalty = given["late_submission_penalty"]
                for grade in notebook.grades:
                    if grade.name in given["grades"]:
                        values = given["grades"][grade.name]
                        grade.auto_score = values["auto_score"]
                        grade.needs_manual_grade = values["needs_manual_grade"] or grade.manual_score is not None
                for comment in notebook.comments:
                    if comment.name in given["comments"]:
                        comment.auto_comment = given["comments"][comment.name]["auto_comment"]
            gradebook.db.commit()


def record_not_graded(db_url: str, course_id: str, student: str, assignment: str, submitted: Path) -> None:
    """A submission nbgrader could not grade, as ``course.py grade`` leaves it: the student and the
    submission in the gradebook (a new one with no scores; an earlier one's scores kept, as nbgrader
    keeps them), so that ``nbgrader export`` and ``course.py report`` list it, marked NOT GRADED."""
    from nbgrader.api import Gradebook
    from nbgrader.utils import parse_utc

    stamp = submitted / "timestamp.txt"
    text = stamp.read_text().strip() if stamp.is_file() and not stamp.is_symlink() else ""
    with Gradebook(db_url, course_id) as gradebook:
        gradebook.update_or_create_student(student)
        if text:
            gradebook.update_or_create_submission(assignment, student, timestamp=parse_utc(text))
        else:
            gradebook.update_or_create_submission(assignment, student)
