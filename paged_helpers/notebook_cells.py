"""What of a notebook is loaded: its code cells, read as plain JSON, and which top-level statements are kept.

``raw_code_cells`` reads every nbformat version without nbformat (see its docstring);
``without_magics`` blanks IPython-only lines so a cell parses as Python; ``is_kept_definition``
says which statements ``notebook_loader`` runs (imports, functions, classes, and ``NAME =``
constant expressions: ``is_constant_expression``), and ``unimplemented_parts`` which of them
still raise NotImplementedError. Nothing here runs a learner's code.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "code_cells",
    "is_constant_expression",
    "is_kept_definition",
    "is_literal",
    "raw_code_cells",
    "unimplemented_parts",
    "without_magics",
]


def without_magics(source: str) -> str:
    """Blank out IPython-only lines (%magic, !shell) so the cell parses as Python."""
    kept = []
    for line in source.splitlines():
        stripped = line.lstrip()
        kept.append("" if stripped.startswith(("%", "!")) else line)
    return "\n".join(kept)


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def is_literal(node: ast.AST) -> bool:
    """Whether ``node`` is a literal (``ast.literal_eval`` reads it; nothing of it runs)."""
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
    if is_literal(node):
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


def unimplemented_parts(node: ast.stmt) -> list[str]:
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
    return [(index, without_magics(source)) for index, source in raw_code_cells(path)]


def raw_code_cells(path: Path) -> list[tuple[int, str]]:
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
