"""JupyterLab as a learner gets it (issue 40): no "Jupyter news" notice, and a notebook nobody
changed opens without the unsaved-changes mark, in `make lab` and in `make demo`'s configuration.

Neither test writes the tests' own Lab settings (browser_support.LAB_SETTINGS switches the news
off): they run on the learner's configuration alone, config/learner-lab (`make lab`, Binder's
`start`) and demo/jupyter (`make demo`). The notebook is checked once its kernel is connected and
idle: that is when JupyterLab writes the kernel's language_info into the notebook's metadata, the
write that used to mark the tab dirty (config/settled_notebooks.py).
"""

from __future__ import annotations

import shutil

import pytest

from browser_support import CHROMIUM, chromium_page, jupyter_lab
from conftest import ROOT
from lab_support import make_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]

KERNEL_IDLE = """() => {
    const context = window.jupyterapp?.shell?.currentWidget?.sessionContext;
    const kernel = context?.session?.kernel;
    return Boolean(context?.isReady && kernel?.status === 'idle' && kernel?.connectionStatus === 'connected');
}"""
NEWS = ".Toastify__toast, .jp-Notification-Toast, .jp-toast-message"


def assert_opens_settled(page, url: str, name: str) -> None:
    """Open ``name``; once its kernel is idle and a few seconds have passed: no toast, no dirty mark."""
    page.goto(url)
    page.wait_for_function(
        f"() => window.jupyterapp?.shell?.currentWidget?.context?.path === '{name}'", timeout=120_000
    )
    page.wait_for_function(KERNEL_IDLE, timeout=120_000, polling=250)
    page.wait_for_timeout(4_000)  # the news question comes a moment after the page; so do late writes
    toasts = page.locator(NEWS).all_inner_texts()
    assert not toasts, f"a notice covers the page: {toasts}"
    assert page.locator(".jp-mod-dirty").count() == 0, f"{name}: the tab shows unsaved changes after opening"
    assert not page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty"), name


def test_make_lab_opens_a_notebook_without_news_or_unsaved_changes(tmp_path):
    workspace = tmp_path / "workspace"
    name = "01_block_tables.ipynb"
    with (
        make_server("lab", tmp_path, f"WORKSPACE={workspace}", lab_args="--LabApp.expose_app_in_browser=True") as (
            base,
            token,
        ),
        chromium_page() as page,
    ):
        assert_opens_settled(page, f"{base}/lab/workspaces/settled/tree/{name}?token={token}&reset", name)


def test_make_demo_opens_the_demo_without_news_or_unsaved_changes(tmp_path):
    folder = tmp_path / "demo"
    folder.mkdir()
    shutil.copy(ROOT / "demo" / "copy_on_write.ipynb", folder)
    config = {"JUPYTER_CONFIG_PATH": str(ROOT / "demo" / "jupyter")}  # as `make demo` sets it
    with (
        jupyter_lab(folder, tmp_path / "jupyter", tmp_path / "lab.log", extra_env=config, lab_settings={}) as lab,
        chromium_page() as page,
    ):
        assert_opens_settled(page, lab.tree("copy_on_write.ipynb"), "copy_on_write.ipynb")
