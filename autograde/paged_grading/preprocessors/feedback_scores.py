"""AwaitingGrading (feedback): a written answer nobody has marked yet reads "awaiting grading", not 0.

nbgrader's feedback page shows every manually graded cell's score as it stands in the gradebook:
right after autograding, a written answer has no manual score and reads "Score: 0.0 / 2.0", so a
notebook whose code is perfect reads 4 / 8. This preprocessor runs right after nbgrader's
GetGrades. For every grade cell the gradebook says still ``needs_manual_grade`` with no manual
score, it marks the cell ``awaiting_grade`` (in the feedback copy's metadata only), takes its
points out of the page's total (``max_score``) and records them as ``awaiting_points``. The
course's feedback template (``autograde/templates/paged_feedback``) then writes "awaiting
grading" where nbgrader's template writes that cell's score, and says under the total how many
points are still to be marked. An answer left as released is scored 0 by nbgrader (nothing to
mark) and keeps its 0; a marked answer shows its mark. The gradebook is only read.
"""

from __future__ import annotations

from pathlib import Path

import nbgrader
from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor

AWAITING = "awaiting_grade"
TEMPLATE_NAME = "paged_feedback"
# Not index.html.j2: the page extends nbgrader's feedback/index.html.j2 by that name.
TEMPLATE_FILE = "paged_feedback.html.j2"
COURSE_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
# nbgrader's own templates (its feedback template, which the course's extends); nbgrader adds this
# folder itself only when the configuration names no template folders.
NBGRADER_TEMPLATES = Path(nbgrader.__file__).resolve().parent / "server_extensions" / "formgrader" / "templates"


def template_folders() -> list[str]:
    """HTMLExporter.extra_template_basedirs for the course's feedback template."""
    return [str(COURSE_TEMPLATES), str(NBGRADER_TEMPLATES)]


class AwaitingGrading(NbGraderPreprocessor):
    """Mark the cells still waiting for a manual grade; leave them out of the page's total."""

    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        awaiting = 0.0
        with Gradebook(ids["db_url"]) as gradebook:
            for cell in nb.cells:
                if not (utils.is_grade(cell) or utils.is_task(cell)):
                    continue
                grade = gradebook.find_grade(
                    cell.metadata["nbgrader"]["grade_id"], ids["notebook"], ids["assignment"], ids["student"]
                )
                if grade.needs_manual_grade and grade.manual_score is None:
                    cell.metadata["nbgrader"][AWAITING] = True
                    awaiting += float(grade.max_score or 0)
        resources["nbgrader"]["awaiting_points"] = awaiting
        if awaiting:
            resources["nbgrader"]["max_score"] = float(resources["nbgrader"]["max_score"]) - awaiting
        return nb, resources
