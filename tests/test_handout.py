"""The handout at the top of each notebook is derived from the notebook and the checks' REGISTRY."""

from __future__ import annotations

import json

import pytest

from paged_helpers import handout
from paged_helpers.checks import REGISTRY

from conftest import NOTEBOOKS

PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def test_every_handout_cell_is_current():
    assert handout.main(["--check"], NOTEBOOKS) == 0, "run: python -m paged_helpers.handout"


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_handout_matches_the_notebooks_metadata(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert cells[1]["id"] == handout.CELL_ID and cells[1]["cell_type"] == "markdown"
    text = "".join(cells[1]["source"])
    graded = [cell["metadata"]["nbgrader"] for cell in cells if cell["metadata"].get("nbgrader", {}).get("grade")]
    total = sum(meta["points"] for meta in graded)
    assert f"**Deliverables: {total:g} points**" in text
    for meta in graded:
        row = f"`{meta['grade_id']}`) | {meta['points']:g} |", f"| `{meta['grade_id']}` | {meta['points']:g} |"
        assert any(cell in text for cell in row), meta["grade_id"]
    for name, info in REGISTRY.items():
        assert (f"`{name}`" in text) == (info.notebook == path.stem), name
    assert handout.course_facts(path)["hours"] in text


def test_a_changed_point_value_makes_the_handout_stale(tmp_path):
    source = NOTEBOOKS / "02_block_allocator.ipynb"
    notebook = json.loads(source.read_text(encoding="utf-8"))
    graded = next(cell for cell in notebook["cells"] if cell["metadata"].get("nbgrader", {}).get("points"))
    graded["metadata"]["nbgrader"]["points"] += 1
    (tmp_path / source.name).write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert handout.main(["--check"], tmp_path) == 1
    assert handout.main([], tmp_path) == 0
    assert handout.main(["--check"], tmp_path) == 0


def test_a_notebook_without_its_hours_is_refused_by_name(tmp_path):
    """A notebook brings its own hand-written facts (metadata.course); nothing in the package lists notebooks."""
    notebook = json.loads((NOTEBOOKS / "02_block_allocator.ipynb").read_text(encoding="utf-8"))
    del notebook["metadata"]["course"]
    copy = tmp_path / "12_new_notebook.ipynb"
    copy.write_text(json.dumps(notebook), encoding="utf-8")
    with pytest.raises(ValueError, match="12_new_notebook.ipynb: metadata.course needs 'hours'"):
        handout.course_facts(copy)
