"""Where a kernel check finds the learner's kernel: always as text, read the same way everywhere.

A kernel check is handed the learner's ``@triton.jit`` kernel (in a notebook's test cell:
``check_paged_decode_kernel(paged_decode_kernel)``) and judges the kernel's text, never the
object: it builds the kernel's module (the kernel and what it reads, as the cells last bind
them; ``kernel_source.kernel_module_from_cells``) and launches it in a process of its own
(``kernel_process``). The cells come from:

* when grading: the submitted notebook, read as text by the checker (``from_notebook``); the
  learner's process is never asked;
* in the lab: the cells this Jupyter kernel ran, in the order they ran (IPython's input
  history), so the kernel judged is the one defined now, whichever cells ran before and in
  whatever order; after Run All it is the notebook's text, as the grader reads it;
* elsewhere (a script, a test): the text of the file or notebook the kernel was defined in.

So the lab and the grader build the same module from the same notebook, by the same code.
"""

from __future__ import annotations

import ast
import linecache
from dataclasses import dataclass
from pathlib import Path

from ..notebook_cells import code_cells
from .kernel_source import KernelModule, kernel_module_from_cells

__all__ = ["KernelUnfinished", "LearnerKernel", "learner_kernel"]


class KernelUnfinished(Exception):
    """The kernel's body still raises NotImplementedError (the learner has not written it yet)."""


@dataclass(frozen=True)
class LearnerKernel:
    """A kernel's name and the cells its module is built from, with where they came from."""

    name: str
    cells: tuple[tuple[int, str], ...]  # (cell number, source), in the order they ran
    origin: str  # "07_paged_decode_kernel.ipynb", or "the cells this notebook ran"
    cell_word: str = "code cell"  # how a cell number reads in a message: "code cell 14", "In [12]"

    @classmethod
    def from_notebook(cls, path: str | Path, name: str) -> LearnerKernel:
        path = Path(path)
        return cls(name, tuple(code_cells(path)), path.name)

    @classmethod
    def from_text(cls, source: str, name: str, origin: str = "the kernel's source") -> LearnerKernel:
        return cls(name, ((1, source),), origin)

    def unfinished(self) -> bool:
        """Whether the last definition of the kernel still raises NotImplementedError."""
        found = None
        for _, source in self.cells:
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == self.name:
                    found = node
        if found is None:
            return False
        return any(
            isinstance(node, ast.Raise)
            and "NotImplementedError" in ast.unparse(node.exc if node.exc is not None else node)
            for node in ast.walk(found)
        )

    def module(self) -> KernelModule:
        """The kernel's module, validated. Raises ``KernelUnfinished``, or ``KernelSourceRefused``
        naming each line a kernel's module may not hold (or the kernel missing)."""
        if self.unfinished():
            raise KernelUnfinished(f"{self.name} still raises NotImplementedError")
        return kernel_module_from_cells(self.cells, [self.name], self.origin, self.cell_word)


def _history(namespace: dict) -> list[str] | None:
    """IPython's input history in ``namespace`` (its ``_ih``), when the kernel was defined there."""
    history = namespace.get("_ih")
    if isinstance(history, list) and all(isinstance(item, str) for item in history):
        return history
    return None


def learner_kernel(kernel: object, name: str | None = None) -> LearnerKernel:
    """The ``LearnerKernel`` of what a check was handed: a ``LearnerKernel`` as it is, or a
    ``@triton.jit`` function defined in a notebook (its history), a file or a loaded notebook.
    Raises TypeError for anything else, naming what it got."""
    if isinstance(kernel, LearnerKernel):
        return kernel
    fn = getattr(kernel, "fn", None)
    if fn is None or not callable(fn) or not hasattr(fn, "__code__"):
        what = type(kernel).__name__
        raise TypeError(
            f"a @triton.jit kernel was expected, got {what}: pass the kernel itself (the @triton.jit function)"
        )
    name = name or fn.__name__
    history = _history(fn.__globals__)
    if history is not None:
        return LearnerKernel(name, tuple(enumerate(history))[1:], "the cells this notebook ran", "In")
    filename = fn.__code__.co_filename
    notebook = filename.removesuffix(" (code cells)")  # how notebook_loader names a loaded notebook
    if notebook != filename and Path(notebook).is_file():
        return LearnerKernel.from_notebook(notebook, name)
    lines = linecache.getlines(filename)
    if not lines and Path(filename).is_file():
        lines = Path(filename).read_text().splitlines(keepends=True)
    if not lines:
        raise TypeError(f"the source of {name} cannot be read (defined from a string?): define it in a notebook cell")
    return LearnerKernel(name, ((1, "".join(lines)),), Path(filename).name, "part")
