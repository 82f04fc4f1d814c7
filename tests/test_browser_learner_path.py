"""A new learner's first Run All, in real Chromium, on JupyterLab started as `make lab` starts it.

On fresh workspace notebooks 01 (the first), 04 (widgets and demos), 07 (the decode kernel) and
10 (notebooks loaded from 02, 04 and 05, a model demo): Run All reaches the last cell, no cell
raises or writes to stderr, and every check cell says "not implemented yet". Every notebook's
Run All, in one kernel without a browser, is tests/test_learner_path.py's; this test is the
browser and fresh kernels for a representative few.
Every notebook the server serves is free of solution and hidden-test text and of rubrics.
Screenshots (the first and last screen of each notebook) and timing.json go to
.artifacts/browser_learner_path/.
"""

from __future__ import annotations

import json
import time

import pytest
from paged_grading.administration import release_check

from browser_support import CHROMIUM, LAB_SETTINGS, chromium_page, error_outputs, run_all_cells
from conftest import NOTEBOOKS, ROOT
from lab_support import get, make_server

pytestmark = pytest.mark.browser

RUN = ["01_block_tables", "04_fork_and_copy_on_write", "07_paged_decode_kernel", "10_radix_cache"]
ARTIFACTS = ROOT / ".artifacts" / "browser_learner_path"

# Every code cell of the open notebook: executed or not, graded or not, its outputs' text.
CELLS_JS = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
    const found = [];
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code') continue;
        const text = cell.outputs.toJSON().map(o =>
            o.text ?? (o.data && o.data['text/plain']) ?? ((o.ename ?? '') + ': ' + (o.evalue ?? ''))
        ).map(t => Array.isArray(t) ? t.join('') : String(t)).join('');
        found.push({
            index: i,
            executed: cell.executionCount !== null,
            graded: Boolean((cell.getMetadata('nbgrader') || {}).grade),
            errors: cell.outputs.toJSON().filter(o => o.output_type === 'error').length,
            text: text,
        });
    }
    return found;
}"""


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium)")
def test_run_all_on_a_fresh_workspace_reaches_the_end(tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    started, timings, seen = time.monotonic(), {}, {}
    workspace = tmp_path / "workspace"
    with (
        make_server(
            "lab",
            tmp_path,
            f"WORKSPACE={workspace}",
            lab_args="--LabApp.expose_app_in_browser=True",
            settings=LAB_SETTINGS,
        ) as (base, token),
        chromium_page() as page,
    ):
        timings["lab_started"] = round(time.monotonic() - started, 1)
        served = json.loads(get(f"{base}/api/contents?token={token}")[1])["content"]
        for item in served:
            if item["name"].endswith(".ipynb"):
                assert_no_instructor_text(base, token, item["name"])
        for number, name in enumerate(RUN):
            # a Lab workspace of its own per notebook: only this notebook opens (no restored tabs)
            page.goto(f"{base}/lab/workspaces/run{number}/tree/{name}.ipynb?token={token}&reset")
            page.wait_for_function(
                f"() => window.jupyterapp?.shell?.currentWidget?.context?.path === '{name}.ipynb'", timeout=120_000
            )
            ran = run_all_cells(page)
            timings[name] = round(time.monotonic() - started, 1)
            page.screenshot(path=ARTIFACTS / f"{name}_end.png")
            cells = page.evaluate(CELLS_JS)
            seen[name] = cells
            assert ran, f"{name}: Run All stopped: {[c for c in cells if c['errors']]}"
            assert cells[-1]["executed"], f"{name}: the last cell did not run"
            skipped = [c["index"] for c in cells if not c["executed"]]
            assert not skipped, f"{name}: cells not run: {skipped}"
            assert error_outputs(page) == [], f"{name}: an error or stderr output: {error_outputs(page)}"
            checks = [c for c in cells if c["graded"]]
            assert checks and all("not implemented yet" in c["text"] for c in checks), checks
            page.evaluate("() => window.jupyterapp.shell.currentWidget.content.scrollToItem(0)")
            page.screenshot(path=ARTIFACTS / f"{name}_top.png")
            page.evaluate("async () => await window.jupyterapp.commands.execute('docmanager:save')")
            page.evaluate("async () => await window.jupyterapp.serviceManager.sessions.shutdownAll()")
    timings["total"] = round(time.monotonic() - started, 1)
    (ARTIFACTS / "timing.json").write_text(json.dumps(timings, indent=2))
    (ARTIFACTS / "cells.json").write_text(json.dumps(seen, indent=1))


def assert_no_instructor_text(base: str, token: str, name: str) -> None:
    """No solution or hidden-test line, marker or rubric in a served notebook."""
    status, body = get(f"{base}/api/contents/{name}?token={token}&content=1")
    assert status == 200
    lines = {
        line.strip()
        for cell in json.loads(body)["content"]["cells"]
        for line in (cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])).splitlines()
    }
    text = "\n".join(lines)
    for marker in ("### BEGIN", "### END", "Rubric", "rubric"):
        assert marker not in text, f"{name} serves {marker!r}"
    instructor = NOTEBOOKS / name
    if instructor.exists():
        leaked = release_check.secret_lines(instructor) & lines
        assert not leaked, f"{name} serves solution lines: {sorted(leaked)[:3]}"
