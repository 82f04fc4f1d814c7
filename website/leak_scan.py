"""Solution, hidden-test and rubric text in a built website.

The secrets are the release check's (``release_check.secret_lines`` and ``secret_fragments`` of
every instructor notebook: lines found only inside a solution or hidden-test region, rubrics
included, and runs of such lines), less what the releases show by the course's design
(``may_show``: a line of one notebook's solution that is given code in another notebook).

A page shows text changed: code split into highlighted spans, markdown's ``*``, backticks and
links gone, entities escaped, prose lines joined. So both sides are brought to one plain form
(``plain``), and a page's text is read as lines (a line break at every block element). A secret
line of a code cell is found when a page line equals it (the release check's rule); one of a
markdown cell (a rubric, a model answer) when it is anywhere in the page's text; a fragment when
its lines are consecutive page lines. Other text files (scripts, the search index) are read whole.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import nbformat

MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")
TEXT_SUFFIXES = {".html", ".js", ".txt", ".json", ".css", ".svg", ".xml", ".md", ".ipynb", ".py"}
# Shorter than this, plain prose is too common to mean anything (release_check.MIN_LINE).
MIN_PROSE = 16

_LEADING_MARKUP = re.compile(r"^(#+|[-+*]|\d+[.)]|>)\s+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_DROPPED = re.compile(r"[*`|\\]")
_SPACE = re.compile(r"\s+")


def release_check():
    """The course's release check (``course.py check-release``): its leak search is the site's too."""
    from paged_grading.administration import release_check

    return release_check


def plain(text: str) -> str:
    """One form for a page's text and a secret line: no markup characters, single spaces."""
    return _SPACE.sub(" ", _DROPPED.sub("", html.unescape(text))).strip()


def plain_markdown(line: str) -> str:
    """A markdown source line as a page shows it (its list or heading mark and link targets gone)."""
    return plain(_LINK.sub(r"\1", _LEADING_MARKUP.sub("", line.strip())))


class _Lines(HTMLParser):
    """A page's text and shown attributes; a line break at every block element, none inside a
    line (the highlighted spans of one code line join back into that line)."""

    BLOCKS = {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption", "figure",
        "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav", "ol", "p", "pre",
        "section", "table", "tbody", "td", "th", "thead", "tr", "ul", "script", "style", "title", "iframe",
    }  # fmt: skip
    SHOWN = ("alt", "title", "aria-label", "content", "value", "placeholder")

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCKS:
            self.parts.append("\n")
        self.parts += [f"\n{value}\n" for name, value in attrs if name in self.SHOWN and value]

    def handle_endtag(self, tag):
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data):
        self.parts.append(data)


@dataclass(frozen=True)
class Text:
    """A file's plain lines (non-empty) and all of it as one plain string."""

    lines: tuple[str, ...]
    whole: str

    def has_lines(self, run: tuple[str, ...]) -> bool:
        n = len(run)
        return any(self.lines[i : i + n] == run for i in range(len(self.lines) - n + 1))


def file_text(path: Path) -> Text:
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        parser = _Lines()
        parser.feed(raw)
        parser.close()
        raw = "".join(parser.parts)
    lines = tuple(line for line in (plain(line) for line in raw.splitlines()) if line)
    return Text(lines, " ".join(lines))


@dataclass(frozen=True)
class Secret:
    text: str  # as in the instructor notebook (a fragment's lines joined by " / ")
    lines: tuple[str, ...]  # plain; one line, or a fragment's run of lines
    prose: bool  # a markdown line: found anywhere in a page's text, not only as a whole line
    notebook: str

    def found_in(self, text: Text) -> bool:
        if self.prose:
            return self.lines[0] in text.whole
        if self.lines[-1] not in text.whole:  # cheap first
            return False
        return text.has_lines(self.lines)


@dataclass(frozen=True)
class Found:
    secret: Secret
    where: Path


def _source_lines(notebook: Path, cell_type: str | None = None) -> set[str]:
    cells = nbformat.read(notebook, as_version=4).cells
    return {line.strip() for cell in cells if cell_type in (None, cell.cell_type) for line in cell.source.splitlines()}


def secrets_of(instructor_notebook: Path, shown: set[str] = frozenset(), shown_runs=()) -> list[Secret]:
    """The release check's secret lines and fragments (of two lines or more) of one instructor
    notebook, less the lines in ``shown`` and the runs in ``shown_runs`` (``may_show``; plain form)."""
    check = release_check()
    markdown = _source_lines(instructor_notebook, "markdown")
    name = instructor_notebook.name
    secrets = []
    for line in sorted(check.secret_lines(instructor_notebook)):
        prose = line in markdown
        flat = plain_markdown(line) if prose else plain(line)
        if flat not in shown and (not prose or len(flat) >= MIN_PROSE):
            secrets.append(Secret(line, (flat,), prose, name))
    for fragment in check.secret_fragments(instructor_notebook):
        run = tuple(plain(line) for line in fragment)
        if len(run) >= 2 and not any(_run_in(run, cell) for cell in shown_runs):
            secrets.append(Secret(" / ".join(fragment), run, False, name))
    return secrets


def _run_in(run: tuple[str, ...], lines: tuple[str, ...]) -> bool:
    n = len(run)
    return any(lines[i : i + n] == run for i in range(len(lines) - n + 1))


def release_shows(released_notebooks: list[Path], leaving_out: set[str] = frozenset()):
    """Every line of the released notebooks' cells but those in ``leaving_out`` (plain, and as
    markdown would show it), and each cell's non-blank lines (plain)."""
    lines: set[str] = set()
    runs: list[tuple[str, ...]] = []
    for notebook in released_notebooks:
        for cell in nbformat.read(notebook, as_version=4).cells:
            source = [line for line in cell.source.splitlines() if line.strip()]
            kept = [line for line in source if line.strip() not in leaving_out]
            lines.update(plain(line) for line in kept)
            lines.update(plain_markdown(line) for line in kept)
            runs.append(tuple(plain(line) for line in source))
    return lines, runs


def may_show(instructor_notebook: Path, released_notebooks: list[Path]) -> tuple[set[str], list[tuple[str, ...]]]:
    """What a page may show although it matches a secret of this notebook: a line of another
    notebook's release (given code there, by the course's design: 10's tree walk in 11), a line of
    its own release that is not itself a secret line (the same code spaced differently: the release
    check compares exact lines), and runs of lines of any release. A release holding its own
    notebook's secret lines excuses nothing, so a leaky release is caught here too."""
    own = [path for path in released_notebooks if path.name == instructor_notebook.name]
    others = [path for path in released_notebooks if path.name != instructor_notebook.name]
    lines, runs = release_shows(others)
    own_lines, own_runs = release_shows(own, leaving_out=release_check().secret_lines(instructor_notebook))
    return lines | own_lines, runs + own_runs


def site_secrets(instructor_notebooks: list[Path], released_notebooks: list[Path]) -> list[Secret]:
    secrets = []
    for notebook in instructor_notebooks:
        secrets += secrets_of(notebook, *may_show(notebook, released_notebooks))
    return secrets


def site_texts(site: Path) -> dict[Path, Text]:
    """Every text file of a built site, as plain text."""
    files = [path for path in sorted(site.rglob("*")) if path.is_file() and path.suffix in TEXT_SUFFIXES]
    return {path: file_text(path) for path in files}


def scan_texts(texts: dict[Path, Text], secrets: list[Secret]) -> list[Found]:
    """Each (secret, file) where the file shows the secret, and each region marker found."""
    found = []
    for path, text in texts.items():
        found += [Found(secret, path) for secret in secrets if secret.found_in(text)]
        found += [Found(Secret(m, (m,), True, "(marker)"), path) for m in MARKERS if m in text.whole]
    return found


def scan_site(site: Path, instructor_notebooks: list[Path], released_notebooks: list[Path]) -> list[Found]:
    """Solution, hidden-test and rubric text of the instructor notebooks that the site shows beyond the release."""
    return scan_texts(site_texts(site), site_secrets(instructor_notebooks, released_notebooks))
