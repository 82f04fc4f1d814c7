"""Publishing an assignment's solution once its deadline has passed.

Later notebooks build on earlier ones (notebook 04 subclasses the learner's notebook-03 cache).
So that a learner stuck in 03 can still do, and be graded on, 04, ``load_from_notebook`` falls
back to the course's implementation of an earlier notebook, but only to a *published* one:
``course.py publish 03_paged_kv_cache`` writes the solution to ``<course root>/published/``
(git-ignored), from where the learner's workspace (``published/`` at the repository root) and
autograde (``published/`` in the course root) can load it. Nothing else is ever a fallback: not
``notebooks/``, not ``source/``. The published notebook keeps the solution code and drops the
hidden tests, the nbgrader markers, the prose (rubrics included) and every output.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests

WHAT_PUBLISHING_MEANS = (
    "From now on, load_from_notebook in later notebooks uses a published solution wherever a learner's own "
    "definition is missing or unfinished, and prints that it did. Whoever can read that folder can read the "
    "solution: publish an assignment only after its deadline."
)

_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def solution_notebook(instructor_notebook: Path) -> nbformat.NotebookNode:
    """The code cells of the instructor notebook, solutions in place; no hidden tests, markers,
    outputs, prose or rubrics (later notebooks load definitions only)."""
    notebook = nbformat.read(instructor_notebook, as_version=4)
    notebook, _ = ClearHiddenTests().preprocess(notebook, {})
    cells = [
        nbformat.v4.new_markdown_cell(
            f"The course's solution of `{instructor_notebook.stem}`, published after its deadline "
            "(`course.py publish`). Later notebooks load it where a learner's own code is unfinished."
        )
    ]
    for cell in notebook.cells:
        if cell.cell_type == "code":
            source = "\n".join(line for line in cell.source.splitlines() if line.strip() not in _MARKERS)
            cells.append(nbformat.v4.new_code_cell(source))
    notebook.cells = cells
    return notebook


def publish(instructor_notebook: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    target = into / instructor_notebook.name
    nbformat.write(solution_notebook(instructor_notebook), target)
    return target
