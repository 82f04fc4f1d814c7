"""Letting Run All reach the end of a notebook the learner has not finished yet.

A fresh notebook still holds ``raise NotImplementedError()`` where the learner's code goes.
The cells that *try* that code wrap it in ``try_it``:

    with ph.try_it():
        print(physical_slot([5, 1, 7], 3, 4))

When the learner's stub raises, the cell prints one line (what is unfinished, where to write
it) and Run All goes on. Only a NotImplementedError raised by a stub of the learner's (the
line ``raise NotImplementedError()`` in a notebook cell, this notebook's or an earlier one
loaded with ``load_from_notebook``) is swallowed: any other exception, or a
NotImplementedError from a library or from this package, is a real problem and still raises
where it happened.
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = ["UnfinishedStub", "try_it", "unfinished_stub"]

_PACKAGE_DIR = Path(__file__).resolve().parent
# What nbgrader leaves where the learner's code goes (generate_assignment's ClearSolutions).
_STUB_LINES = ("raise NotImplementedError()", "raise NotImplementedError")
# Code loaded from an earlier notebook carries this file name (see notebook_loader).
_LOADED_SUFFIX = ".ipynb (code cells)"


@dataclass(frozen=True)
class UnfinishedStub:
    """Where a learner's ``raise NotImplementedError()`` was hit."""

    name: str  # "physical_slot", "BlockAllocator.allocate"
    notebook: str | None  # "03_paged_kv_cache.ipynb" for an earlier notebook; None: this one

    def sentence(self) -> str:
        if self.notebook is not None:
            return (
                f"`{self.name}` in {self.notebook} is not implemented yet: finish it in that notebook, "
                "then run this cell again."
            )
        return (
            f"`{self.name}` is not implemented yet: write it in its cell above, in place of "
            "`raise NotImplementedError()`, run that cell, then this one."
        )


def _last_frame(traceback: TracebackType | None) -> TracebackType | None:
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    return traceback


def unfinished_stub(error: BaseException) -> UnfinishedStub | None:
    """The learner's stub that raised ``error``; None when it came from anywhere else.

    Follows ``raise ... from`` links: Triton's interpreter reports a stub inside a kernel as an
    InterpreterError caused by the stub's NotImplementedError.
    """
    seen = 0
    while error is not None and not isinstance(error, NotImplementedError) and seen < 5:
        error, seen = error.__cause__, seen + 1
    if not isinstance(error, NotImplementedError):
        return None
    last = _last_frame(error.__traceback__)
    if last is None:
        return None
    code = last.tb_frame.f_code
    filename = code.co_filename
    line = linecache.getline(filename, last.tb_lineno).strip()
    if line not in _STUB_LINES:  # a NotImplementedError with a message is deliberate, not a stub
        return None
    path = Path(filename)
    if filename.endswith(_LOADED_SUFFIX):
        notebook = Path(filename.removesuffix(" (code cells)")).name
    elif _in_notebook_cell(path):
        notebook = None
    else:
        return None
    name = getattr(code, "co_qualname", code.co_name)  # co_qualname: Python 3.11+
    owner = last.tb_frame.f_locals.get("self")
    if "." not in name and owner is not None:
        name = f"{type(owner).__name__}.{name}"
    return UnfinishedStub(name, notebook)


def _in_notebook_cell(path: Path) -> bool:
    """Code typed in a notebook: ipykernel names each cell's code after a temporary file."""
    try:
        resolved = path.resolve()
    except OSError:
        return False
    if resolved.is_relative_to(_PACKAGE_DIR) or "site-packages" in resolved.parts:
        return False
    return "ipykernel_" in path.parent.name or path.name.startswith("<ipython-input")


class try_it(contextlib.AbstractContextManager):
    """Run a "Try it" block; an unfinished stub of the learner's prints one line instead of raising.

    ``waiting`` names what needs the code (a plot, a widget, a demo), so the line says what the
    learner will see once the stub is written: ``with ph.try_it("the copy-on-write demo"):``.

    A skipped block leaves the names it would have made undefined, and the next "Try it" cell
    that uses one of them would stop Run All with a NameError. So a skipped block remembers
    the names its cell assigns (``_NOT_MADE``, for this kernel's lifetime), and a later block
    whose NameError is about one of them prints which stub it is waiting for instead. Any other
    NameError (a typo) still raises.
    """

    def __init__(self, waiting: str = "") -> None:
        self.waiting = waiting
        self._cell = None

    def __enter__(self) -> try_it:
        self._cell = sys._getframe(1).f_code.co_filename  # the cell this block is written in
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        prefix = f"{self.waiting} is waiting for your code. " if self.waiting else ""
        stub = unfinished_stub(error) if error is not None else None
        if stub is not None:
            for name in _assigned_names(self._cell):
                _NOT_MADE.setdefault(name, stub)
            print(f"{prefix}{stub.sentence()}")
            return True
        if isinstance(error, NameError) and getattr(error, "name", None) in _NOT_MADE:
            stub = _NOT_MADE[error.name]
            for name in _assigned_names(self._cell):  # what this cell would have made waits too
                _NOT_MADE.setdefault(name, stub)
            print(f"{prefix}`{error.name}` was not made, because {stub.sentence()[0].lower()}{stub.sentence()[1:]}")
            return True
        return False


# Names a skipped "Try it" cell would have assigned -> the stub that stopped it.
_NOT_MADE: dict[str, UnfinishedStub] = {}


def top_level_names(tree: ast.AST) -> set[str]:
    """Every name code binds where it runs: assignments and the names of functions and classes it
    defines, not what is assigned inside their bodies (tools/learner_cells.py uses it too)."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            if not isinstance(node, ast.Lambda):
                names.add(node.name)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _assigned_names(filename: str | None) -> set[str]:
    """Every name a cell's top-level code assigns (not inside its functions or classes)."""
    if filename is None:
        return set()
    source = "".join(linecache.getlines(filename))
    try:
        return top_level_names(ast.parse(source))
    except SyntaxError:
        return set()
