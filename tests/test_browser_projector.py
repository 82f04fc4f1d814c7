"""The lecture demo on a projector, in real Chromium at 1024x768, 1280x720 and 1920x1080.

Two tests. The static export (no kernel): every frame of the default story, walked with
PageDown and PageUp, fits the window with no text under 20 px. The presentation notebook in
JupyterLab (``make demo``'s notebook, a copy, with the course's notebooks as the source): Run
All, Present, walk the default story with the keys a clicker sends; after every step nothing
of the stage lies outside the window, no text is under 20 px, the frame reads like the static
export's frame of the same step, and no solution text is anywhere on the page; then a kernel
restart puts a warning on the story and on the other widgets.

Screenshots (one per size after the story, plus the restart warning) and timing.json go to
.artifacts/browser_projector/.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest

from browser_support import CHROMIUM, chromium_page, error_outputs, jupyter_lab, run_all_cells, solution_snippets
from conftest import NOTEBOOKS, ROOT

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium)"),
]

SIZES = [(1024, 768), (1280, 720), (1920, 1080)]
MIN_FONT_PX = 20
DEMO = ROOT / "demo" / "copy_on_write.ipynb"
ARTIFACTS = ROOT / ".artifacts" / "browser_projector"
MAKE_DEMO_ENV = {"JUPYTER_CONFIG_PATH": str(DEMO.parent / "jupyter")}  # as `make demo` starts Lab

# Every element of the stage that is drawn: which lie outside the window, which hold text
# smaller than the minimum, and the font size the stage chose.
LAYOUT = """([selector, minimum]) => {
    const stage = document.querySelector(selector);
    const outside = [], small = [];
    for (const el of stage.querySelectorAll('*')) {
        if (el.closest('[hidden]')) continue;
        const box = el.getBoundingClientRect();
        if (box.width === 0 && box.height === 0) continue;
        const name = `${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 30)}"`;
        const corners = [box.left, box.top, box.right, box.bottom].map(Math.round).join(',');
        if (box.left < -0.5 || box.top < -0.5 || box.right > innerWidth + 0.5 || box.bottom > innerHeight + 0.5)
            outside.push(`${name} at ${corners}`);
        const text = [...el.childNodes].some(node => node.nodeType === 3 && node.textContent.trim());
        const size = parseFloat(getComputedStyle(el).fontSize);
        if (text && size < minimum) small.push(`${name}: ${size}px`);
    }
    const content = stage.querySelector('.ph-story-content');
    return {outside, small, font: parseFloat(content.style.fontSize),
            scrolls: content.scrollHeight > stage.clientHeight || content.scrollWidth > stage.clientWidth};
}"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The default story on the course's class, exported; and each frame's text, by step."""
    from paged_helpers.widgets import lecture

    story = lecture.load(NOTEBOOKS).story()
    path = story.export_html(tmp_path_factory.mktemp("export") / "cow_story.html")
    return path, story.total


@pytest.fixture(scope="module")
def artifacts():
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    return ARTIFACTS


def check_layout(page, selector: str, where: str) -> float:
    report = page.evaluate(LAYOUT, [selector, MIN_FONT_PX])
    assert not report["scrolls"], f"{where}: the frame does not fit the window"
    assert report["outside"] == [], f"{where}: outside the window: {report['outside'][:5]}"
    assert report["small"] == [], f"{where}: text under {MIN_FONT_PX}px: {report['small'][:5]}"
    return report["font"]


def frame_text(page, selector: str) -> str:
    return page.locator(selector).inner_text()


def test_static_export_fits_every_screen(exported, artifacts):
    path, total = exported
    started = time.monotonic()
    fonts: dict[str, list[float]] = {}
    texts: dict[int, str] = {}
    for width, height in SIZES:
        with chromium_page(width, height) as page:
            page.goto(path.as_uri())
            shown = ".ph-slide:not([hidden]) .ph-story-frame"
            sizes = []
            for step in range(total + 1):
                page.wait_for_selector(f".ph-slide[data-step='{step}']:not([hidden])")
                sizes.append(check_layout(page, ".ph-story-stage", f"export {width}x{height} step {step}"))
                text = frame_text(page, shown)
                assert texts.setdefault(step, text) == text, "the same step reads the same on every screen"
                if step < total:
                    page.keyboard.press("PageDown")
            page.screenshot(path=artifacts / f"export_{width}x{height}_end.png")
            page.keyboard.press("PageUp")  # back one step, as a clicker's back button does
            page.wait_for_selector(f".ph-slide[data-step='{total - 1}']:not([hidden])")
            page.keyboard.press("Home")
            page.wait_for_selector(".ph-slide[data-step='0']:not([hidden])")
            fonts[f"{width}x{height}"] = [min(sizes), max(sizes)]
    (artifacts / "export.json").write_text(json.dumps({"font_px": fonts, "seconds": time.monotonic() - started}))
    print(f"static export: font px (min, max) by screen {fonts}; {time.monotonic() - started:.1f} s")
    assert "write token 6 into D" in texts[4] and "copied to block" in texts[5]


def test_presentation_notebook_in_jupyterlab(exported, artifacts, tmp_path):
    path, total = exported
    started = time.monotonic()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    folder = tmp_path / "demo"
    folder.mkdir()
    shutil.copy(DEMO, folder / DEMO.name)  # Lab saves outputs into what it opens: a copy
    with (
        jupyter_lab(folder, tmp_path / "jupyter", artifacts / "jupyterlab.log", extra_env=MAKE_DEMO_ENV) as lab,
        chromium_page(*SIZES[0]) as page,
    ):
        lap("lab_started")
        try:
            present_the_story(page, lab, path, total, artifacts, lap)
        except BaseException:
            page.screenshot(path=artifacts / "failure.png")
            raise
    lap("total")
    (artifacts / "timing.json").write_text(json.dumps(timings, indent=2))
    print(f"projector demo timings (s since start): {timings}")


def present_the_story(page, lab, exported_path, total, artifacts, lap) -> None:
    page.goto(lab.tree(DEMO.name))
    ran = run_all_cells(page)
    lap("notebook_ran")
    page.set_default_timeout(30_000)
    assert ran and error_outputs(page) == [], f"a cell failed or wrote to stderr: {error_outputs(page)}"
    page_text = page.evaluate("() => document.body.textContent")
    leaked = [s for s in solution_snippets(NOTEBOOKS / "04_fork_and_copy_on_write.ipynb") if s in page_text]
    leaked += [s for s in solution_snippets(NOTEBOOKS / "05_prefix_caching.ipynb") if s in page_text]
    assert leaked == [], f"solution text on the page: {leaked[:3]}"
    assert page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-editor:visible").count() == 0, "code on screen"
    assert "Nbgrader" not in page.locator("#jp-menu-panel, .lm-MenuBar").first.inner_text()  # no instructor menus

    story = page.locator(".ph-story")
    story.wait_for()
    assert page.locator(".ph-kernel-banner:visible").count() == 0  # the kernel is there: no warning
    story.locator(".ph-story-present").click()
    stage = ".ph-story-stage"
    page.wait_for_selector(stage)
    with_export = page.context.browser.new_page()  # the static page, to compare frame by frame
    with_export.goto(exported_path.as_uri())
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        with_export.set_viewport_size({"width": width, "height": height})
        page.keyboard.press("Home")
        for step in range(total + 1):
            frame = f"{stage} .ph-story-frame[data-position='{step}']"
            page.wait_for_selector(frame)
            where = f"live {width}x{height} step {step}"
            check_layout(page, stage, where)
            with_export.evaluate(f"() => {{ location.hash = '#step-{step}'; }}")
            shown = with_export.locator(f".ph-slide[data-step='{step}']:not([hidden]) .ph-story-frame")
            exported = shown.inner_text()
            assert frame_text(page, frame) == exported, f"{where}: differs from the static export"
            if step < total:
                page.keyboard.press("PageDown")
        page.screenshot(path=artifacts / f"live_{width}x{height}_end.png")
        lap(f"story_{width}x{height}")
    page.keyboard.press("PageUp")  # undo the last step
    page.wait_for_selector(f"{stage} .ph-story-frame[data-position='{total - 1}']")
    page.keyboard.press("Escape")
    page.wait_for_selector(stage, state="detached")

    # A restarted kernel: every widget says so instead of going quiet.
    page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    banner = page.locator(".ph-story .ph-kernel-banner")
    banner.wait_for(state="visible", timeout=30_000)
    assert "kernel was restarted" in banner.inner_text()
    watches = page.locator(".ph-kernel-watch .ph-kernel-banner")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.ph-kernel-watch .ph-kernel-banner')].every(b => !b.hidden)"
    )
    assert watches.count() == 3  # block tables, prefix cache, free play
    story.scroll_into_view_if_needed()
    page.screenshot(path=artifacts / "kernel_restarted.png")
    story.locator(".ph-story-next").click()  # still says so, and nothing breaks
    assert banner.is_visible()
    lap("kernel_restart_shown")


# The free-play demo's box: its height and the notebook's visible area (what scrolls) around it;
# on the stage, whether it fits the window, its font size, and any text under the minimum.
FREE_PLAY_BOX = """([minimum]) => {
    const demo = document.querySelector('.ph-cow-demo-widget');
    const area = demo.closest('.jp-WindowedPanel-outer') || demo.closest('.jp-Notebook');
    const small = [];
    for (const el of demo.querySelectorAll('*')) {
        if (!el.checkVisibility()) continue;
        const text = [...el.childNodes].some(node => node.nodeType === 3 && node.textContent.trim());
        if (text && parseFloat(getComputedStyle(el).fontSize) < minimum) small.push(el.textContent.trim().slice(0, 30));
    }
    return {height: Math.round(demo.getBoundingClientRect().height), visible: area ? area.clientHeight : innerHeight,
            scroll: demo.scrollHeight, client: demo.clientHeight, window: innerHeight,
            font: parseFloat(demo.dataset.fontPx || getComputedStyle(demo).fontSize), small,
            earlier: [...demo.querySelectorAll('.ph-earlier')].filter(e => e.checkVisibility()).length};
}"""
FREE_PLAY_SIZES = [(1280, 720), (1024, 768)]


def test_free_play_fits_a_projector_after_forks_and_a_write(artifacts, tmp_path):
    """Section 4 after create, fork x3 and a write: one message line (the rest folded), and Present fits the window."""
    folder = tmp_path / "demo"
    folder.mkdir()
    shutil.copy(DEMO, folder / DEMO.name)
    measured = {}
    with (
        jupyter_lab(folder, tmp_path / "jupyter", artifacts / "lab_free_play.log", extra_env=MAKE_DEMO_ENV) as lab,
        chromium_page(*FREE_PLAY_SIZES[0]) as page,
    ):
        page.goto(lab.tree(DEMO.name))
        assert run_all_cells(page) and error_outputs(page) == [], error_outputs(page)
        page.set_default_timeout(30_000)
        demo = page.locator(".ph-cow-demo-widget")
        demo.wait_for()
        message = demo.locator(".ph-message")
        for button in ["create", "fork", "fork", "fork", "write"]:
            before = message.inner_text()
            demo.locator(f".ph-do-{button}").click()
            page.wait_for_function(
                "([m, b]) => document.querySelector(m).innerText !== b",
                arg=[".ph-cow-demo-widget .ph-message", before],
            )
        assert "copied" in message.inner_text()  # the write landed in a shared block
        # The saved picture beside the live view followed the clicks (a saved or exported notebook
        # shows it), and is hidden while the live view is on the page.
        page.wait_for_function(
            "() => [...document.querySelectorAll('.ph-static-snapshot .ph-cow-demo .ph-message')]"
            ".some(m => m.textContent.includes('copied'))"
        )
        assert page.locator(".ph-static-snapshot").count() >= 3  # block tables, prefix cache, free play
        assert page.locator(".ph-static-snapshot:visible").count() == 0
        for width, height in FREE_PLAY_SIZES:
            page.set_viewport_size({"width": width, "height": height})
            demo.scroll_into_view_if_needed()
            page.wait_for_timeout(300)
            in_notebook = page.evaluate(FREE_PLAY_BOX, [MIN_FONT_PX])
            demo.locator(".ph-play-present").click()
            page.wait_for_selector(".ph-cow-demo-widget.ph-staged")
            page.wait_for_timeout(300)
            staged = page.evaluate(FREE_PLAY_BOX, [MIN_FONT_PX])
            page.screenshot(path=artifacts / f"free_play_{width}x{height}.png")
            page.keyboard.press("Escape")
            page.wait_for_selector(".ph-cow-demo-widget.ph-staged", state="detached")
            measured[f"{width}x{height}"] = {"in_notebook": in_notebook, "presented": staged}
        (artifacts / "free_play.json").write_text(json.dumps(measured, indent=2))
        print(f"free play after fork x3 + write: {json.dumps(measured)}")
        earlier = demo.locator("details.ph-history")
        assert earlier.count() == 1 and "earlier steps (5)" in earlier.locator("summary").inner_text()
        earlier.locator("summary").click()  # unfolded on demand, the history is all there
        assert demo.locator(".ph-history .ph-earlier").count() == 5
    for size, boxes in measured.items():
        assert boxes["in_notebook"]["earlier"] == 0, f"{size}: earlier steps shown unfolded"
        shown = boxes["presented"]
        assert shown["height"] <= shown["window"] and shown["scroll"] <= shown["client"], f"{size}: {shown}"
        assert shown["font"] >= MIN_FONT_PX and shown["small"] == [], f"{size}: {shown}"
