"""What CI enforces about the repository itself."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest
from nbgrader.nbgraderformat import read as read_nbgrader

from conftest import NOTEBOOKS, ROOT

NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    notebook = json.loads(path.read_text())
    dirty = [
        i
        for i, c in enumerate(notebook["cells"])
        if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))
    ]
    assert not dirty, f"{path.name}: code cells {dirty} carry outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=lambda p: p.stem)
def test_notebook_has_valid_nbgrader_metadata(path):
    with path.open() as handle:
        notebook = read_nbgrader(handle, as_version=nbformat.NO_CONVERT)
    ids = [
        c.metadata["nbgrader"]["grade_id"]
        for c in notebook.cells
        if "nbgrader" in c.metadata and "grade_id" in c.metadata["nbgrader"]
    ]
    assert len(ids) == len(set(ids)), f"{path.name}: duplicate grade_ids"


def test_ruff_passes():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "paged_helpers", "tests", "run.py", "autograde", "website", "tools"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_check_has_its_notebook_and_every_notebook_a_check():
    """Tests parametrised over notebooks/ would silently shrink if a notebook went missing."""
    from paged_helpers.checks import REGISTRY

    named = {info.notebook for info in REGISTRY.values()}
    assert {path.stem for path in NOTEBOOK_PATHS} == named
