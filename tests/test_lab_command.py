"""The README's commands bring JupyterLab up where they say.

``make lab`` (learners): the student release of every notebook in a workspace folder, no
solution or rubric text in anything served, nbgrader's instructor tools switched off.
``make instructor``: notebooks/ (the source) with the formgrader.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import NOTEBOOKS, ROOT

COURSE = {path.name for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
INSTRUCTOR_ONLY = ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS", "### END SOLUTION")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def make_server(target: str, state: Path, *make_vars: str, timeout: float = 300) -> Iterator[tuple[str, str]]:
    """Run ``make TARGET`` as a user would; yield (base URL, token) once it answers."""
    port, token = free_port(), secrets.token_hex(8)
    env = {
        **os.environ,
        **{
            name: str(state / name.lower())
            for name in (
                "JUPYTER_CONFIG_DIR",
                "JUPYTER_RUNTIME_DIR",
                "JUPYTERLAB_SETTINGS_DIR",
                "JUPYTERLAB_WORKSPACES_DIR",
            )
        },
    }
    args = f"--no-browser --allow-root --ip=127.0.0.1 --port={port} --ServerApp.token={token}"
    log = (state / f"{target}.log").open("w")
    server = subprocess.Popen(
        ["make", "--no-print-directory", target, f"LAB_ARGS={args}", *make_vars],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, f"make {target} exited: {(state / f'{target}.log').read_text()[-2000:]}"
                assert time.monotonic() < deadline, f"JupyterLab did not answer within {timeout} s"
                time.sleep(0.5)
        yield base, token
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def page_config(base: str, token: str) -> dict:
    status, page = get(f"{base}/lab?token={token}")
    assert status == 200 and b"JupyterLab" in page
    match = re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    return json.loads(match.group(1))


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
