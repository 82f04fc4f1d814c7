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
"""

from __future__ import annotations

import re

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor

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
    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and GUARD_BEGIN in cell.source:
            cell.source = _GUARD_BLOCK.sub("", cell.source)
        return cell, resources


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
