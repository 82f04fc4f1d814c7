"""The README's commands bring JupyterLab up where they say.

``make lab`` (learners): the student release of every notebook in a workspace folder, no
solution or rubric text in anything served, nbgrader's instructor tools switched off.
``make instructor``: notebooks/ (the source) with the formgrader.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import NOTEBOOKS
from lab_support import get, make_server, page_config

COURSE = {path.name for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
INSTRUCTOR_ONLY = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS", "### END SOLUTION")


@pytest.mark.slow
def test_make_lab_serves_the_learner_workspace_without_instructor_tools(tmp_path):
    workspace = tmp_path / "workspace"
    with make_server("lab", tmp_path, f"WORKSPACE={workspace}") as (base, token):
        status, listing = get(f"{base}/api/contents?token={token}")
        names = {item["name"] for item in json.loads(listing)["content"]}
        assert COURSE and COURSE <= names, f"make lab serves {sorted(names)}, not the course's notebooks"
        for name in sorted(COURSE):
            status, body = get(f"{base}/api/contents/{name}?token={token}&content=1")
            text = json.dumps(json.loads(body)["content"])
            assert status == 200 and not [m for m in INSTRUCTOR_ONLY if m in text], f"{name} shows instructor text"
            assert "raise NotImplementedError()" in text, f"{name} is not the student release"
        config = page_config(base, token)
        disabled = set(config.get("disabledExtensions", []))
        assert {"@jupyter/nbgrader:create-assignment", "@jupyter/nbgrader:menu"} <= disabled, disabled
        assert get(f"{base}/formgrader?token={token}")[0] == 404, "the formgrader answers in the learner's lab"
    assert (workspace / ".generated.json").is_file()


@pytest.mark.slow
def test_make_instructor_serves_the_source_with_nbgrader(tmp_path):
    with make_server("instructor", tmp_path) as (base, token):
        status, body = get(f"{base}/api/contents/02_block_allocator.ipynb?token={token}&content=1")
        assert status == 200 and "### BEGIN SOLUTION" in body.decode()
        disabled = set(page_config(base, token).get("disabledExtensions", []))
        assert "@jupyter/nbgrader:create-assignment" not in disabled


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="runs as root only where the tests run as root (CI, containers)")
def test_make_lab_as_root_starts_without_being_told(tmp_path):
    """Root is what a learner is in a container or on a hosted notebook: JupyterLab refuses it unless
    told (--allow-root); `make lab`, typed as it is, tells it and says so once."""
    with make_server("lab", tmp_path, f"WORKSPACE={tmp_path / 'workspace'}", allow_root=False) as (base, token):
        status, _ = get(f"{base}/api/contents?token={token}")
        assert status == 200
    log = (tmp_path / "lab.log").read_text()
    assert log.count("running as root") == 1, log
