"""Carry a learner's work forward: take named definitions out of an earlier notebook.

Notebook 03's cache uses the allocator the learner wrote in notebook 02, and so on. This
module reads a notebook file, keeps only the top-level imports, functions, classes and
constants of its code cells (``NAME = 16``, ``NEG_INF = tl.constexpr(float("-inf"))``: see
``is_constant_expression``; never its demos, prints or tests), runs those in a fresh module, and
hands back the names asked for. Reading the cells and the rules of what is kept are
``notebook_cells``; this module finds the notebook, runs what is kept and chooses between the
learner's definitions and the published solution.

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
import linecache
import sys
import types
from collections.abc import Iterable, Sequence
from pathlib import Path

from .notebook_cells import is_kept_definition, raw_code_cells, unimplemented_parts, without_magics

__all__ = [
    "NotebookLoadError",
    "Unavailable",
    "find_notebook",
    "load_definitions",
    "load_from_notebook",
]


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


# Folders of the notebooks whose definitions are being run right now (innermost last).
_LOADING_FROM: list[Path] = []


def load_definitions(path: str | Path, module_name: str | None = None) -> types.ModuleType:
    """Run a notebook's top-level definitions in a fresh module and return it.

    The module is registered in ``sys.modules`` under ``module_name`` (default
    ``learner_<stem>``) so that classes defined there pickle and show a readable name.
    Its attribute ``__unimplemented__`` lists the functions and methods that still raise
    NotImplementedError.
    """
    path = Path(path)
    cells = _readable_cells(path)
    module_name = module_name or "learner_" + "".join(c if c.isalnum() else "_" for c in path.stem)
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    kept, unimplemented, text = _kept_definitions(path, cells)
    filename = f"{path} (code cells)"
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    module.__unimplemented__ = unimplemented
    sys.modules[module_name] = module
    _run_definitions(module, kept, path, filename)
    return module


def _readable_cells(path: Path) -> list[tuple[int, str]]:
    """The notebook's code cells, or a NotebookLoadError that says how to get a readable file back."""
    try:
        return raw_code_cells(path)
    except Exception as error:
        raise NotebookLoadError(
            f"{path} could not be read as a notebook: {error}. Open it in JupyterLab and save it again, or for a "
            "fresh copy rename it and run `make lab` (your other notebooks are left as they are)."
        ) from error


def _kept_definitions(path: Path, cells: list[tuple[int, str]]) -> tuple[list[ast.stmt], list[str], str]:
    """(the kept top-level statements, the parts still unimplemented, the text of all code cells).

    All code cells, one after another: line numbers and linecache point into this text, so
    tracebacks show the learner's lines and Triton (which reads a kernel's source) works.
    """
    unimplemented: list[str] = []
    kept: list[ast.stmt] = []
    cell_sources: list[str] = []
    for index, cell_source in cells:
        source = without_magics(cell_source)
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
                unimplemented += unimplemented_parts(node)
    return kept, unimplemented, "\n".join(cell_sources) + "\n"


def _run_definitions(module: types.ModuleType, kept: list[ast.stmt], path: Path, filename: str) -> None:
    """Run each kept statement in ``module``; on a failure, unregister the module and say which notebook broke."""
    registered = module.__name__  # before the learner's statements run: one may bind __name__
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
        del sys.modules[registered]
        raise NotebookLoadError(
            f"running the definitions of {path.name} failed with {type(error).__name__}: {error}. "
            f"Open {path.name}, run its cells to see where, fix it, save it, then run this cell again."
        ) from error
    finally:
        _LOADING_FROM.pop()


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
        path, module, missing = _yours(notebook, search, wanted)
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
    unfinished = _unfinished_message(path, module, wanted)
    if unfinished and published is not None:
        return _published_definitions(published, wanted, names, reason=unfinished)
    _say_which_is_used(path, wanted, unfinished, allow_unimplemented)
    return _picked(module, wanted, names)


def _yours(notebook: str, search: Iterable[str | Path], wanted: list[str]) -> tuple[Path, types.ModuleType, list[str]]:
    """(the learner's notebook, its definitions, the wanted names it lacks); a NotebookLoadError if unusable."""
    path = find_notebook(notebook, search)
    module = load_definitions(path)
    missing = [name for name in wanted if not hasattr(module, name)]
    for name in wanted:
        value = getattr(module, name, None)
        if isinstance(value, Unavailable):
            value()  # raises why it could not be defined
    return path, module, missing


def _unfinished_message(path: Path, module: types.ModuleType, wanted: list[str]) -> str:
    """What of ``wanted`` still raises NotImplementedError, as a sentence; "" when all is finished."""
    unfinished = [
        part for name in wanted for part in module.__unimplemented__ if part == name or part.startswith(f"{name}.")
    ]
    if not unfinished:
        return ""
    return (
        f"{', '.join(f'`{n}`' for n in wanted)} in {path.name} is not finished: "
        f"{', '.join(unfinished)} still raise(s) NotImplementedError"
    )


def _say_which_is_used(path: Path, wanted: list[str], unfinished: str, allow_unimplemented: bool) -> None:
    """Print which implementation is used (yours, or yours unfinished); refuse unfinished work if asked to."""
    if not unfinished:
        print(f"using your {', '.join(f'`{n}`' for n in wanted)} from {path.name}")
        return
    if not allow_unimplemented:
        raise NotebookLoadError(unfinished + f". Complete {path.stem} first, then come back here.")
    print(
        f"note: {unfinished}. Complete {path.stem} first; the checks that use it say so until then. "
        "(Once the course publishes its solution of that notebook, it is used here instead.)"
    )


def _picked(module: types.ModuleType, wanted: list[str], names: str | Sequence[str]):
    """One object for one name, else a tuple in the order asked."""
    found = tuple(getattr(module, name) for name in wanted)
    return found[0] if isinstance(names, str) else found


def _published_definitions(path: Path, wanted: list[str], names: str | Sequence[str], reason: str):
    module = load_definitions(path, module_name="published_" + "".join(c if c.isalnum() else "_" for c in path.stem))
    missing = [name for name in wanted if not hasattr(module, name)]
    if missing:
        raise NotebookLoadError(f"the published {path.name} defines no `{missing[0]}`: ask your instructor.")
    again = "" if "use='published'" in reason else " Yours is used again as soon as it is finished."
    print(f"using the course's published {', '.join(f'`{n}`' for n in wanted)} from {path} ({reason}).{again}")
    return _picked(module, wanted, names)
