"""RestoreCellRoles: a submission's nbgrader metadata is the student's to break, not to use.

nbgrader's OverwriteCells restores the source, type, lock and points of known cells, but
trusts the rest of a cell's metadata. A student who adds a cell claiming to be a 100-point
test cell makes nbgrader 0.9.6 crash on that submission (KeyError 'grade_id' when missing
cells are re-added); one who flips ``grade`` or ``solution`` on a test cell changes how it
is scored. This preprocessor runs first in the sanitize step and, for every cell:

* metadata naming a cell that the gradebook does not know (or naming none): removed, so
  the cell is an ordinary cell, executed and never scored;
* a known cell: ``grade``, ``solution``, ``locked`` and ``points`` set from the gradebook.

Cells that were deleted are put back afterwards by OverwriteCells (``add_missing_cells``).
"""

from __future__ import annotations

from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor


class RestoreCellRoles(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        with Gradebook(ids["db_url"]) as gradebook:
            source_notebook = gradebook.find_notebook(ids["notebook"], ids["assignment"])
            known = {cell.name: cell for cell in source_notebook.source_cells}
            grades = {cell.name: cell for cell in source_notebook.grade_cells}
            solutions = {cell.name for cell in source_notebook.solution_cells}
            seen: set[str] = set()
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader")
                if meta is None:
                    continue
                grade_id = meta.get("grade_id")
                if grade_id not in known or grade_id in seen:
                    if meta.get("grade") or meta.get("solution") or meta.get("locked") or grade_id:
                        self.log.warning("Ignoring nbgrader metadata of an unknown cell: %r", grade_id)
                    del cell.metadata["nbgrader"]
                    continue
                seen.add(grade_id)
                meta["grade"] = grade_id in grades
                meta["solution"] = grade_id in solutions
                meta["locked"] = bool(known[grade_id].locked)
                if grade_id in grades:
                    meta["points"] = float(grades[grade_id].max_score)
                else:
                    meta.pop("points", None)
        return nb, resources

