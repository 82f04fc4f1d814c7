"""A learner's Triton kernels as source the grader may compile: validated before any of it runs.

Compiling a kernel runs Python: its module's top-level statements, the decorators and default
arguments of its functions, and, inside Triton's code generator, every call the kernel's body
makes to something that is not a Triton builtin (``triton.compiler.compiler.os.system("...")``
would run, with a constant string, at compile time). So the GPU compile (``gpu_compile``) never
runs a kernel module that this module has not accepted, and the grader's compile takes the
kernel's source from the notebook, as text (``kernel_module_from_notebook``), never from the
learner's process.

A kernel module is accepted when it holds only (``KERNEL_CELL_RULES`` says it to a learner;
``RULES`` is the one statement, each refusal names the rule it breaks and the line):

* imports of ``triton``, ``triton.language`` and ``math`` (``from`` imports of their public names too);
* constants, ``NAME = <constant expression>`` (``notebook_cells.is_constant_expression``, the
  same rule by which a notebook's definitions keep a constant): a literal, ``float("<text>")``,
  ``math.<number>`` (``math.pi``, ``math.inf``), ``-`` or ``+`` before one of those, optionally
  inside ``tl.constexpr(...)``; ``float`` is the builtin, ``math`` and ``tl`` the imported modules;
  nothing else computed (``2 ** 10`` is refused);
* ``@triton.jit`` functions (``@triton.jit(...)`` with literal keywords): no other decorator,
  literal defaults, annotations that are Triton's names (``tl.constexpr``) or builtin types;
  bodies of kernel code: assignments, ``if``/``for``/``while``/``return``/``assert``,
  expressions over their own locals, the module's names, the builtins Triton gives kernels
  (``range``, ``float``, ``int``, ``min``, ``max``, ``len``, ``print``), and Triton's or math's
  public names reached through the imported modules (``tl.load``, ``tl.math.exp``, ``math.pi``);
  no nested function, class, lambda, import, ``try``, ``with``, comprehension or ``global``;
* attributes of values (a local, a constant, a call's result: anything but a chain from an
  imported module) only when the name is a public attribute of Triton's own value classes
  (``allowed_attributes()``: ``x.to(...)``, ``x.dtype.element_ty``, ``x.shape``, ``x.T``,
  ``x.reshape(...)``), never ``handle``: under Triton's interpreter a kernel's body runs as Python
  on numpy arrays, and ``x.handle.data.tofile(...)`` would reach the host;
* names (the module's, arguments, locals) may start with one ``_`` (``_attn_fwd``, ``_BLOCK``, as
  Triton's tutorials name them); no name, attribute or keyword starts with ``__`` anywhere, no
  attribute of Triton's or math's modules starts with ``_``, and no keyword argument starting with
  ``_`` is passed that is not an argument of the module's own functions (Triton's ``_semantic``).

Anything else is refused (``KernelSourceRefused``), with the line and the rule. The checks, read
from this module's text, are what a compile runs; the names a kernel reaches through ``tl`` and
``math`` are looked up on the real modules here (attribute reads of Triton's and math's own
modules, nothing of the learner's).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..notebook_cells import code_cells, is_kept_definition, is_literal
from .kernel_code import check_body
from .kernel_names import ANNOTATION_BUILTINS, KERNEL_BUILTINS, ModuleNames, allowed_attributes
from .kernel_rules import (
    KERNEL_CELL_RULES,
    RULES,
    WHAT_IS_ALLOWED,
    KernelModule,
    KernelSourceRefused,
    Refusals,
    first_line,
)
from .kernel_top_level import check_constant, check_header, check_import

__all__ = [
    "KERNEL_CELL_RULES",
    "KernelModule",
    "KernelSourceRefused",
    "RULES",
    "WHAT_IS_ALLOWED",
    "allowed_attributes",
    "kernel_module_from_cells",
    "kernel_module_from_notebook",
    "validate_kernel_module",
]


def validate_kernel_module(module: KernelModule | str) -> None:
    """Raise ``KernelSourceRefused`` naming every line of ``module`` that a compile would run and a
    kernel module may not hold (see the module docstring). Nothing of ``module`` runs here."""
    module = KernelModule(module) if isinstance(module, str) else module
    try:
        tree = ast.parse(module.source)
    except SyntaxError as error:
        raise KernelSourceRefused(f"{module.where(error.lineno or 0)}: a syntax error ({error.msg})") from None
    refusals = Refusals(module.where)
    _check_module(ModuleNames(refusals), tree)
    if refusals.problems:
        raise KernelSourceRefused(refusals.message())


def _check_module(names: ModuleNames, tree: ast.Module) -> None:
    """The module's shape: a docstring, imports, constants and functions at the top level, nothing
    else; every top-level name bound before any kernel's body is read (a body may call a kernel
    defined below it)."""
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and type(node.value.value) is str:
            continue  # a docstring
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            check_import(names, node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            check_constant(names, node)
        elif isinstance(node, ast.FunctionDef):
            names.bind(node, node.name)
            names.kernels.add(node.name)
            arguments = node.args
            names.parameters |= {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
        else:
            names.refuse(node, f"`{first_line(node)}` runs when the module loads", "functions")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and check_header(names, node):
            check_body(names, node)


# -- the kernel module of a notebook ------------------------------------------------------------


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [alias.asname or alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [target.id for target in targets if isinstance(target, ast.Name)]


def _global_names(node: ast.stmt) -> set[str]:
    """The names ``node`` reads that it does not bind itself (a function's locals are its own)."""
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        arguments = node.args
        loads -= {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
        loads -= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return loads


@dataclass(frozen=True)
class _Statement:
    cell: int
    first_line: int  # in the cell, 1-based, decorators included
    text: str


def _statement(cell: int, source: str, node: ast.stmt, shared_lines: set[int]) -> _Statement:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    lines = source.splitlines()[first - 1 : node.end_lineno]
    if shared_lines & set(range(first, node.end_lineno + 1)):
        return _Statement(cell, first, ast.unparse(node))  # `import a; import b`: this statement alone
    return _Statement(cell, first, "\n".join(lines))


@dataclass(frozen=True)
class _Origin:
    """Where the cells came from, as messages say it ("07_paged_decode_kernel.ipynb, code cell 14")."""

    name: str
    cell_word: str


def kernel_module_from_notebook(path: str | Path, kernels: Iterable[str]) -> KernelModule:
    """The module of ``kernels`` (names of @triton.jit functions) as the notebook at ``path`` defines
    them, read as text: each kernel's top-level definition and what it reads, as the notebook last
    binds it among the statements its definitions load with (``notebook_loader``). Validated; raises
    ``KernelSourceRefused`` when a kernel is missing or its module holds what a compile would run."""
    path = Path(path)
    return kernel_module_from_cells(code_cells(path), kernels, path.name)


def kernel_module_from_cells(
    cells: Iterable[tuple[int, str]], kernels: Iterable[str], origin: str, cell_word: str = "code cell"
) -> KernelModule:
    """``kernel_module_from_notebook`` for cells given as (number, source), in the order they ran
    (a notebook's code cells, or the cells a Jupyter kernel ran); ``origin`` and ``cell_word`` say in
    messages where they came from ("07_paged_decode_kernel.ipynb, code cell 14, line 3")."""
    where_from = _Origin(origin, cell_word)
    bindings, unparsed = _last_bindings(cells, where_from)
    module = _assembled(_chosen(bindings, unparsed, sorted(kernels), where_from), where_from)
    validate_kernel_module(module)
    return module


def _last_bindings(
    cells: Iterable[tuple[int, str]], origin: _Origin
) -> tuple[dict[str, tuple[ast.stmt, _Statement]], list[str]]:
    """Each name's last binding among the statements a notebook's definitions load with, and a line
    for each cell with a syntax error (it defines nothing: it never ran)."""
    bindings: dict[str, tuple[ast.stmt, _Statement]] = {}
    unparsed: list[str] = []
    for cell, source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError as error:
            unparsed.append(
                f"{origin.name}, {origin.cell_word} {cell}, line {error.lineno}: a syntax error ({error.msg})"
            )
            continue
        starts: dict[int, int] = {}
        for node in tree.body:
            for line in range(node.lineno, node.end_lineno + 1):
                starts[line] = starts.get(line, 0) + 1
        shared = {line for line, count in starts.items() if count > 1}
        for node in tree.body:
            if is_kept_definition(node):
                for name in _bound_names(node):
                    bindings[name] = (node, _statement(cell, source, node, shared))
    return bindings, unparsed


def _chosen(
    bindings: dict[str, tuple[ast.stmt, _Statement]], unparsed: list[str], kernels: list[str], origin: _Origin
) -> dict[str, _Statement]:
    """The statements the kernels need, by each name they bind: the kernels' definitions and, in turn,
    those of every name they read. Raises when a kernel is missing or comes from another notebook."""
    wanted, chosen, problems = list(kernels), {}, []
    while wanted:
        name = wanted.pop()
        if name in chosen or name in KERNEL_BUILTINS | ANNOTATION_BUILTINS and name not in bindings:
            continue
        if name not in bindings:  # the validation names the kernel that uses it, and where
            if name in kernels:
                problems.append(f"{name} is not defined at the top level of {origin.name}")
                problems += unparsed
            continue
        node, statement = bindings[name]
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and not is_literal(node.value):
            func = node.value.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == "load_from_notebook":
                problems.append(
                    f"{origin.name}, {origin.cell_word} {statement.cell}: {name} comes from another notebook "
                    "(load_from_notebook); the GPU compile reads the kernels a notebook defines: define it in this one"
                )
                continue
        for bound in _bound_names(node):
            chosen[bound] = statement
        wanted += sorted(_global_names(node))
    if problems:
        raise KernelSourceRefused("\n".join(problems))
    return chosen


def _assembled(chosen: dict[str, _Statement], origin: _Origin) -> KernelModule:
    """The chosen statements as one module, in the order they ran; each of its lines names its cell."""
    pieces, origins, line = [], [], 1
    for statement in sorted(set(chosen.values()), key=lambda s: (s.cell, s.first_line)):
        count = statement.text.count("\n") + 1
        origins.append((line, statement))
        pieces.append(statement.text)
        line += count + 1
    source = "\n\n".join(pieces) + "\n"

    defines: dict[_Statement, str] = {}  # the first name each statement binds: how a learner finds its cell
    for bound, statement in chosen.items():
        defines.setdefault(statement, bound)

    def where(number: int) -> str:
        for start, statement in reversed(origins):
            if number >= start:
                return (
                    f"{origin.name}, {origin.cell_word} {statement.cell} (the cell defining {defines[statement]}), "
                    f"line {statement.first_line + number - start}"
                )
        return origin.name

    return KernelModule(source, where)
