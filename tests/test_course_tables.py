"""README's and CONTRIBUTING's tables of notebooks name every notebook with exactly its graded checks.

The tables are prose for people; ``REGISTRY`` (each check's ``@check(notebook=...)``) is the fact.
This test keeps the two from drifting: a new notebook or check fails it until both tables say so.
"""

from __future__ import annotations

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
