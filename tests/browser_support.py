"""JupyterLab in a real (headless) browser, for the browser tests.

``jupyter_lab(folder)`` serves ``folder`` on 127.0.0.1 with a random port and token and with
every JUPYTER_* directory inside a temporary folder, so a test sees neither the user's settings
nor leaves anything behind. ``chromium_page()`` drives Debian's Chromium (/usr/bin/chromium)
through Playwright; nothing is ever downloaded (never ``playwright install``).
Recipe and timings: ../shared/FIELD_NOTES.md ("JupyterLab in a real browser").
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Lab settings that keep the page still: no news toast, every cell rendered (no windowing).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


@dataclass(frozen=True)
class Lab:
    url: str
    token: str

    def tree(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def jupyter_lab(
    folder: Path,
    state: Path,
    log: Path,
    timeout: float = 60,
    extra_env: dict[str, str] | None = None,
    lab_settings: dict[str, dict] | None = None,
) -> Iterator[Lab]:
    """JupyterLab serving ``folder``; its config, runtime and settings live under ``state``.

    ``extra_env`` is added to the server's environment (for example JUPYTER_CONFIG_PATH, as
    ``make demo`` sets it). ``lab_settings``: the Lab settings files written first (default
    LAB_SETTINGS; ``{}`` for none, as a learner's Lab starts).

    The server's output goes to ``log`` (never to the test's stderr). It is stopped, with its
    kernels, by its own process group when the block ends.
    """
    port, token = free_port(), secrets.token_hex(12)
    dirs = {
        name: state / name.lower()
        for name in (
            "JUPYTER_CONFIG_DIR",
            "JUPYTER_DATA_DIR",
            "JUPYTER_RUNTIME_DIR",
            "JUPYTERLAB_SETTINGS_DIR",
            "JUPYTERLAB_WORKSPACES_DIR",
        )
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    for name, settings in (LAB_SETTINGS if lab_settings is None else lab_settings).items():
        target = dirs["JUPYTERLAB_SETTINGS_DIR"] / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(settings))
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        **{k: str(v) for k, v in dirs.items()},
        "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
        **(extra_env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={folder}",
        "--LabApp.expose_app_in_browser=True",
    ]
    with open(log, "wb") as output:
        server = subprocess.Popen(
            command, cwd=folder, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    lab = Lab(f"http://127.0.0.1:{port}", token)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{lab.url}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(f"JupyterLab exited early; see {log}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"JupyterLab did not answer within {timeout} s; see {log}") from None
                time.sleep(0.3)
        yield lab
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 1000) -> Iterator[object]:
    """A Playwright page in Debian's headless Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            yield browser.new_page(viewport={"width": width, "height": height})
        finally:
            browser.close()


def run_all_cells(page, timeout_ms: float = 180_000) -> bool:
    """Wait until the notebook's kernel is connected and idle, then run every cell.

    Returns Lab's own verdict: False when a cell raised (Lab stops the run there). The page's
    execution indicator reads "idle" before a kernel exists, so readiness is asked of the
    session itself (needs ``--LabApp.expose_app_in_browser``).
    """
    page.wait_for_function(
        """() => {
            const context = window.jupyterapp?.shell?.currentWidget?.sessionContext;
            const kernel = context?.session?.kernel;
            const connected = kernel?.connectionStatus === 'connected';
            return Boolean(context?.isReady && kernel?.status === 'idle' && connected);
        }""",
        timeout=timeout_ms,
        polling=250,
    )
    page.set_default_timeout(timeout_ms)
    return page.evaluate("async () => await window.jupyterapp.commands.execute('notebook:run-all-cells')")


def error_outputs(page) -> list[str]:
    """The text of every error output in the notebook (a traceback's first lines)."""
    return page.eval_on_selector_all(
        "[data-mime-type='application/vnd.jupyter.stderr']",
        "nodes => nodes.map(n => n.innerText.slice(0, 600))",
    )


def solution_snippets(notebook: Path, shortest: int = 12) -> list[str]:
    """Lines of ``notebook``'s solution and hidden-test regions, long enough to be telling:
    none of them may appear on a page that an audience or a learner sees."""
    import nbformat

    snippets = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        inside = False
        for line in cell.source.splitlines():
            marker = line.strip()
            if marker in ("### BEGIN SOLUTION", "### BEGIN HIDDEN TESTS"):
                inside = True
            elif marker in ("### END SOLUTION", "### END HIDDEN TESTS"):
                inside = False
            elif inside and len(marker) >= shortest and not marker.startswith("#"):
                snippets.append(marker)
    return snippets
