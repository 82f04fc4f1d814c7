"""SafeOutputs (autograde and feedback): what a student's notebook shows in a browser never runs.

The threat: a student's cell that displays HTML or JavaScript (``display(HTML("<script>..."))``,
an ``application/javascript`` output, an SVG with ``onload=``, an ``<img onerror=...>``, a
``javascript:`` link) or a written answer (a markdown cell) holding the same, is put verbatim on
the pages others open: nbconvert's HTML inserts ``text/html`` and rendered markdown as they are,
and a ``<script>`` of ``application/javascript``. The instructor opens the *autograded* notebook
in formgrader (nbconvert, in the origin where Jupyter and its token live), the student the
feedback page. A script there acts as the instructor in formgrader, or as the student's page.

The rule: what a notebook shows is inert markup or text, nothing else. This preprocessor runs
late in autograde (after the outputs exist and the grades are saved, so it changes no score),
which makes the autograded notebook itself safe wherever it is opened, and again among the
feedback preprocessors, as a second line of defence. For every cell:

* ``text/html`` outputs are cleaned with bleach (``clean_html``) to an allow-list of tags
  (text, lists, tables, images, ``details``; never script, style, iframe, form, svg, math),
  attributes (``class``, ``style``, ``title``, ``data-*``, ``aria-*`` and a few per tag; never an
  ``on*`` handler), URLs (links to http, https, mailto or the page itself; images from http,
  https or ``data:image/...``) and CSS (layout, colour, type; never ``position``, never
  ``url()``, only value functions of the allow-list). A disallowed tag is shown as its text. The
  course's own pictures (``paged_helpers.widgets``: inline-styled ``div``/``span`` with
  ``ph-*`` classes and ``data-*``) are made of allowed markup only and come through whole.
* ``image/svg+xml`` becomes ``<img src="data:image/svg+xml;base64,...">``: a browser runs no
  script of an SVG shown as an image.
* Markdown (markdown cells, ``text/markdown`` outputs) is rendered as nbconvert renders it; if
  that HTML holds anything ``clean_html`` would change, the whole text is shown as the student
  wrote it, in a code block, under a line saying why (``safe_markdown``). A markdown answer
  cannot be cleaned in place: its source must stay markdown for the grader.
* Any other type (``application/javascript``, widget views ``application/vnd.*``, unknown ones)
  is dropped; an output left with nothing to show says which type was left out. ``text/plain``,
  ``text/latex`` (escaped by nbconvert; MathJax loads with its ``Safe`` extension),
  ``application/json`` and base64 ``image/png``, ``image/jpeg`` and ``image/gif`` are kept.
* An output's metadata keeps only image sizes and nbconvert's presentation flags (no
  ``filenames``, no ``isolated`` iframe), and the notebook's saved widget state is removed.

Streams and tracebacks are left alone: nbconvert escapes them (``ansi2html``). Raw cells are
rendered by nbconvert through its own bleach filter (``clean_html``).
"""

from __future__ import annotations

import base64
import re

import bleach
import tinycss2
from bleach import html5lib_shim
from bleach.css_sanitizer import ALLOWED_CSS_PROPERTIES, ALLOWED_SVG_PROPERTIES, CSSSanitizer
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

HEADINGS = frozenset(f"h{level}" for level in range(1, 7))
TAGS = HEADINGS | frozenset(
    "a abbr b bdi bdo blockquote br caption cite code col colgroup dd del details dfn div dl dt em "
    "figcaption figure hr i img input ins kbd li mark ol p pre q rp rt ruby s samp small span strong "
    "sub summary sup table tbody td tfoot th thead time tr u ul var wbr".split()
)
_GLOBAL = frozenset({"class", "style", "title", "role", "lang", "dir", "hidden"})
_PER_TAG = {
    "a": {"href"},
    "img": {"src", "alt", "width", "height"},
    "td": {"colspan", "rowspan", "align", "valign"},
    "th": {"colspan", "rowspan", "align", "valign", "scope"},
    "col": {"span"},
    "colgroup": {"span"},
    "ol": {"start", "type", "reversed"},
    "li": {"value"},
    "details": {"open"},
    "input": {"type", "disabled", "checked"},  # markdown's task lists: a disabled checkbox
    **{heading: {"id"} for heading in HEADINGS},  # nbconvert's heading anchors
}
_DATA_OR_ARIA = re.compile(r"(data|aria)-[a-z0-9_.-]+")
LINK_SCHEMES = frozenset({"http", "https", "mailto"})
IMAGE_SCHEMES = frozenset({"http", "https"})
_DATA_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml)[;,]")
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*):")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")

# Layout, colour and type: what the course's pictures and ordinary tables use. Not ``position``
# (a fixed box over the grader's form), nor anything that loads a resource.
CSS_PROPERTIES = (
    ALLOWED_CSS_PROPERTIES
    | ALLOWED_SVG_PROPERTIES
    | {f"{side}{part}" for side in ("margin", "padding") for part in ("", "-top", "-right", "-bottom", "-left")}
    | {
        f"border{side}{part}"
        for side in ("", "-top", "-right", "-bottom", "-left")
        for part in ("", "-color", "-style", "-width")
    }
    | {
        "align-content", "align-items", "align-self", "background", "border-radius", "border-spacing",
        "box-shadow", "box-sizing", "caption-side", "column-gap", "empty-cells", "flex", "flex-basis",
        "flex-direction", "flex-flow", "flex-grow", "flex-shrink", "flex-wrap", "font-stretch",
        "font-variant-numeric", "gap", "grid-area", "grid-auto-columns", "grid-auto-flow",
        "grid-auto-rows", "grid-column", "grid-column-end", "grid-column-start", "grid-row",
        "grid-row-end", "grid-row-start", "grid-template-areas", "grid-template-columns",
        "grid-template-rows", "justify-content", "justify-items", "justify-self", "list-style-type",
        "max-height", "max-width", "min-height", "min-width", "opacity", "order", "outline",
        "overflow-wrap", "overflow-x", "overflow-y", "row-gap", "tab-size", "table-layout",
        "text-decoration-color", "text-decoration-line", "text-decoration-style", "text-overflow",
        "text-shadow", "text-transform", "visibility", "word-break", "word-spacing", "word-wrap",
    }
)  # fmt: skip
CSS_FUNCTIONS = frozenset(
    "calc clamp conic-gradient hsl hsla linear-gradient max min minmax radial-gradient repeat "
    "repeating-conic-gradient repeating-linear-gradient repeating-radial-gradient rgb rgba var".split()
)


def _inert_css_value(tokens) -> bool:
    for token in tokens:
        if token.type == "url":
            return False
        if token.type == "function" and (
            token.lower_name not in CSS_FUNCTIONS or not _inert_css_value(token.arguments)
        ):
            return False
        if token.type in ("() block", "[] block", "{} block") and not _inert_css_value(token.content):
            return False
    return True


def _declarations(style: str) -> list[tuple[object, bool]]:
    """The style's declarations, each with whether it is allowed; anything else (a parse error, an
    at-rule) as not allowed. Whitespace and comments are left out."""
    found = []
    for token in tinycss2.parse_declaration_list(style):
        if token.type in ("whitespace", "comment"):
            continue
        allowed = token.type == "declaration" and token.lower_name in CSS_PROPERTIES and _inert_css_value(token.value)
        found.append((token, allowed))
    return found


class InertCSS(CSSSanitizer):
    """bleach's CSS filter with ``CSS_PROPERTIES``, dropping any declaration that loads a resource
    (``url()``) or calls a function outside ``CSS_FUNCTIONS``."""

    def __init__(self):
        super().__init__(allowed_css_properties=CSS_PROPERTIES, allowed_svg_properties=frozenset())

    def sanitize_css(self, style):
        kept = [token for token, allowed in _declarations(style) if allowed]
        return " ".join(tinycss2.serialize([token]).strip() for token in kept)  # each ends with ";"


def inert_css(style: str) -> bool:
    return all(allowed for _, allowed in _declarations(style))


def _url_scheme(value: str) -> str | None:
    """The scheme a browser reads in an attribute's URL (bleach's normalisation), or None."""
    url = html5lib_shim.convert_entities(value)
    url = re.sub(r"[`\000-\040\177-\240\s]+", "", url)
    url = re.sub(r"[^\x00-\x7f]", "", url).lower()
    found = _SCHEME.match(url)
    return found.group(1) if found else None


def _data_image(value: str) -> bool:
    url = re.sub(r"[`\000-\040\177-\240\s]+", "", html5lib_shim.convert_entities(value)).lower()
    return bool(_DATA_IMAGE.match(url))


def allowed_attribute(tag: str, name: str, value: str) -> bool:
    """bleach's attribute filter: the allow-list, with the URLs' schemes checked."""
    name = name.lower()
    if not (name in _GLOBAL or name in _PER_TAG.get(tag, ()) or _DATA_OR_ARIA.fullmatch(name)):
        return False
    if tag == "a" and name == "href":
        scheme = _url_scheme(value)
        return scheme is None or scheme in LINK_SCHEMES
    if tag == "img" and name == "src":
        scheme = _url_scheme(value)
        return scheme is None or scheme in IMAGE_SCHEMES or _data_image(value)
    if tag == "input" and name == "type":
        return value.strip().lower() == "checkbox"
    return True


_CLEANER = bleach.Cleaner(
    tags=TAGS,
    attributes=allowed_attribute,
    protocols=LINK_SCHEMES | IMAGE_SCHEMES | {"data"},  # data: only as an image (allowed_attribute)
    strip=False,  # a disallowed tag is shown as text
    strip_comments=True,
    css_sanitizer=InertCSS(),
)


def clean_html(html: str) -> str:
    """``html`` with only the allowed markup; a disallowed tag is escaped, shown as text."""
    return _CLEANER.clean(html)


def _parse(html: str):
    parser = html5lib_shim.BleachHTMLParser(tags=None, strip=False, consume_entities=False, namespaceHTMLElements=False)
    return parser.parseFragment(html)


def is_inert(html: str) -> bool:
    """Whether ``clean_html`` would keep all of ``html``: every element and attribute allowed,
    parsed as a browser parses it (html5lib, the parser bleach uses)."""
    for element in _parse(html).iter():
        if not isinstance(element.tag, str):
            continue  # a comment
        if element.tag == "DOCUMENT_FRAGMENT":
            continue
        if element.tag not in TAGS:
            return False
        for name, value in element.attrib.items():
            if not isinstance(name, str) or not allowed_attribute(element.tag, name, value):
                return False
            if name.lower() == "style" and not inert_css(value):
                return False
    return True


def render_markdown(source: str, attachments: dict | None = None) -> str:
    """Markdown to HTML as nbconvert's HTML exporter renders a cell (same renderer and math)."""
    renderer = IPythonRenderer(escape=False, attachments=attachments or {})
    return MarkdownWithMath(renderer=renderer).render(source)


SHOWN_AS_TEXT = (
    "*This text held markup that could run code in a browser (a script, an event handler, an "
    "embedded page or a script link); it is shown as it was written.*"
)


def as_text(source: str) -> str:
    """``source`` in a fenced code block that nothing in it can close, under ``SHOWN_AS_TEXT``."""
    longest = max((len(run) for run in re.findall(r"`+|~+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{SHOWN_AS_TEXT}\n\n{fence}text\n{source}\n{fence}\n"


def safe_markdown(source: str, attachments: dict | None = None) -> str:
    """``source`` unchanged if its rendering is inert, else ``as_text(source)``."""
    try:
        if is_inert(render_markdown(source, attachments)):
            return source
    except Exception:  # noqa: BLE001  (a missing attachment: nbconvert would fail the page too)
        pass
    shown = as_text(source)
    return shown if is_inert(render_markdown(shown)) else SHOWN_AS_TEXT + "\n"


KEPT_AS_THEY_ARE = frozenset({"text/plain", "text/latex", "application/json"})
IMAGES = frozenset({"image/png", "image/jpeg", "image/gif"})
SVG = "image/svg+xml"
# Output metadata nbconvert reads (sizes, presentation flags), with the values it may hold.
_META_VALUES = {
    "width": (int, float),
    "height": (int, float),
    "unconfined": (bool,),
    "needs_background": (str,),
    "alt": (str,),
}


def _svg_as_image(svg: str) -> str:
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img src="data:image/svg+xml;base64,{data}">'


def _safe_metadata(metadata: dict, kept_types) -> NotebookNode:
    safe = NotebookNode()
    for key, value in metadata.items():
        if key in _META_VALUES and isinstance(value, _META_VALUES[key]):
            safe[key] = value
        elif key in kept_types and isinstance(value, dict):
            inner = {k: v for k, v in value.items() if k in _META_VALUES and isinstance(v, _META_VALUES[k])}
            if inner:
                safe[key] = NotebookNode(inner)
    return safe


def safe_data(data: dict) -> tuple[NotebookNode, list[str]]:
    """An output's MIME bundle with only inert content; also the types left out."""
    safe, left_out = NotebookNode(), []
    for kind, value in data.items():
        if kind in KEPT_AS_THEY_ARE:
            safe[kind] = value
        elif kind in IMAGES and isinstance(value, str) and _BASE64.fullmatch(value):
            safe[kind] = value
        elif kind == "text/html":
            safe[kind] = clean_html(_text(value))
        elif kind == "text/markdown":
            safe[kind] = safe_markdown(_text(value))
        elif kind != SVG:
            left_out.append(kind)
    if SVG in data:
        if "text/html" not in safe:
            safe["text/html"] = _svg_as_image(_text(data[SVG]))
    if not (safe.keys() - {"application/json"}):
        names = ", ".join(left_out) or "no"
        safe["text/plain"] = f"[an output of type {names} is not shown here: pages showing students' work run no code]"
    return safe, left_out


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def safe_output(output: NotebookNode) -> NotebookNode:
    if output.get("output_type") not in ("display_data", "execute_result", "update_display_data"):
        return output  # streams and errors: nbconvert escapes their text
    output["data"], _ = safe_data(output.get("data", {}))
    output["metadata"] = _safe_metadata(output.get("metadata", {}), output["data"].keys())
    return output


class SafeOutputs(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        nb.metadata.pop("widgets", None)  # saved widget state: the page would load a widget manager
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cell.source = safe_markdown(cell.source, cell.get("attachments"))
        elif cell.cell_type == "code":
            cell.outputs = [safe_output(output) for output in cell.get("outputs", [])]
        return cell, resources
