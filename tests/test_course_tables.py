"""README's and CONTRIBUTING's tables of notebooks name every notebook with exactly its graded checks,
and CONTRIBUTING's table of points ("How points are set") gives every notebook exactly its points.

The tables are prose for people; ``REGISTRY`` (each check's ``@check(notebook=...)``) and the
notebooks' nbgrader metadata are the facts. These tests keep them from drifting: a new notebook,
check or point value fails them until the tables say so. The stretch notebook stays within its cap.
"""

from __future__ import annotations

import json
import re

import pytest

from paged_helpers.checks import REGISTRY

from conftest import ROOT

ROW = re.compile(r"^\| `(\d\d_[a-z0-9_]+)(?:\.ipynb)?` \|(.*)\|\s*$")


def table_rows(text: str) -> dict[str, set[str]]:
    """notebook stem -> the check names (backticked, starting check_) in its row."""
    rows = {}
    for line in text.splitlines():
        found = ROW.match(line)
        if found:
            rows[found.group(1)] = set(re.findall(r"`(check_[a-z0-9_]+)`", found.group(2)))
    return rows


def registered() -> dict[str, set[str]]:
    """notebook stem -> its graded checks (optional exercises are the notebook's own business)."""
    by_notebook: dict[str, set[str]] = {}
    for name, info in REGISTRY.items():
        by_notebook.setdefault(info.notebook, set())
        if info.graded:
            by_notebook[info.notebook].add(name)
    return by_notebook


@pytest.mark.parametrize("document", ["README.md", "CONTRIBUTING.md"])
def test_table_of_notebooks_matches_the_registry(document):
    assert table_rows((ROOT / document).read_text()) == registered()


# CONTRIBUTING's "How points are set": a row per notebook (code, written, total) and the course's total.
POINTS_ROW = re.compile(r"^\| (\d\d|all)(?: \(stretch\))? \|.*\| (\d+) \| (\d+) \| (\d+) \|\s*$")
STRETCH = "11"
STRETCH_SHARE = 0.08


def notebook_points() -> dict[str, tuple[float, float]]:
    """notebook number -> (code, written) points, from the instructor notebooks' nbgrader metadata."""
    points = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        code = written = 0.0
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if meta.get("grade"):
                if cell["cell_type"] == "markdown":
                    written += meta["points"]
                else:
                    code += meta["points"]
        points[path.stem[:2]] = (code, written)
    return points


def test_the_points_rule_table_matches_the_notebooks():
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("## How points are set", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        found = POINTS_ROW.match(line)
        if found:
            rows[found.group(1)] = tuple(float(found.group(n)) for n in (2, 3, 4))
    points = notebook_points()
    expected = {number: (code, written, code + written) for number, (code, written) in points.items()}
    code, written = (sum(pair[0] for pair in points.values()), sum(pair[1] for pair in points.values()))
    expected["all"] = (code, written, code + written)
    assert rows == expected, "update the table in CONTRIBUTING.md's 'How points are set'"


def test_the_stretch_notebook_stays_within_its_cap():
    points = {number: sum(pair) for number, pair in notebook_points().items()}
    assert points[STRETCH] <= STRETCH_SHARE * sum(points.values()), points


def test_every_graded_cell_scores_at_least_one_point():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if meta.get("grade"):
                assert meta["points"] >= 1, (path.name, meta["grade_id"])
