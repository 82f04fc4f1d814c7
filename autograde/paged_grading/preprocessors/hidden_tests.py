"""HideHiddenTests (feedback): no output of any cell shows a hidden test or its parameters.

nbgrader's ClearHiddenTests removes the hidden lines from the test cells' *source*; what a
cell *printed* is left alone. A failing check's message may name a parameter of the hidden
call ("seed 2026"), and a student's own cell can print IPython's input history (``In``,
``_ih``), which holds the test cells as they ran, hidden lines included. This preprocessor
runs before ClearHiddenTests, reads the hidden regions of the notebook's test cells, and
in every output of every cell replaces

* each hidden line (as text) with ``[hidden test]``,
* each literal keyword argument of a hidden call (``seed=2026``) written as ``seed 2026``,
  ``seed=2026``, ``seed: 2026`` or ``seed(2026`` with the parameter name and ``(hidden)``.
"""

from __future__ import annotations

import ast
import re

from nbgrader.preprocessors import NbGraderPreprocessor

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
MIN_LINE = 8


def hidden_lines(source: str) -> list[str]:
    lines, inside = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            inside = True
        elif stripped.startswith(END):
            inside = False
        elif inside and len(stripped) >= MIN_LINE:
            lines.append(stripped)
    return lines


def without_hidden_lines(source: str) -> str:
    """``source`` without its hidden regions (the markers and every line between them)."""
    kept, inside = [], False
    for line in source.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith(BEGIN):
            inside = True
        elif stripped.startswith(END):
            inside = False
        elif not inside:
            kept.append(line)
    return "".join(kept)


def hidden_parameters(lines: list[str]) -> dict[str, set[str]]:
    """name -> the literal values hidden calls pass for it (as written: '2026')."""
    found: dict[str, set[str]] = {}
    for line in lines:
        try:
            tree = ast.parse(line)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg and isinstance(node.value, ast.Constant):
                found.setdefault(node.arg, set()).add(str(node.value.value))
    return found


class Scrubber:
    """Replaces, in any text or output, each of ``lines`` by ``label`` and each hidden parameter's value."""

    def __init__(self, lines: list[str], parameters: dict[str, set[str]], label: str = "[hidden test]"):
        self.lines = sorted(set(lines), key=len, reverse=True)
        self.label = label
        self.patterns = [
            (re.compile(rf"(\b{re.escape(name)}\w*\s*[=:(]?\s*){re.escape(value)}\b"), r"\1(hidden)")
            for name, values in parameters.items()
            for value in values
        ]

    def __call__(self, text: str) -> str:
        for line in self.lines:
            text = text.replace(line, self.label)
        for pattern, replacement in self.patterns:
            text = pattern.sub(replacement, text)
        return text

    def output(self, output) -> None:
        if "text" in output:
            output["text"] = self(output["text"])
        for key, value in list(output.get("data", {}).items()):
            if isinstance(value, str):
                output["data"][key] = self(value)
            elif isinstance(value, list) and all(isinstance(v, str) for v in value):
                output["data"][key] = [self(v) for v in value]
        if "evalue" in output:
            output["evalue"] = self(output["evalue"])
        if "traceback" in output:
            output["traceback"] = [self(line) for line in output["traceback"]]


class HideHiddenTests(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        lines = [line for cell in nb.cells if cell.cell_type == "code" for line in hidden_lines(cell.source)]
        if not lines:
            return nb, resources
        scrub = Scrubber(lines, hidden_parameters(lines))
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                scrub.output(output)
        return nb, resources
