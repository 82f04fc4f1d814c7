"""JupyterLab started exactly as the README's make targets start it, for the tests.

``make_server("lab", state, "WORKSPACE=...")`` runs ``make lab`` with every JUPYTER_* folder
under ``state`` (the user's settings are never read or touched) and yields the server's base URL
and token once it answers; the server and its kernels are stopped by process group afterwards.
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

from conftest import ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def make_server(
    target: str,
    state: Path,
    *make_vars: str,
    lab_args: str = "",
    settings: dict | None = None,
    timeout: float = 300,
    allow_root: bool = True,
) -> Iterator[tuple[str, str]]:
    """Run ``make TARGET`` as a user would; yield (base URL, token) once it answers.

    ``settings``: JupyterLab settings files to write first, {"@jupyterlab/x/y.jupyterlab-settings": {...}}.
    ``allow_root``: pass ``--allow-root`` ourselves (False: as a learner types it, the Makefile decides).
    """
    port, token = free_port(), secrets.token_hex(8)
    for name, values in (settings or {}).items():
        target_file = state / "jupyterlab_settings_dir" / name
        target_file.parent.mkdir(parents=True, exist_ok=True)
        target_file.write_text(json.dumps(values))
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
    root = "--allow-root " if allow_root else ""
    args = f"--no-browser {root}--ip=127.0.0.1 --port={port} --ServerApp.token={token} {lab_args}"
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
