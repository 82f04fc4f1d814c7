"""A widget's static picture shows the last state reached, headless, in a real kernel (nbclient).

A notebook shows a CowDemo and a BlockTableView, then changes both from later cells (as a
button click would, through IPython's update_display). The executed notebook, as Lab would save
it, and its HTML export (nbconvert, no widget state saved) must show the last state: the demo's
copy-on-write step and the cache's later table, not the empty pool of display time. Under nbgrader
(``NBGRADER_EXECUTION``) no widget is made: one picture per display, which follows the state too.
"""

from __future__ import annotations

import os
import re

import nbformat
import pytest
from jupyter_client import KernelManager
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from conftest import NOTEBOOKS

SNAPSHOT = "ph-static-snapshot"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

CELLS = [
    "import paged_helpers as ph\nimport torch\n"
    'PagedKVCache = ph.load_from_notebook("04_fork_and_copy_on_write", "PagedKVCache", use="yours")',
    "demo = ph.widgets.CowDemo(PagedKVCache)\ndisplay(demo)",
    "cache = PagedKVCache(1, 8, 4, 1, 2)\ncache.create('only')\nview = ph.widgets.BlockTableView(cache)\nview",
    # Later cells: what the buttons do, and the cache growing under the view.
    "demo.create()\ndemo.fork()\ndemo.write()",
    "cache.reserve('only', 9)\nview.refresh()",
]


def run(graded: bool) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    env = {k: v for k, v in os.environ.items() if k != "NBGRADER_EXECUTION"}
    if graded:
        env["NBGRADER_EXECUTION"] = "autograde"
    kernel = KernelManager(kernel_name="python3")
    kernel.start_kernel(cwd=str(NOTEBOOKS), env=env)
    try:
        NotebookClient(notebook, km=kernel, timeout=120, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    finally:
        kernel.shutdown_kernel(now=True)
    return notebook


def pictures(cell) -> list[str]:
    shown = [o["data"] for o in cell.outputs if o.get("output_type") == "display_data"]
    return [data["text/html"] for data in shown if "text/html" in data]


def latest_message(html: str) -> str:
    return re.search(r'class="ph-message"[^>]*>([^<]*)<', html).group(1)


@pytest.fixture(scope="module", params=[False, True], ids=["lab", "nbgrader"])
def executed(request):
    return request.param, run(graded=request.param)


def test_the_picture_follows_the_state(executed):
    graded, notebook = executed
    demo_cell, view_cell = notebook.cells[1], notebook.cells[2]
    for cell in (demo_cell, view_cell):
        views = [o for o in cell.outputs if WIDGET_VIEW in o.get("data", {})]
        assert len(views) == (0 if graded else 1), "a live view in Lab, none under nbgrader"
        assert all("text/html" not in o["data"] and "text/plain" not in o["data"] for o in views), "the view alone"
        assert len(pictures(cell)) == 1 and SNAPSHOT in pictures(cell)[0]
    [demo_picture], [view_picture] = pictures(demo_cell), pictures(view_cell)
    assert "copied to block" in latest_message(demo_picture)  # the write after the fork, not "new cache"
    assert "earlier steps (3)" in demo_picture  # create and fork folded under it
    assert "3 blocks" not in view_picture and 'data-free="5"' in view_picture  # 9 tokens: 3 of 8 blocks taken


def test_the_html_export_shows_the_last_state(executed):
    _, notebook = executed
    page, _ = HTMLExporter().from_notebook_node(notebook)
    assert SNAPSHOT in page
    messages = re.findall(r'class="ph-message"[^>]*>([^<]*)<', page)
    assert len(messages) == 1 and "copied to block" in messages[0]
    assert 'data-free="5"' in page
