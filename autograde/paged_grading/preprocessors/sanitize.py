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

Two more rules about what a submission may decide:

* ``SKIP_TAG``: the instructor tags demo and benchmark cells that need not run for grading
  (``nbgrader_config.py`` points the executor's ``skip_cells_with_tag`` at it, instead of
  nbclient's default ``skip-execution``, which any student could put on a test cell). The tag
  is removed from every cell the gradebook knows (tests and solutions always run); on a
  student's own cell it only skips that cell, as deleting it would.
* ``MatchLostMetadata`` (before RestoreCellRoles): a notebook in which no cell carries a
  known ``grade_id`` lost its nbgrader metadata (cells pasted into a new notebook). Its cells
  are matched to the release notebook (``release/<assignment>/``): locked cells by their
  text, solution cells by position between them and by the names they define; cells that
  cannot be matched are put back from the release. The notebook is then graded as usual and
  ``reports/recovered_metadata.log`` says so (or says that nothing matched).
"""

from __future__ import annotations

import ast
import copy
import datetime
import difflib
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor

SKIP_TAG = "skip-autograde"
RECOVERED_LOG = Path("reports") / "recovered_metadata.log"  # relative to the course root (nbgrader's cwd)


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
                tags = cell.metadata.get("tags")
                if tags and SKIP_TAG in tags:
                    cell.metadata["tags"] = [tag for tag in tags if tag != SKIP_TAG]
                meta["grade"] = grade_id in grades
                meta["solution"] = grade_id in solutions
                meta["locked"] = bool(known[grade_id].locked)
                if grade_id in grades:
                    meta["points"] = float(grades[grade_id].max_score)
                else:
                    meta.pop("points", None)
        return nb, resources


def _normal(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _defined_names(source: str) -> set[str]:
    """Top-level names a cell defines (classes, functions, assignments); empty if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def match_cells(released: list, submitted: list) -> dict[int, int]:
    """release cell index -> submitted cell index, for the release's nbgrader cells.

    Locked cells (instructions, tests) match a submitted cell with the same text, in order.
    A solution cell matches one of the submitted code cells between the matches of the locked
    cells around it: the one defining a name the release's cell defines, else (only when some
    locked cell matched, so that positions mean something) the only one, else the most similar.
    """
    matched: dict[int, int] = {}
    used: set[int] = set()
    cursor = 0
    for r, cell in enumerate(released):
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("locked") or meta.get("solution"):
            continue
        text = _normal(cell.source)
        for s in range(cursor, len(submitted)):
            if submitted[s].cell_type == cell.cell_type and _normal(submitted[s].source) == text:
                matched[r], cursor = s, s + 1
                used.add(s)
                break
    anchored = bool(matched)
    for r, cell in enumerate(released):
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        low = max((matched[k] for k in matched if k < r), default=-1)
        high = min((matched[k] for k in matched if k > r), default=len(submitted))
        candidates = [
            s for s in range(low + 1, high) if s not in used and submitted[s].cell_type == cell.cell_type
        ]
        if not candidates:
            continue
        names = _defined_names(cell.source)
        by_name = [s for s in candidates if names & _defined_names(submitted[s].source)]
        if by_name:
            choice = by_name[0]
        elif not anchored:
            continue  # nothing else in the notebook looks like the release: position means nothing
        elif len(candidates) == 1:
            choice = candidates[0]
        else:
            choice = max(
                candidates,
                key=lambda s: difflib.SequenceMatcher(None, cell.source, submitted[s].source).ratio(),
            )
        matched[r] = choice
        used.add(choice)
    return matched


class MatchLostMetadata(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        ids = resources["nbgrader"]
        release = Path.cwd() / "release" / ids["assignment"] / f"{ids['notebook']}.ipynb"
        if not release.exists():
            return nb, resources  # nothing to match against; RestoreCellRoles and nbgrader decide
        released = nbformat.read(release, as_version=4).cells
        known = {c.metadata.get("nbgrader", {}).get("grade_id") for c in released} - {None}
        carried = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
        if carried & known:
            return nb, resources
        matched = match_cells(released, nb.cells)
        cells, placed = [], set()
        for r, cell in enumerate(released):
            meta = cell.metadata.get("nbgrader")
            if r in matched:
                # the student's cells up to and including the match keep their order
                for s in range(matched[r] + 1):
                    if s not in placed and s not in matched.values():
                        cells.append(nb.cells[s])
                        placed.add(s)
                mine = nb.cells[matched[r]]
                mine.metadata["nbgrader"] = copy.deepcopy(meta)
                cells.append(mine)
                placed.add(matched[r])
            elif meta and (meta.get("grade") or meta.get("solution") or meta.get("locked")):
                cells.append(copy.deepcopy(cell))  # missing: the release's cell (OverwriteCells restores tests)
        cells += [c for s, c in enumerate(nb.cells) if s not in placed]
        nb.cells = cells
        wanted = sum(1 for c in released if c.metadata.get("nbgrader", {}).get("grade_id"))
        if matched:
            self._log(
                ids,
                f"no nbgrader metadata: {len(matched)} of {wanted} cells matched to the release by text "
                "and position; the rest put back from the release",
            )
        else:
            self._log(
                ids,
                f"UNGRADABLE by matching: no nbgrader metadata and none of the {wanted} release cells "
                "found; graded as not done",
            )
        return nb, resources

    def _log(self, ids: dict, message: str) -> None:
        self.log.warning("%s/%s: %s", ids["student"], ids["assignment"], message)
        RECOVERED_LOG.parent.mkdir(exist_ok=True)
        with open(RECOVERED_LOG, "a", encoding="utf-8") as handle:
            stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            handle.write(f"{stamp} UTC {ids['student']}/{ids['assignment']}: {message}\n")
