"""Carry a learner's work forward: take named definitions out of an earlier notebook.

Notebook 03's cache uses the allocator the learner wrote in notebook 02, and so on. This
module reads a notebook file, keeps only the top-level imports, functions, classes and
constants of its code cells (``NAME = 16``, ``NEG_INF = tl.constexpr(float("-inf"))``: see
``is_constant_expression``; never its demos, prints or tests), runs those in a fresh module, and
hands back the names asked for.

Where it looks, in order (``find_notebook``):
  1. the folders given in ``search``;
  2. the current folder (the course's ``notebooks/`` folder, or a release where all
     notebooks sit side by side);
  3. during ``nbgrader autograde``, when the current folder is
     autograded/<student>/<assignment>/: the student's submission,
     ``../../../submitted/<student>/<stem>/`` (never a stale autograded copy);
  4. sibling assignment folders ``../<stem>/<stem>.ipynb``: nbgrader's layout, where each
     notebook is an assignment of its own (source/, release/, submitted/<student>/ and
     autograded/<student>/ all look like this).

The fallback (``load_from_notebook``): when the learner's definition is missing, cannot be
loaded or is unfinished, the course's *published* solution of that notebook is used instead,
if there is one: ``published/<stem>.ipynb`` in the current folder or one of its three parents
(the repository root seen from ``workspace/``; the course root seen from
``autograded/<student>/<assignment>/``). Only ``course.py publish`` writes there, after the
assignment's deadline (a self-learner runs ``make publish NB=<stem>``). An unpublished
solution is never a fallback: this module reads no other folder for one. Every call prints
which implementation it used.
"""

from __future__ import annotations

import ast
import json
import linecache
import math
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

__all__ = ["NotebookLoadError", "Unavailable", "find_notebook", "load_definitions", "load_from_notebook"]


class NotebookLoadError(ImportError):
    """A notebook or a name in it could not be used. The message says what to do."""


def find_notebook(name: str, search: Iterable[str | Path] = ()) -> Path:
    """The path of notebook ``name`` (with or without .ipynb), searched as the module says."""
    stem = name.removesuffix(".ipynb")
    filename = f"{stem}.ipynb"
    here = Path.cwd()
    candidates: list[Path] = []
    for folder in [*search, *reversed(_LOADING_FROM)]:
        folder = Path(folder)
        candidates += [folder / filename, folder / stem / filename]
    candidates.append(here / filename)
    if here.parent.parent.name == "autograded":
        # The submission is the truth: an autograded copy of an earlier notebook can be stale
        # when a student resubmitted it and only this notebook is being regraded.
        student = here.parent.name
        candidates.append(here.parent.parent.parent / "submitted" / student / stem / filename)
    candidates.append(here.parent / stem / filename)
    for path in candidates:
        if path.is_file():
            return path.resolve()
    tried = "\n  ".join(str(p) for p in dict.fromkeys(candidates))
    raise NotebookLoadError(
        f"notebook {filename} not found. Looked in:\n  {tried}\n"
        f"What to do: put your {filename} in the same folder as this notebook (in the course: workspace/, "
        f"which `make lab` fills), or pass its folder: load_from_notebook({stem!r}, ..., search=['its/folder'])."
    )


PUBLISHED = "published"


def find_published(name: str) -> Path | None:
    """The course's published solution of notebook ``name``, if it has been published (see the module)."""
    filename = f"{name.removesuffix('.ipynb')}.ipynb"
    here = Path.cwd()
    for folder in [here, *list(here.parents)[:3]]:
        path = folder / PUBLISHED / filename
        if path.is_file():
            return path.resolve()
    return None


def _cell_source_without_magics(source: str) -> str:
    """Blank out IPython-only lines (%magic, !shell) so the cell parses as Python."""
    kept = []
    for line in source.splitlines():
        stripped = line.lstrip()
        kept.append("" if stripped.startswith(("%", "!")) else line)
    return "\n".join(kept)


# Folders of the notebooks whose definitions are being run right now (innermost last).
_LOADING_FROM: list[Path] = []

_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False  # TypeError: {[1]: 2}, an unhashable key
    return True


def _is_math_number(name: str) -> bool:
    """``math.NAME`` is one of math's number constants (pi, e, tau, inf, nan)."""
    value = getattr(math, name, None) if not name.startswith("_") else None
    return type(value) in (int, float)


def _is_constexpr_callee(node: ast.AST) -> bool:
    """``constexpr``, ``tl.constexpr``, ``triton.language.constexpr``: a name or a chain of names."""
    if isinstance(node, ast.Name):
        return node.id == "constexpr"
    if not isinstance(node, ast.Attribute) or node.attr != "constexpr":
        return False
    node = node.value
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def is_constant_expression(node: ast.AST, names_ok: Callable[[str, ast.expr], bool] | None = None) -> bool:
    """A value a constant may hold (the one rule, for this loader and for a kernel module's validation):

    * a literal (``16``, ``-1e30``, ``"cuda"``, ``(1, 2)``);
    * ``float("<text>")`` of a string that ``float`` reads (``float("-inf")``);
    * ``math.NAME`` for one of math's number constants (``math.pi``, ``math.inf``);
    * ``-`` or ``+`` before a number of those three kinds (``-float("inf")``, ``-math.inf``);
    * one of those inside Triton's constexpr: ``tl.constexpr(...)``, ``triton.language.constexpr(...)``.

    Nothing else is computed. Here the test is of the text only: ``names_ok(what, node)``, when
    given, is asked whether each name the value reads is what the text says it is (``what`` is
    "constexpr" for the wrapper's callee, "float" for the name ``float``, "math" for ``math``);
    the kernel validation answers from the module's imports. Nothing of ``node`` runs here."""
    if isinstance(node, ast.Call) and _is_constexpr_callee(node.func) and len(node.args) == 1 and not node.keywords:
        return _is_plain_constant(node.args[0], names_ok) and (names_ok is None or names_ok("constexpr", node.func))
    return _is_plain_constant(node, names_ok)


def _is_plain_constant(node: ast.AST, names_ok, signed: bool = False) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _is_plain_constant(node.operand, names_ok, signed=True)
    if _is_literal(node):
        return not signed or type(ast.literal_eval(node)) in (int, float)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "float"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and type(node.args[0].value) is str
    ):
        try:
            float(node.args[0].value)
        except ValueError:
            return False
        return names_ok is None or names_ok("float", node.func)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math":
        return _is_math_number(node.attr) and (names_ok is None or names_ok("math", node.value))
    return False


def _is_constant_assignment(node: ast.stmt) -> bool:
    """NAME = a constant expression (BLOCK_SIZE = 16, NEG_INF = tl.constexpr(float("-inf")), see
    ``is_constant_expression``): kept, since definitions may refer to it. Any name but a dunder one
    (``__name__ = ...`` would rename the loaded module)."""
    if isinstance(node, ast.AnnAssign):
        targets, value = [node.target], node.value
    elif isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    else:
        return False
    if value is None or not all(isinstance(t, ast.Name) and not t.id.startswith("__") for t in targets):
        return False
    return is_constant_expression(value)


def _is_earlier_notebook_import(node: ast.stmt) -> bool:
    """NAME = load_from_notebook(...): kept, so notebook 03 can load 02's allocator in turn."""
    if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
        return False
    func = node.value.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return called == "load_from_notebook"


def _still_unimplemented(node: ast.AST) -> bool:
    """True if a function's body (not nested functions) raises NotImplementedError."""
    for child in ast.walk(node):
        if isinstance(child, ast.Raise) and child.exc is not None:
            exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def is_kept_definition(node: ast.stmt) -> bool:
    """A top-level statement ``load_definitions`` runs: an import, a function or class, a constant,
    or an earlier notebook's name. Nothing else of a notebook runs when its definitions load."""
    return isinstance(node, _DEFINITIONS) or _is_constant_assignment(node) or _is_earlier_notebook_import(node)


def _unimplemented_parts(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.name] if _still_unimplemented(node) else []
    if isinstance(node, ast.ClassDef):
        return [
            f"{node.name}.{item.name}"
            for item in node.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _still_unimplemented(item)
        ]
    return []


def code_cells(path: Path) -> list[tuple[int, str]]:
    """(index among all cells, source with IPython-only lines blanked) of each code cell at ``path``."""
    return [(index, _cell_source_without_magics(source)) for index, source in _code_cells(path)]


def _code_cells(path: Path) -> list[tuple[int, str]]:
    """(index among all cells, source) of each code cell of the notebook at ``path``.

    Every format is read as plain JSON, never through nbformat: ``nbformat.read`` validates
    against the schema, and importing that validator (jsonschema's format checkers) costs over a
    second of CPU in every process that loads a notebook (each grading kernel, each second
    opinion). Importing nbformat also changes the import system (``six`` appends its importer to
    ``sys.meta_path``), and the grader's clean run takes any change made while a submission's
    definitions load for an import hook of the student's. Versions 2 and 3 keep their cells in
    ``worksheets`` (flattened in order, as nbformat's conversion does) and a code cell's text in
    ``input``; version 4 (and later) in ``cells`` and ``source``.
    """
    with open(path, encoding="utf-8") as handle:
        notebook = json.load(handle)
    if not isinstance(notebook, dict) or not isinstance(notebook.get("nbformat"), int):
        raise ValueError("not a notebook (no nbformat version)")
    version = notebook["nbformat"]
    if version in (2, 3):
        worksheets = notebook.get("worksheets", [])
        if not isinstance(worksheets, list) or not all(isinstance(sheet, dict) for sheet in worksheets):
            raise ValueError(f"its 'worksheets' (nbformat {version}) is not a list of worksheets")
        cells = [cell for sheet in worksheets for cell in sheet.get("cells", [])]
        text_key = "input"
    elif version >= 4:
        cells = notebook.get("cells")
        text_key = "source"
    else:
        raise ValueError(f"nbformat {version} is older than this course reads (2 and later)")
    if not isinstance(cells, list):
        raise ValueError("its cells are not a list")
    found = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get(text_key, "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            raise ValueError(f"cell {index} has a source that is not text")
        found.append((index, source))
    return found


def load_definitions(path: str | Path, module_name: str | None = None) -> types.ModuleType:
    """Run a notebook's top-level definitions in a fresh module and return it.

    The module is registered in ``sys.modules`` under ``module_name`` (default
    ``learner_<stem>``) so that classes defined there pickle and show a readable name.
    Its attribute ``__unimplemented__`` lists the functions and methods that still raise
    NotImplementedError.
    """
    path = Path(path)
    try:
        cells = _code_cells(path)
    except Exception as error:
        raise NotebookLoadError(
            f"{path} could not be read as a notebook: {error}. Open it in JupyterLab and save it again, or for a "
            "fresh copy rename it and run `make lab` (your other notebooks are left as they are)."
        ) from error
    module_name = module_name or "learner_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    unimplemented: list[str] = []
    kept: list[ast.stmt] = []
    # All code cells, one after another: line numbers and linecache point into this text, so
    # tracebacks show the learner's lines and Triton (which reads a kernel's source) works.
    cell_sources: list[str] = []
    for index, cell_source in cells:
        source = _cell_source_without_magics(cell_source)
        try:
            tree = ast.parse(source, filename=f"{path.name}[cell {index}]")
        except SyntaxError as error:
            raise NotebookLoadError(
                f"{path.name}, code cell {index}, line {error.lineno}: a syntax error ({error.msg}). "
                "Fix that cell so the notebook's definitions can be loaded."
            ) from error
        ast.increment_lineno(tree, sum(piece.count("\n") + 1 for piece in cell_sources))
        cell_sources.append(source)
        for node in tree.body:
            if is_kept_definition(node):
                kept.append(node)
                unimplemented += _unimplemented_parts(node)
    filename = f"{path} (code cells)"
    text = "\n".join(cell_sources) + "\n"
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    module.__unimplemented__ = unimplemented
    sys.modules[module_name] = module
    # A nested load_from_notebook (03 loading 02) also searches beside this notebook.
    _LOADING_FROM.append(path.parent)
    try:
        for node in kept:
            code = compile(ast.Module(body=[node], type_ignores=[]), filename=filename, mode="exec")
            try:
                exec(code, module.__dict__)
            except NotebookLoadError as error:
                # An earlier notebook that cannot be used costs only what uses it: the names this
                # statement binds (and whatever is built on them) say why when they are used.
                for name in _bound_by(node):
                    module.__dict__[name] = Unavailable(name, path.name, str(error))
    except Exception as error:
        del sys.modules[module_name]
        raise NotebookLoadError(
            f"running the definitions of {path.name} failed with {type(error).__name__}: {error}. "
            f"Open {path.name}, run its cells to see where, fix it, save it, then run this cell again."
        ) from error
    finally:
        _LOADING_FROM.pop()
    return module


def _bound_by(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [target.id for target in targets if isinstance(target, ast.Name)]


class Unavailable:
    """A notebook's name whose definition needs an earlier notebook that could not be loaded.

    Loading the definitions goes on without it, so every check that does not need it still runs
    (09's kernels without 04's cache); calling it, subclassing it or reading its attributes raises
    the loader's error, naming the earlier notebook and what to do.
    """

    def __init__(self, name: str, notebook: str, reason: str):
        self._message = f"{name} in {notebook} could not be defined: {reason}"

    def _unavailable(self, *args: object, **kwargs: object):
        raise NotebookLoadError(self._message)

    __call__ = _unavailable

    def __mro_entries__(self, bases: tuple) -> tuple:
        raise NotebookLoadError(self._message)

    def __getattr__(self, attribute: str):
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        raise NotebookLoadError(self._message)

    def __repr__(self) -> str:
        return f"<unavailable: {self._message}>"


def load_from_notebook(
    notebook: str,
    names: str | Sequence[str],
    search: Iterable[str | Path] = (),
    allow_unimplemented: bool = True,
    use: str = "auto",
):
    """The named definitions from an earlier notebook: one object for one name, else a tuple.

    >>> BlockAllocator = load_from_notebook("02_block_allocator", "BlockAllocator")

    ``use``: "auto" (yours; the course's published solution where yours is missing, does not
    load or is unfinished), "yours" (never the published one) or "published" (the published
    one, e.g. when yours is finished but buggy and you want to get on). Prints one line saying
    which implementation it used.

    With neither a finished definition of yours nor a published one, an unfinished definition
    is returned with a printed note, so that notebook 04 still runs, and is graded, while 03 is
    unfinished: each check then says which earlier notebook to finish. Scripts that need
    working code pass ``allow_unimplemented=False`` to get a NotebookLoadError instead.
    Raises NotebookLoadError when a notebook or a name is missing and nothing was published.
    """
    if use not in ("auto", "yours", "published"):
        raise ValueError(f"use must be 'auto', 'yours' or 'published', got {use!r}")
    wanted = [names] if isinstance(names, str) else list(names)
    stem = notebook.removesuffix(".ipynb")
    published = find_published(stem) if use != "yours" else None
    if use == "published":
        if published is None:
            raise NotebookLoadError(
                f"{stem} has not been published yet: the course's solution of it becomes available after its "
                "deadline (instructors: `course.py publish`; self-learners: `make publish NB=...`). "
                f"Load your own with use='auto'."
            )
        return _published_definitions(published, wanted, names, reason="you asked for it (use='published')")
    try:
        path = find_notebook(notebook, search)
        module = load_definitions(path)
        missing = [name for name in wanted if not hasattr(module, name)]
        for name in wanted:
            value = getattr(module, name, None)
            if isinstance(value, Unavailable):
                value()  # raises why it could not be defined
    except NotebookLoadError as error:
        if published is None:
            raise
        return _published_definitions(published, wanted, names, reason=f"yours could not be used: {error}")
    if missing:
        if published is not None:
            reason = f"your {path.name} defines no `{missing[0]}`"
            return _published_definitions(published, wanted, names, reason=reason)
        raise NotebookLoadError(
            f"{path.name} defines no `{missing[0]}`. Define it at the top level of a code cell in that "
            "notebook (and keep its name), run that cell, then run this cell again."
        )
    unfinished = [
        part
        for name in wanted
        for part in module.__unimplemented__
        if part == name or part.startswith(f"{name}.")
    ]
    if unfinished:
        message = (
            f"{', '.join(f'`{n}`' for n in wanted)} in {path.name} is not finished: "
            f"{', '.join(unfinished)} still raise(s) NotImplementedError"
        )
        if published is not None:
            return _published_definitions(published, wanted, names, reason=message)
        if not allow_unimplemented:
            raise NotebookLoadError(message + f". Complete {path.stem} first, then come back here.")
        print(
            f"note: {message}. Complete {path.stem} first; the checks that use it say so until then. "
            "(Once the course publishes its solution of that notebook, it is used here instead.)"
        )
    else:
        print(f"using your {', '.join(f'`{n}`' for n in wanted)} from {path.name}")
    found = tuple(getattr(module, name) for name in wanted)
    return found[0] if isinstance(names, str) else found


def _published_definitions(path: Path, wanted: list[str], names: str | Sequence[str], reason: str):
    module = load_definitions(path, module_name="published_" + "".join(c if c.isalnum() else "_" for c in path.stem))
    missing = [name for name in wanted if not hasattr(module, name)]
    if missing:
        raise NotebookLoadError(f"the published {path.name} defines no `{missing[0]}`: ask your instructor.")
    again = "" if "use='published'" in reason else " Yours is used again as soon as it is finished."
    print(f"using the course's published {', '.join(f'`{n}`' for n in wanted)} from {path} ({reason}).{again}")
    found = tuple(getattr(module, name) for name in wanted)
    return found[0] if isinstance(names, str) else found
