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
import re
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
# smaller than the minimum (form fields included), whether the content scrolls, the font size the
# stage chose, and which points of the stage something else covers (JupyterLab's toolbar, say):
# on a grid over the window, the element on top must belong to the stage.
LAYOUT = """([selector, contentSelector, minimum]) => {
    const stage = document.querySelector(selector);
    const content = contentSelector ? stage.querySelector(contentSelector) : stage;
    const outside = [], small = [], covered = [];
    for (const el of stage.querySelectorAll('*')) {
        if (el.closest('[hidden]')) continue;
        const box = el.getBoundingClientRect();
        if (box.width === 0 && box.height === 0) continue;
        const name = `${el.tagName}.${el.className} "${el.textContent.trim().slice(0, 30)}"`;
        const corners = [box.left, box.top, box.right, box.bottom].map(Math.round).join(',');
        if (box.left < -0.5 || box.top < -0.5 || box.right > innerWidth + 0.5 || box.bottom > innerHeight + 0.5)
            outside.push(`${name} at ${corners}`);
        const text = [...el.childNodes].some(node => node.nodeType === 3 && node.textContent.trim())
            || ['INPUT', 'SELECT'].includes(el.tagName);
        const size = parseFloat(getComputedStyle(el).fontSize);
        if (text && size < minimum) small.push(`${name}: ${size}px`);
    }
    const frame = stage.getBoundingClientRect();
    for (let x = 4; x < innerWidth; x += Math.floor(innerWidth / 12)) {
        for (let y = 4; y < innerHeight; y += Math.floor(innerHeight / 12)) {
            const hit = document.elementFromPoint(x, y);
            if (!hit || !stage.contains(hit))
                covered.push(`${x},${y}: ${hit ? hit.tagName + '.' + hit.className : 'nothing'}`);
        }
    }
    const box = stage.getBoundingClientRect();
    return {outside, small, covered, font: parseFloat(content.style.fontSize),
            box: [box.left, box.top, box.right, box.bottom].map(Math.round),
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


def check_layout(page, selector: str, where: str, content: str = ".ph-story-content") -> float:
    """Everything of the stage inside the window, on top of the page, in type of MIN_FONT_PX or more."""
    report = page.evaluate(LAYOUT, [selector, content, MIN_FONT_PX])
    width, height = page.viewport_size["width"], page.viewport_size["height"]
    assert report["box"] == [0, 0, width, height], f"{where}: the stage is not the window: {report['box']}"
    assert not report["scrolls"], f"{where}: the frame does not fit the window"
    assert report["outside"] == [], f"{where}: outside the window: {report['outside'][:5]}"
    assert report["covered"] == [], f"{where}: covered by something else: {report['covered'][:5]}"
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


# ----- free play: the CowDemo's one presentation mode, Present ----------------------------------

STAGED = ".ph-cow-demo-widget.ph-staged"
# The free-play demo in the notebook: its height, the notebook's visible area (what scrolls, below
# the notebook's toolbar), and whether its Present button lies inside that area with nothing on top.
IN_NOTEBOOK = """() => {
    const demo = document.querySelector('.ph-cow-demo-widget');
    const area = (demo.closest('.jp-WindowedPanel-outer') || demo.closest('.jp-Notebook')).getBoundingClientRect();
    const present = demo.querySelector('.ph-play-present').getBoundingClientRect();
    const [x, y] = [present.left + present.width / 2, present.top + present.height / 2];
    const hit = document.elementFromPoint(x, y);
    return {height: Math.round(demo.getBoundingClientRect().height), visible: Math.round(area.height),
            present_inside: present.top >= area.top && present.bottom <= area.bottom
                && present.left >= area.left && present.right <= area.right,
            present_on_top: Boolean(hit && hit.closest('.ph-play-present'))};
}"""
# Each control of the staged demo: inside the window and on top at its centre (none clipped or hidden).
CONTROLS = """([selector]) => [...document.querySelector(selector).querySelectorAll(
        'button, input, select')].map(el => {
    const box = el.getBoundingClientRect();
    const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
    const ok = box.height > 0 && box.top >= 0 && box.bottom <= innerHeight && box.right <= innerWidth
        && Boolean(hit) && (hit === el || el.contains(hit) || hit.contains(el) && hit.tagName === 'LABEL');
    return ok ? '' : `${el.tagName}.${el.className} "${el.textContent.trim()}" at ${Math.round(box.top)}`;
}).filter(Boolean)"""
AFTER_TWO_FRAMES = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
# The demo's step log as the page has it: the latest line and the count of earlier ones (a step
# that repeats the line before, a second refusal say, still adds one).
STEP_LOG = """([selector]) => [...document.querySelectorAll(`${selector} :is(.ph-message, .ph-history summary)`)]
    .map(e => e.textContent).join(' | ')"""


def click_and_wait(page, demo, action: str, where: str) -> None:
    """Click the demo's button for ``action`` and wait until its step is on the page."""
    before = page.evaluate(STEP_LOG, [where])
    demo.locator(f".ph-do-{action}").click()
    page.wait_for_function(f"([selector, before]) => ({STEP_LOG})([selector]) !== before", arg=[where, before])


def test_free_play_presented_fits_every_screen_at_every_step(artifacts, tmp_path):
    """Section 4, presented: the default story by hand, then the worst cases the demo allows.

    Present (the demo's one presentation mode) stages the demo; every step is clicked on the
    stage, and after each, at 1024x768, 1280x720 and 1920x1080: the stage is the window, every
    element inside it and on top of the page (nothing of JupyterLab over it), every control
    reachable, no text under MIN_FONT_PX. The worst cases: a prompt of the field's largest size
    (the whole pool), forked up to the demo's bound of sequences, a fork and a create past it, a
    write into a full pool; and the same with two-letter names (after 26 sequences).
    """
    folder = tmp_path / "demo"
    folder.mkdir()
    shutil.copy(DEMO, folder / DEMO.name)
    shots = tmp_path / "screens"
    shots.mkdir()
    fonts: dict[str, dict[str, float]] = {}
    with (
        jupyter_lab(folder, tmp_path / "jupyter", artifacts / "lab_free_play.log", extra_env=MAKE_DEMO_ENV) as lab,
        chromium_page(*SIZES[0]) as page,
    ):
        page.goto(lab.tree(DEMO.name))
        assert run_all_cells(page) and error_outputs(page) == [], error_outputs(page)
        page.set_default_timeout(30_000)
        demo = page.locator(".ph-cow-demo-widget")
        demo.wait_for()
        in_notebook = {}
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            demo.locator(".ph-play-present").scroll_into_view_if_needed()
            page.wait_for_timeout(200)
            in_notebook[f"{width}x{height}"] = shown = page.evaluate(IN_NOTEBOOK)
            assert shown["present_inside"] and shown["present_on_top"], f"{width}x{height}: Present hidden: {shown}"
        page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
        demo.locator(".ph-play-present").click()
        page.wait_for_selector(STAGED)
        assert "Leave" in demo.locator(".ph-play-present").inner_text()
        maximum = int(demo.locator(".ph-prompt-tokens input").get_attribute("max"))

        def step(name: str, action: str, arg: str = "") -> None:
            """One click on the stage, as the instructor makes it; then every screen size."""
            message = demo.locator(".ph-message")
            if action == "select":
                demo.locator(".ph-sequence select").select_option(arg)
                chosen = f"() => document.querySelector('{STAGED} .ph-sequence select').value === '{arg}'"
                page.wait_for_function(chosen)
                return
            if action == "tokens":
                field = demo.locator(".ph-prompt-tokens input")
                field.fill(arg)
                field.press("Tab")
                return
            click_and_wait(page, demo, action, STAGED)
            for width, height in SIZES:
                page.set_viewport_size({"width": width, "height": height})
                page.evaluate(AFTER_TWO_FRAMES)
                where = f"free play {width}x{height} after {name}: {message.inner_text()[:80]}"
                font = check_layout(page, STAGED, where, content="")
                assert page.evaluate(CONTROLS, [STAGED]) == [], f"{where}: a control is clipped or covered"
                fonts.setdefault(f"{width}x{height}", {})[name] = font
                if name.startswith("worst"):
                    page.screenshot(path=shots / f"{name}_{width}x{height}.png")

        # The default story (story.DEFAULT_STORY), by hand.
        step("story create A", "create")
        for child in "BCD":
            step("", "select", "A")
            step(f"story fork {child}", "fork")
        for seq, count in (("D", 1), ("A", 2)):
            step("", "select", seq)
            for index in range(count):
                step(f"story write {seq}{index}", "write")
        for seq in "BC":
            step("", "select", seq)
            step(f"story free {seq}", "free")
        assert "freed C" in demo.locator(".ph-message").inner_text()
        # The worst cases: the largest prompt the field takes (the whole pool), as many sequences as
        # the demo holds, one more refused, and a write the full pool cannot take.
        step("worst reset", "reset")
        step("", "tokens", str(maximum))
        step("worst create", "create")
        forks = 0
        while "at most" not in demo.locator(".ph-message").inner_text():  # until the demo refuses one
            forks += 1
            step(f"worst fork {forks}", "fork")
        bound = len(demo.locator(".ph-sequence option").all_inner_texts())
        step("worst create refused", "create")
        step("worst write into a full pool", "write")
        assert "ran out of blocks" in demo.locator(".ph-message").inner_text()
        # Two-letter names are wider chips: free everything, spend the names up to Z, and again.
        for seq in demo.locator(".ph-sequence option").all_inner_texts():
            step("", "select", seq)
            step(f"free {seq}", "free")
        step("", "tokens", "1")
        page.set_viewport_size({"width": SIZES[0][0], "height": SIZES[0][1]})
        created = ""
        while created != "Z":
            for action in ("create", "free"):
                click_and_wait(page, demo, action, STAGED)
                if action == "create":
                    created = re.match(r"created (\w+) ", demo.locator(".ph-message").inner_text())[1]
        step("", "tokens", str(maximum))
        step("worst long names create", "create")
        for index in range(1, bound):
            step(f"worst long names fork {index}", "fork")
        names = demo.locator(".ph-sequence option").all_inner_texts()
        assert len(names) == bound and all(len(name) == 2 for name in names), names

        page.keyboard.press("Escape")  # back in the notebook, where it was
        page.wait_for_selector(STAGED, state="detached")
        assert "Present" in demo.locator(".ph-play-present").inner_text()
        assert page.locator(".jp-Notebook .ph-cow-demo-widget").count() == 1
        earlier = demo.locator("details.ph-history")  # in the notebook the step log is all there, folded
        assert earlier.count() == 1 and "earlier steps (" in earlier.locator("summary").inner_text()
    for name in shots.iterdir():
        shutil.copy(name, artifacts / name.name)
    summary = {"in_notebook": in_notebook, "staged_font_px": fonts, "sequences_at_most": bound}
    (artifacts / "free_play.json").write_text(json.dumps(summary, indent=2))
    print(
        f"free play: in the notebook {in_notebook}; font px on the stage, smallest by screen: "
        f"{ {size: min(by_step.values()) for size, by_step in fonts.items()} }; screenshots in {shots}"
    )
