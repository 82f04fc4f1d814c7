"""The README's main-job command (`make lab`) brings JupyterLab up on the notebooks folder."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import NOTEBOOKS, ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_make_lab_serves_the_notebooks(tmp_path):
    port, token = free_port(), secrets.token_hex(8)
    env = {
        **os.environ,
        **{
            name: str(tmp_path / name.lower())
            for name in (
                "JUPYTER_CONFIG_DIR",
                "JUPYTER_RUNTIME_DIR",
                "JUPYTERLAB_SETTINGS_DIR",
                "JUPYTERLAB_WORKSPACES_DIR",
            )
        },
    }
    args = f"--no-browser --allow-root --ip=127.0.0.1 --port={port} --ServerApp.token={token}"
    server = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline, listing = time.monotonic() + 60, None
        while time.monotonic() < deadline and listing is None:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/contents?token={token}", timeout=2
                ) as reply:
                    listing = json.load(reply)
            except OSError:
                assert server.poll() is None, "make lab exited before JupyterLab answered"
                time.sleep(0.5)
        assert listing is not None, "JupyterLab did not answer within 60 s"
        names = {item["name"] for item in listing["content"]}
        course = {path.name for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")}
        assert course and course <= names, f"JupyterLab serves {sorted(names)}, not the course's notebooks"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab?token={token}", timeout=5) as page:
            assert page.status == 200 and b"JupyterLab" in page.read()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
