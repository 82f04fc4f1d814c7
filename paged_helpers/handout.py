"""The handout at the top of every notebook: deliverables and points, what to implement, what the
checks cover and what they do not, and a time estimate.

Everything but the last two rows is read from the notebook itself and from the checks'
``REGISTRY``, so the handout cannot drift from what is graded: the points and grade ids from the
nbgrader metadata of the graded cells, the checks each test cell calls (and what each verifies,
the first paragraph of its docstring), the definitions to write from the solution cells (a class
lists the methods holding a solution region). Only the time estimate, the notes on what is not
checked and the notes on points are written by hand, below.

The handout is a markdown cell with id ``handout`` right after each notebook's title cell::

    python -m paged_helpers.handout          # rewrite the handout cell of every notebook
    python -m paged_helpers.handout --check  # exit 1 if one is missing or stale

``tests/test_handout.py`` runs the check, so a changed point value or a new check shows up as a
failing test until the handout is rewritten.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COURSE_FACTS",
    "Deliverable",
    "course_facts",
    "deliverables",
    "handout_markdown",
    "interfaces",
    "main",
]

CELL_ID = "handout"
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# Written by hand, in each notebook's own metadata (``metadata.course``), so that a new notebook
# brings its facts with it and nothing here lists notebooks:
#   hours        an honest range for a learner who knows PyTorch, reading included (the first Triton
#                notebooks, 06 and 07, take longer than their line counts suggest: the interpreter is slow)
#   not_checked  only what the notebook's own prose says; the rows every notebook shares (written
#                answers, optional exercises, cells the grader skips) are derived
#   points_note  what a learner should know about how the points were set (CONTRIBUTING.md, "How
#                points are set"), where the table alone would mislead
COURSE_FACTS = ("hours", "not_checked", "points_note")


def course_facts(path: str | Path) -> dict[str, str]:
    """The notebook's hand-written facts (``metadata.course``); ``hours`` is required."""
    facts = json.loads(Path(path).read_text(encoding="utf-8"))["metadata"].get("course", {})
    unknown = sorted(set(facts) - set(COURSE_FACTS))
    if "hours" not in facts or unknown:
        raise ValueError(
            f"{Path(path).name}: metadata.course needs 'hours' and may hold only {COURSE_FACTS}"
            + (f"; unknown: {unknown}" if unknown else "")
        )
    return facts


_CHECK_CALL = re.compile(r"\b(check_\w+)\(")
_QUESTION = re.compile(r"^\*\*Q?(\d+)\.\*\*", re.M)
_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.S)


@dataclass(frozen=True)
class Deliverable:
    """One graded cell: its grade id, points, and either the checks it calls or the question it answers."""

    grade_id: str
    points: float
    written: bool
    checks: tuple[str, ...] = ()
    question: str = ""


def _cells(path: Path) -> list[dict]:
    return json.loads(Path(path).read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def deliverables(path: str | Path) -> list[Deliverable]:
    """The notebook's graded cells in order (code test cells and written answers)."""
    found, cells = [], _cells(Path(path))
    for index, cell in enumerate(cells):
        meta = _nbgrader(cell)
        if not meta.get("grade"):
            continue
        if cell["cell_type"] == "markdown":
            asked = _QUESTION.search(_source(cells[index - 1])) if index else None
            question = f"Q{asked.group(1)}" if asked else meta["grade_id"]
            found.append(Deliverable(meta["grade_id"], meta.get("points", 0), True, question=question))
        else:
            visible = _HIDDEN.sub("", _source(cell))
            checks = tuple(dict.fromkeys(_CHECK_CALL.findall(visible)))
            found.append(Deliverable(meta["grade_id"], meta.get("points", 0), False, checks=checks))
    return found


def _signature(node: ast.FunctionDef) -> str:
    args = [arg.arg for arg in node.args.args]
    return f"{node.name}({', '.join(args)})"


def interfaces(path: str | Path, optional: frozenset[str] = frozenset()) -> list[str]:
    """What to write: each solution cell's functions (signature) and classes (methods with a solution region).

    A class written over several cells (``class PagedKVCache(PagedKVCache)`` re-opening it) is one entry.

    A cell that defines a name in ``optional`` (what an ungraded check builds) is marked optional.
    """
    found = []
    class_lines: dict[str, int] = {}  # a class built over several cells is one line: its methods in order
    for cell in _cells(Path(path)):
        meta = _nbgrader(cell)
        if cell["cell_type"] != "code" or not meta.get("solution") or meta.get("grade"):
            continue
        source = _source(cell)
        body = ast.parse(source).body
        names = {node.name for node in body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        mark = " (optional)" if names & optional else ""
        for node in body:
            text = ast.get_source_segment(source, node) or ""
            if "### BEGIN SOLUTION" not in text:
                continue
            if isinstance(node, ast.FunctionDef):
                found.append(f"`{_signature(node)}`{mark}")
            elif isinstance(node, ast.ClassDef):
                methods = [
                    item.name
                    for item in node.body
                    if isinstance(item, ast.FunctionDef)
                    and "### BEGIN SOLUTION" in (ast.get_source_segment(source, item) or "")
                ]
                listed = ", ".join(f"`{name}`" for name in methods)
                if node.name in class_lines:
                    found[class_lines[node.name]] += f", then {listed}"
                else:
                    class_lines[node.name] = len(found)
                    found.append(f"`{node.name}`{mark}: {listed}")
    return found


def _covers(check: str) -> str:
    from paged_helpers.checks import REGISTRY

    doc = (REGISTRY[check].function.__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split()).replace("``", "`")


def _points(value: float) -> str:
    return f"{value:g}"


def handout_markdown(name: str, notebooks: str | Path = NOTEBOOKS) -> str:
    """The handout cell's markdown for notebook ``name`` (its file stem)."""
    from paged_helpers.checks import for_notebook

    path = Path(notebooks) / f"{name}.ipynb"
    registered = for_notebook(name)
    graded = deliverables(path)
    code = sum(item.points for item in graded if not item.written)
    written = sum(item.points for item in graded if item.written)
    lines = [
        "## Handout",
        "",
        f"**Deliverables: {_points(code + written)} points** ({_points(code)} for code, checked as you go; "
        f"{_points(written)} for written answers, marked by hand).",
        "",
        "| graded cell | points | graded by |",
        "| --- | --- | --- |",
    ]
    for item in graded:
        if item.written:
            lines.append(f"| {item.question} (`{item.grade_id}`) | {_points(item.points)} | your written answer |")
        else:
            checks = ", ".join(f"`{check}`" for check in item.checks)
            lines.append(f"| `{item.grade_id}` | {_points(item.points)} | {checks} |")
    facts = course_facts(path)
    if "points_note" in facts:
        lines += ["", f"**Points:** {facts['points_note']}."]
    lines += ["", "**You implement:**", ""]
    optional = frozenset(info.builds for info in registered if not info.graded) - {
        info.builds for info in registered if info.graded
    }
    lines += [f"- {interface}" for interface in interfaces(path, optional)]
    lines += ["", "**What the checks verify:**", ""]
    lines += [f"- `{info.name}` (your `{info.builds}`): {_covers(info.name)}" for info in registered if info.graded]
    skipped = sum("skip-autograde" in cell.get("metadata", {}).get("tags", []) for cell in _cells(path))
    not_checked = ["your written answers (marked by hand)"]
    not_checked += [
        f"the optional `{info.builds}` (`{info.name}` runs, for no points)" for info in registered if not info.graded
    ]
    if skipped:
        not_checked.append(f"the {skipped} demo, plot and benchmark cells (the grader skips them)")
    if "not_checked" in facts:
        not_checked.append(facts["not_checked"])
    lines += ["", "**Not checked automatically:** " + "; ".join(not_checked) + "."]
    lines += ["", f"**Time:** about {facts['hours']} (an estimate)."]
    return "\n".join(lines)


def _set_source(cell: dict, text: str) -> None:
    rows = text.split("\n")
    cell["source"] = [row + "\n" for row in rows[:-1]] + [rows[-1]]


def main(argv: list[str] | None = None, notebooks: str | Path = NOTEBOOKS) -> int:
    """Rewrite (or with --check, compare) the handout cell of every notebook; returns the exit status."""
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for path in sorted(Path(notebooks).glob("[0-9][0-9]_*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        text = handout_markdown(path.stem, notebooks)
        cells = notebook["cells"]
        current = next((cell for cell in cells if cell.get("id") == CELL_ID), None)
        if current is not None and _source(current) == text:
            continue
        stale.append(path.name)
        if check:
            continue
        if current is None:
            current = {"cell_type": "markdown", "id": CELL_ID, "metadata": {}, "source": []}
            cells.insert(1, current)
        _set_source(current, text)
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if stale:
        print(("stale handout: " if check else "rewrote the handout of ") + ", ".join(stale))
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
