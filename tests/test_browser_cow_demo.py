"""The copy-on-write demo in a real browser: JupyterLab, Debian's Chromium, Playwright.

The test copies notebooks 02, 03 and 04 into a temporary folder (Lab autosaves outputs, so the
source notebooks are never opened), runs all of 04's cells in JupyterLab, then presses the
demo's buttons: create a prompt, fork twice, write a token into the last child. It checks from
the DOM that the widget manager drew the live widget, that after the forks the prompt's blocks
show refcount 3, and that after the write the shared half-full block was copied: a tile marked
as a copy of it appears with refcount 1, while the original drops to 2. It also presents the
demo (Present, its one presentation mode: the stage over the window, the pool compact, then Esc),
switches on the dark theme, and frees a sequence from the keyboard. Screenshots go to
.artifacts/browser_cow_demo/ with timing.json (how long each phase took).
"""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from browser_support import CHROMIUM, chromium_page, error_outputs, jupyter_lab, run_all_cells
from conftest import NOTEBOOKS, ROOT

pytestmark = pytest.mark.browser

NOTEBOOK = "04_fork_and_copy_on_write.ipynb"
NEEDS = ["02_block_allocator.ipynb", "03_paged_kv_cache.ipynb", NOTEBOOK]
ARTIFACTS = ROOT / ".artifacts" / "browser_cow_demo"
DEMO = ".ph-cow-demo-widget"


def tile(page, block: int):
    return page.locator(f"{DEMO} .ph-block[data-block='{block}']")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium)")
def test_fork_then_write_shows_the_copy_in_jupyterlab(tmp_path):
    started = time.monotonic()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    folder = tmp_path / "course"
    folder.mkdir()
    for name in NEEDS:
        shutil.copy(NOTEBOOKS / name, folder / name)
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)

    with (
        jupyter_lab(folder, tmp_path / "jupyter", ARTIFACTS / "jupyterlab.log") as lab,
        chromium_page() as page,
    ):
        lap("lab_started")
        try:
            drive_the_demo(page, lab, lap)
        except BaseException:
            page.screenshot(path=ARTIFACTS / "failure.png", full_page=True)
            raise

    lap("total")
    (ARTIFACTS / "timing.json").write_text(json.dumps(timings, indent=2))
    print(f"browser cow demo timings (s since start): {timings}")


def drive_the_demo(page, lab, lap) -> None:
    """Open the notebook, run it, press the demo's buttons and check the DOM after each step."""
    page.goto(lab.tree(NOTEBOOK))
    ran = run_all_cells(page)
    lap("notebook_ran")
    page.set_default_timeout(30_000)
    page.screenshot(path=ARTIFACTS / "after_run_all.png")
    assert ran and error_outputs(page) == [], f"a cell failed or wrote to stderr: {error_outputs(page)}"

    demo = page.locator(DEMO)
    demo.wait_for(timeout=30_000)  # the JupyterLab widget manager drew the live widget
    demo.scroll_into_view_if_needed()
    message = demo.locator(".ph-message")
    # The notebook's own cell drove the demo (create, fork, write): B's copy is on show. Reset.
    assert "copied to block" in message.inner_text() and "B's token" in message.inner_text()
    demo.locator(".ph-do-reset").click()
    wait_for_message(page, "new cache")  # "new cache: 16 blocks of 4 slots, all free. Create a prompt to begin."

    demo.locator(".ph-do-create").click()
    wait_for_message(page, "created A")
    created = message.inner_text()
    blocks = [int(b) for b in re.findall(r"\d+", created.split(":", 1)[1].split("(")[0])]
    assert len(blocks) == 2, created  # 6 tokens in blocks of 4: one full block, one half full

    for child in "BC":
        demo.locator(".ph-do-fork").click()
        wait_for_message(page, f"forked {child}")
    for block in blocks:
        expect_tile(tile(page, block), refs=3, shared=True)
    demo.screenshot(path=ARTIFACTS / "after_fork.png")
    lap("forked")

    demo.locator(".ph-do-write").click()
    wait_for_message(page, "block ")  # "block 1 was shared by 3 tables: copied to ..."
    said = message.inner_text()
    found = re.fullmatch(
        r'block (\d+) was shared by 3 tables: copied to block (\d+) before writing C\'s token 6 \("\w+"\)', said
    )
    assert found, said
    source, target = int(found[1]), int(found[2])
    assert source == blocks[-1], "the half-full last block is the one copy-on-write copies"
    copy = page.locator(f"{DEMO} .ph-block.ph-copy")
    assert copy.count() == 1
    assert copy.get_attribute("data-block") == str(target)
    assert copy.get_attribute("data-copy-of") == str(source)
    assert copy.get_attribute("data-refs") == "1"
    assert f"copy of {source}" in copy.inner_text()
    word = re.search(r'\("(\w+)"\)', said)[1]  # the copy's slot 2 shows the word C wrote (token 6)
    assert copy.locator(".ph-slot[data-slot='2']").inner_text() == word
    expect_tile(tile(page, source), refs=2, shared=True)  # A and B still share it
    expect_tile(tile(page, blocks[0]), refs=3, shared=True)  # the full prompt block stays shared
    entry = page.locator(f"{DEMO} .ph-table[data-seq='C'] .ph-entry.ph-copy")
    assert entry.get_attribute("data-block") == str(target)
    demo.screenshot(path=ARTIFACTS / "after_write.png")
    page.screenshot(path=ARTIFACTS / "after_write_page.png")
    lap("wrote")

    assert demo.locator(".ph-presentation-toggle").count() == 0  # Present is the one presentation mode
    demo.locator(".ph-play-present").click()
    staged = f"{DEMO}.ph-staged"
    page.wait_for_selector(f"{staged} .ph-free-count")  # the kernel drew the projector's picture: compact
    assert int(page.locator(staged).get_attribute("data-font-px")) >= 20
    page.screenshot(path=ARTIFACTS / "presented.png")
    page.keyboard.press("Escape")  # back in the notebook, with the notebook's picture
    page.wait_for_selector(staged, state="detached")
    page.wait_for_selector(f"{DEMO} .ph-free-count", state="detached")
    lap("presented")

    change_theme = "theme => { window.jupyterapp.commands.execute('apputils:change-theme', {theme}); }"
    page.evaluate(change_theme, "JupyterLab Dark")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'")
    demo.scroll_into_view_if_needed()
    demo.screenshot(path=ARTIFACTS / "dark_theme.png")
    lap("dark_theme")

    demo.locator(".ph-do-free").focus()  # keyboard only: Tab-reachable buttons answer Enter
    page.keyboard.press("Enter")
    wait_for_message(page, "freed C")
    assert page.locator(f"{DEMO} .ph-table[data-seq='C']").count() == 0
    lap("keyboard_free")


def wait_for_message(page, start: str) -> None:
    """Until the demo's latest line starts with ``start`` (each step's line starts differently)."""
    page.wait_for_function(
        "([selector, start]) => document.querySelector(selector)?.textContent.startsWith(start)",
        arg=[f"{DEMO} .ph-message", start],
    )


def expect_tile(locator, refs: int, shared: bool) -> None:
    assert locator.count() == 1
    assert locator.get_attribute("data-refs") == str(refs)
    assert ("ph-shared" in locator.get_attribute("class").split()) == shared
    assert f"ref {refs}" in locator.inner_text()
