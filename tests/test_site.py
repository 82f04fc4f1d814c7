"""The course as a website (`make site`, website/build.py), built once and read in Debian's Chromium.

The module builds the site into a temporary folder (the learner's release by nbgrader, Run All on
every notebook, Sphinx; about a minute on two cores), or reads one already built when PH_SITE_DIR
names the folder holding its html/ and work/ (`PH_SITE_DIR=.site` after `make site`). Then:

- every page renders offline (no request leaves the site, no script error), every figure shows
  (each image loaded, natural width > 0; as many as the notebook's Run All drew, and at least one
  for every helper-package plot call outside a "Try it" cell), and every notebook page says how to
  run it and links to Start here;
- the copy-on-write story steps forward when clicked, inside its page and on its own;
- no file of the site holds a solution, hidden-test or rubric line of the instructor notebooks
  (release_check's secret lines and fragments, website/leak_scan.py), and the release passes
  release_check.find_leaks; the search itself is shown to find such a line put into a page.

Screenshots of every page go to .artifacts/site/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from browser_support import CHROMIUM, chromium_page
from conftest import NOTEBOOKS, ROOT

sys.path.insert(0, str(ROOT / "website"))
import leak_scan  # noqa: E402  (website/ is a folder of scripts, not a package)

pytestmark = [pytest.mark.slow, pytest.mark.nbgrader]
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (apt-get install chromium)"
)

ARTIFACTS = ROOT / ".artifacts" / "site"
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
PAGES = ["index", "start-here", *NAMES, "copy-on-write"]
IMAGE_TYPES = ("image/png", "image/svg+xml", "image/jpeg")


@dataclass(frozen=True)
class Site:
    html: Path
    work: Path

    def released(self) -> list[Path]:
        return [self.work / "release" / f"{name}.ipynb" for name in NAMES]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    given = os.environ.get("PH_SITE_DIR")
    if given:
        root = Path(given).resolve()
    else:
        root = tmp_path_factory.mktemp("site")
        command = [sys.executable, str(ROOT / "website" / "build.py"), "--out", str(root / "html")]
        done = subprocess.run([*command, "--work", str(root / "work")], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, f"the site's build failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    built = Site(root / "html", root / "work")
    assert (built.html / "index.html").is_file(), f"no site in {built.html}"
    return built


# ----- in Chromium ---------------------------------------------------------------------------------


def _images_drawn(notebook: Path) -> int:
    cells = nbformat.read(notebook, as_version=4).cells
    outputs = [output for cell in cells for output in cell.get("outputs", [])]
    return sum(any(kind in output.get("data", {}) for kind in IMAGE_TYPES) for output in outputs)


def _plot_calls(notebook: Path) -> int:
    """Code cells of a release that call a helper-package plot outside `ph.try_it` (they need no learner code)."""
    cells = nbformat.read(notebook, as_version=4).cells
    calls = [cell for cell in cells if cell.cell_type == "code" and re.search(r"plot_\w+\(", cell.source)]
    return sum("try_it" not in cell.source for cell in calls)


def _open(page, path: Path) -> None:
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    page.wait_for_function("() => [...document.images].every(image => image.complete)", timeout=15_000)


@needs_chromium
def test_every_page_renders_offline_with_every_figure_and_says_how_to_run_it(site):
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    ARTIFACTS.mkdir(parents=True)
    outside: list[str] = []
    errors: list[str] = []
    figures = {}
    with chromium_page(width=1300, height=900) as page:

        def only_the_site(route) -> None:
            if route.request.url.startswith(("file:", "data:", "about:")):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", only_the_site)
        page.on("pageerror", lambda error: errors.append(str(error)))
        for name in PAGES:
            path = site.html / f"{name}.html"
            assert path.is_file(), f"no page {path.name}"
            _open(page, path)
            page.screenshot(path=ARTIFACTS / f"{name}.png")
            assert page.locator("article h1").first.is_visible(), f"{name}: no title"
            images = page.eval_on_selector_all(
                "article img", "images => images.map(i => [i.getAttribute('src'), i.complete, i.naturalWidth])"
            )
            blank = [src for src, complete, width in images if not complete or width == 0]
            assert not blank, f"{name}: figures that do not show: {blank}"
            figures[name] = len(images)
            if name in NAMES:
                note = page.locator(".admonition", has_text="Run this notebook yourself")
                text = note.inner_text()
                assert f"{name}.ipynb" in text and "make lab" in text, f"{name}: the run note is missing: {text!r}"
                link = note.locator("a", has_text="Start here")
                assert link.get_attribute("href").split("#")[0] == "start-here.html"
        _open(page, site.html / "start-here.html")
        assert "make lab" in page.locator("article").inner_text()

    for name in NAMES:
        drawn = _images_drawn(site.work / "executed" / f"{name}.ipynb")
        assert figures[name] == drawn, f"{name}: {figures[name]} figures on the page, {drawn} drawn by Run All"
        calls = _plot_calls(site.work / "release" / f"{name}.ipynb")
        assert figures[name] >= calls, f"{name}: {figures[name]} figures for {calls} plot calls"
    assert sum(figures.values()) >= 10, figures
    assert not outside, f"requests that left the site: {outside}"
    assert not errors, f"script errors: {errors}"


@needs_chromium
def test_the_copy_on_write_story_steps_on_a_click(site):
    with chromium_page(width=1300, height=900) as page:
        page.goto((site.html / "copy-on-write.html").as_uri())
        story = page.frame_locator("iframe.cow-story")
        counter = story.locator(".ph-slide:not([hidden]) .ph-step-counter")
        assert re.fullmatch(r"step 0 of \d+", counter.inner_text().strip())
        stage = story.locator(".ph-story-stage")
        box = stage.bounding_box()
        stage.click(position={"x": box["width"] * 0.8, "y": box["height"] / 2})
        assert re.fullmatch(r"step 1 of \d+", counter.inner_text().strip())
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=ARTIFACTS / "copy-on-write-step-1.png")

        page.goto((site.html / "cow_story.html").as_uri())
        assert "step 0 of" in page.locator(".ph-slide:not([hidden]) .ph-step-counter").inner_text()
        assert "Copy-on-write" in page.title()
        assert "PagedKVCache" in page.locator(".ph-slide:not([hidden])").inner_text()


# ----- no solution, hidden test or rubric ------------------------------------------------------------


def _region_lines(notebook: Path) -> dict[str, set[str]]:
    """Lines of the instructor notebook's regions: "rubric" (solution regions of markdown cells),
    "hidden" (hidden-test regions) and "solution" (solution regions of code cells)."""
    found: dict[str, set[str]] = {"rubric": set(), "hidden": set(), "solution": set()}
    for cell in nbformat.read(notebook, as_version=4).cells:
        kind = None
        for line in cell.source.splitlines():
            marker = line.strip()
            if marker.startswith("### BEGIN SOLUTION"):
                kind = "rubric" if cell.cell_type == "markdown" else "solution"
            elif marker.startswith("### BEGIN HIDDEN TESTS"):
                kind = "hidden"
            elif marker.startswith("### END"):
                kind = None
            elif kind and marker:
                found[kind].add(marker)
    return found


def test_the_site_holds_no_solution_hidden_test_or_rubric_text(site):
    check = leak_scan.release_check()
    instructor = [NOTEBOOKS / f"{name}.ipynb" for name in NAMES]
    pairs = zip(instructor, site.released(), strict=True)
    leaks = [leak for notebook, released in pairs for leak in check.find_leaks(notebook, released)]
    assert not leaks, f"the release leaks: {leaks[:5]}"

    secrets = leak_scan.site_secrets(instructor, site.released())
    found = leak_scan.scan_texts(leak_scan.site_texts(site.html), secrets)
    assert not found, "in the site: " + "; ".join(f"{f.where.name}: {f.secret.text!r}" for f in found[:10])

    # The search covers every kind: each secret line of a rubric, a hidden test or a solution is
    # searched for, unless a release shows that line as given code (leak_scan.may_show).
    searched = {secret.text for secret in secrets}
    shown = {notebook.name: leak_scan.may_show(notebook, site.released())[0] for notebook in instructor}
    for kind in ("rubric", "hidden", "solution"):
        lines = {
            line
            for notebook in instructor
            for line in _region_lines(notebook)[kind] & check.secret_lines(notebook)
            if not {leak_scan.plain(line), leak_scan.plain_markdown(line)} & shown[notebook.name]
        }
        assert len(lines) >= 5, f"too few {kind} lines to search for: {sorted(lines)}"
        missing = {line for line in lines if line not in searched and len(leak_scan.plain_markdown(line)) >= 16}
        assert not missing, f"{kind} lines left out of the search: {sorted(missing)[:5]}"


def test_the_search_finds_a_solution_rubric_or_hidden_line_put_into_a_page(site, tmp_path):
    """What a leak would look like on a page: a solution line highlighted in spans, a rubric line
    rendered from markdown, a hidden-test line in an output."""
    from markdown_it import MarkdownIt

    instructor = [NOTEBOOKS / f"{name}.ipynb" for name in NAMES]
    secrets = leak_scan.site_secrets(instructor, site.released())
    page = (site.html / "03_paged_kv_cache.html").read_text(encoding="utf-8")
    clean = tmp_path / "clean.html"
    clean.write_text(page, encoding="utf-8")
    assert not leak_scan.scan_texts({clean: leak_scan.file_text(clean)}, secrets)

    regions = {kind: set().union(*(_region_lines(nb)[kind] for nb in instructor)) for kind in ("rubric", "hidden")}
    code = next(s for s in secrets if not s.prose and len(s.lines) == 1 and " " in s.text and "(" in s.text)
    rubric = next(s for s in secrets if s.prose and s.text in regions["rubric"] and "`" in s.text)
    hidden = next(s for s in secrets if not s.prose and s.text in regions["hidden"])
    words = re.split(r"(\W)", code.text)
    highlighted = "".join(f'<span class="n">{w.replace("<", "&lt;")}</span>' for w in words if w)
    injected = {
        "solution": f'<div class="highlight"><pre><span></span>    {highlighted}\n</pre></div>',
        "rubric": MarkdownIt().render(f"Some words before it, then {rubric.text} and after."),
        "hidden": f'<div class="output stream"><pre>{hidden.text.replace("<", "&lt;")}</pre></div>',
        "marker": "<pre>### BEGIN HIDDEN TESTS</pre>",
    }
    for kind, snippet in injected.items():
        tampered = tmp_path / f"{kind}.html"
        tampered.write_text(page.replace("</article>", snippet + "</article>", 1), encoding="utf-8")
        found = leak_scan.scan_texts({tampered: leak_scan.file_text(tampered)}, secrets)
        assert found, f"the search missed a {kind} line put into a page: {snippet[:200]}"
