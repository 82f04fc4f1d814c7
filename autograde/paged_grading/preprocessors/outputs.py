"""What a test cell's outputs count for, and what feedback shows of them.

nbgrader gives a test cell zero points for any stderr output, and feedback shows hidden tests
in tracebacks. Neither is what this course wants:

* ``DemoteStderr`` (autograde, after execution, before grades are saved): stderr text in a
  test cell is kept, prefixed "[stderr]", as stdout. A test cell scores by its check alone:
  a correct class that logs to stderr keeps its points, and printing "all tests passed" or
  anything else never earns any. Known harmless warnings are removed before by nbgrader's
  IgnorePattern (configured in nbgrader_config.py).
* ``StripGuard`` (feedback): removes the grader's guard preamble from test cells.
* ``HideTestTracebacks`` (feedback): a failing test cell shows only the check's message
  (scenario, expected, got, hint), never the traceback frames that would print hidden-test
  lines. ``ClearHiddenTests`` removes the hidden lines from the cell source itself.
* ``DefuseMarkers`` (feedback, before ClearHiddenTests): a student's own cell that mentions
  the hidden-test markers (a comment "### BEGIN HIDDEN TESTS") would make ClearHiddenTests
  raise, and that student would get no feedback page. Outside the grader's test cells the
  marker words are shown with a no-break space, which nbgrader does not recognise.
* ``LimitOutputs`` (feedback): an output larger than ``max_output_bytes`` (a 47 MiB image or
  print loop) is replaced by a line saying how big it was, and once the page's outputs reach
  ``max_page_output_bytes`` the remaining ones are left out the same way.
"""

from __future__ import annotations

import ast
import json
import re

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from . import hidden_tests
from .guard import GUARD_BEGIN, GUARD_END, is_autograded_test

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GUARD_BLOCK = re.compile(re.escape(GUARD_BEGIN) + r".*?" + re.escape(GUARD_END) + r"\n?", re.S)


class DemoteStderr(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if is_autograded_test(cell):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
                    output["text"] = "".join(f"[stderr] {line}" for line in output["text"].splitlines(True))
        return cell, resources


class StripGuard(NbGraderPreprocessor):
    """The guard preamble out of the test cells' sources, and its lines out of every output (a
    cell that prints IPython's ``In`` would show them: the private copy's path, the manifest hash)."""

    def preprocess(self, nb, resources):
        lines = [
            line.strip()
            for cell in nb.cells
            if cell.cell_type == "code"
            for block in _GUARD_BLOCK.findall(cell.source)
            for line in block.splitlines()
            if len(line.strip()) >= hidden_tests.MIN_LINE
        ]
        # The lines' string literals too (paths, hashes): ``print(In)`` shows the lines as a
        # repr, with their quotes escaped, and the literals are what the lines would give away.
        lines += [literal for line in lines for literal in _string_literals(line)]
        scrub = hidden_tests.Scrubber(lines, {}, label="[grader's line]")
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.source = _GUARD_BLOCK.sub("", cell.source)
            if lines:
                for output in cell.get("outputs", []):
                    scrub.output(output)
        return nb, resources


def _string_literals(line: str) -> list[str]:
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return []
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) >= hidden_tests.MIN_LINE
    ]


def check_message(output: NotebookNode) -> str:
    """'Ename: message' of an error output, without colour codes."""
    return _ANSI.sub("", f"{output.get('ename', 'Error')}: {output.get('evalue', '')}")


class HideTestTracebacks(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if is_autograded_test(cell):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [check_message(output)]
        return cell, resources


MARKER_WORDS = ("HIDDEN TESTS", "HIDDEN\tTESTS")
DEFUSED = "HIDDEN\u00a0TESTS"


class DefuseMarkers(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        if not is_autograded_test(cell):
            for word in MARKER_WORDS:
                cell.source = cell.source.replace(word, DEFUSED)
        return cell, resources


def _mib(size: int) -> str:
    return f"{size / 2**20:.2f} MiB"


class LimitOutputs(NbGraderPreprocessor):
    max_output_bytes = Integer(256 * 1024, help="Largest single output kept in feedback (bytes of JSON).").tag(
        config=True
    )
    max_page_output_bytes = Integer(
        4 * 1024 * 1024, help="Outputs kept per feedback page, in all (bytes of JSON)."
    ).tag(config=True)

    def preprocess(self, nb, resources):
        kept = 0
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            for index, output in enumerate(cell.get("outputs", [])):
                size = len(json.dumps(output))
                if size > self.max_output_bytes:
                    why = f"the limit is {_mib(self.max_output_bytes)} per output"
                elif kept + size > self.max_page_output_bytes:
                    why = f"the page already holds {_mib(kept)} of outputs"
                else:
                    kept += size
                    continue
                cell.outputs[index] = NotebookNode(
                    output_type="stream",
                    name="stdout",
                    text=f"[an output of {_mib(size)} is left out of this feedback page: {why}]\n",
                )
        return nb, resources
