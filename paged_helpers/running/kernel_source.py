"""A learner's Triton kernels as source the grader may compile: validated before any of it runs.

Compiling a kernel runs Python: its module's top-level statements, the decorators and default
arguments of its functions, and, inside Triton's code generator, every call the kernel's body
makes to something that is not a Triton builtin (``triton.compiler.compiler.os.system("...")``
would run, with a constant string, at compile time). So the GPU compile (``gpu_compile``) never
runs a kernel module that this module has not accepted, and the grader's compile takes the
kernel's source from the notebook, as text (``kernel_module_from_notebook``), never from the
learner's process.

A kernel module is accepted when it holds only:

* imports of ``triton``, ``triton.language`` and ``math`` (``from`` imports of their names too);
* constants: ``NAME = literal`` or ``NAME = tl.constexpr(literal)``;
* ``@triton.jit`` functions (``@triton.jit(...)`` with literal keywords): no other decorator,
  literal defaults, annotations that are Triton's names (``tl.constexpr``) or builtin types;
  bodies of kernel code: assignments, ``if``/``for``/``while``/``return``/``assert``,
  expressions over their own locals, the module's names, the builtins Triton gives kernels
  (``range``, ``float``, ``int``, ``min``, ``max``, ``len``, ``print``), and Triton's or math's
  names reached through the imported modules (``tl.load``, ``tl.math.exp``, ``math.pi``);
  no name or attribute that starts with ``_``, no nested function, class, lambda, import,
  ``try``, ``with``, comprehension or ``global``.

Anything else is refused (``KernelSourceRefused``), with the line and what a kernel module may
hold. The checks, read from this module's text, are what a compile runs; the names a kernel
reaches through ``tl`` and ``math`` are looked up on the real modules here (attribute reads of
Triton's and math's own modules, nothing of the learner's).
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..notebook_loader import code_cells, is_kept_definition

__all__ = ["KernelSourceRefused", "KernelModule", "kernel_module_from_notebook", "validate_kernel_module"]

MODULES = ("triton", "triton.language", "triton.language.math", "math")
# The builtins Triton's code generator gives a kernel (print, min and max as Triton's own).
KERNEL_BUILTINS = frozenset({"range", "float", "int", "min", "max", "len", "print"})
ANNOTATION_BUILTINS = frozenset({"int", "float", "bool", "str"})
# Kernel code: the statements and expressions Triton compiles (anything else is refused).
STATEMENTS = (
    ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.If, ast.For, ast.While, ast.Return,
    ast.Pass, ast.Break, ast.Continue, ast.Assert,
)  # fmt: skip
EXPRESSIONS = (
    ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Compare, ast.Call, ast.Constant, ast.Attribute,
    ast.Subscript, ast.Slice, ast.Starred, ast.Name, ast.Tuple, ast.List, ast.JoinedStr, ast.FormattedValue,
    ast.keyword, ast.expr_context, ast.operator, ast.unaryop, ast.boolop, ast.cmpop,
)  # fmt: skip
WHAT_IS_ALLOWED = (
    "a kernel's module may hold only imports of triton, triton.language and math, constants "
    "(NAME = 16, NAME = tl.constexpr(16)) and @triton.jit functions of kernel code"
)


class KernelSourceRefused(ValueError):
    """A kernel's source holds something that compiling it would run. The message names it."""


@dataclass(frozen=True)
class KernelModule:
    """A kernel module's source, and where each of its lines came from (for messages)."""

    source: str
    where: Callable[[int], str] = staticmethod(lambda line: f"line {line}")


def _triton_objects() -> tuple:
    import triton

    return triton.cdiv, triton.next_power_of_2


def _is_jit(value: object) -> bool:
    return hasattr(value, "fn") and type(value).__name__ in ("JITFunction", "InterpretedFunction")


def _is_triton_name(value: object) -> bool:
    """Something of triton.language (a builtin, a dtype, a class, a @jit helper) or of math."""
    if isinstance(value, types.ModuleType):
        return value.__name__ in MODULES
    if _is_jit(value):
        return str(getattr(value.fn, "__module__", "")).startswith("triton.language")
    if any(value is allowed for allowed in _triton_objects()):
        return True
    if isinstance(value, (bool, int, float)):
        return True
    module = getattr(type(value) if not callable(value) else value, "__module__", "") or ""
    return module.startswith("triton.language") or module == "math"


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


class _Validator:
    def __init__(self, where: Callable[[int], str]):
        self.where = where
        self.problems: list[str] = []
        self.modules: dict[str, types.ModuleType] = {}  # module names bound by an import
        self.objects: dict[str, object] = {}  # names bound by ``from m import x``
        self.constants: set[str] = set()
        self.kernels: set[str] = set()

    def refuse(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"{self.where(getattr(node, 'lineno', 0))}: {text}")

    # -- names reached through the imported modules ----------------------------------------------

    def resolve(self, node: ast.AST, also: tuple = ()) -> object | None:
        """The object a chain like ``tl.math.exp`` names, when it starts at an imported module; None
        (and a refusal) when it leaves Triton's and math's names; None when it starts elsewhere."""
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.modules and node.id not in self.objects:
            return None
        value = self.modules.get(node.id, self.objects.get(node.id))
        reached = node.id
        for name in reversed(chain):
            if not isinstance(value, types.ModuleType):
                break  # an attribute of a Triton object (tl.float32.primitive_bitwidth): read by Triton
            try:
                value = getattr(value, name)
            except AttributeError:
                self.refuse(node, f"{reached}.{name} does not exist")
                return None
            reached += f".{name}"
            if not _is_triton_name(value) and not any(value is item for item in also):
                self.refuse(node, f"{reached} is not one of triton.language's or math's names")
                return None
        return value

    def names_triton(self, node: ast.AST, wanted: tuple) -> bool:
        """Whether ``node`` (a name or a chain from an imported module) is one of ``wanted``."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return False
        if isinstance(node, ast.Name) and node.id in self.objects:
            value = self.objects[node.id]
        else:
            value = self.resolve(node, also=wanted)
        return any(value is item for item in wanted)

    # -- the module's statements -----------------------------------------------------------------

    def module(self, tree: ast.Module) -> None:
        for node in tree.body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and type(node.value.value) is str:
                continue  # a docstring
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self.import_(node)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                self.constant(node)
            elif isinstance(node, ast.FunctionDef):
                self.bind(node, node.name)
                self.kernels.add(node.name)
            else:
                self.refuse(node, f"`{_first_line(node)}` runs when the module loads; {WHAT_IS_ALLOWED}")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.kernel(node)

    def bind(self, node: ast.AST, name: str) -> None:
        if name.startswith("_"):
            self.refuse(node, f"the name {name} starts with '_' (a kernel's module names nothing private)")
        elif name in self.modules or name in self.objects or name in self.constants or name in self.kernels:
            self.refuse(node, f"{name} is bound twice (a kernel's module binds each name once)")

    def import_(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in MODULES:
                    self.refuse(node, f"`import {alias.name}`: {WHAT_IS_ALLOWED}")
                    continue
                importlib.import_module(alias.name)  # Triton's or math's own modules
                bound = alias.asname or alias.name.split(".")[0]
                module = importlib.import_module(alias.name if alias.asname else bound)
                if self.modules.get(bound) is module:
                    continue  # import triton, then import triton.language: the same name, the same module
                self.bind(node, bound)
                self.modules[bound] = module
            return
        if node.level or node.module not in MODULES:
            self.refuse(node, f"`from {'.' * node.level}{node.module or ''} import ...`: {WHAT_IS_ALLOWED}")
            return
        module = importlib.import_module(node.module)
        for alias in node.names:
            bound = alias.asname or alias.name
            if alias.name == "*" or alias.name.startswith("_"):
                self.refuse(node, f"`from {node.module} import {alias.name}`: import the names a kernel uses")
                continue
            try:
                value = getattr(module, alias.name)
            except AttributeError:
                try:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    self.refuse(node, f"{node.module} has no name {alias.name}")
                    continue
            if not _is_triton_name(value) and value is not getattr(module, "jit", None):
                self.refuse(node, f"{node.module}.{alias.name} is not one of triton.language's or math's names")
                continue
            self.bind(node, bound)
            if isinstance(value, types.ModuleType):
                self.modules[bound] = value
            else:
                self.objects[bound] = value

    def constant(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(target, ast.Name) for target in targets) or node.value is None:
            self.refuse(node, f"`{_first_line(node)}`: {WHAT_IS_ALLOWED}")
            return
        if isinstance(node, ast.AnnAssign):
            self.annotation(node.annotation)
        if not self.constant_value(node.value):
            self.refuse(node, f"`{_first_line(node)}` computes a value when the module loads; a constant is a literal")
            return
        for target in targets:
            self.bind(node, target.id)
            self.constants.add(target.id)

    def constant_value(self, node: ast.AST) -> bool:
        if _literal(node):
            return True
        import triton.language as tl

        return (
            isinstance(node, ast.Call)
            and len(node.args) == 1
            and not node.keywords
            and _literal(node.args[0])
            and self.names_triton(node.func, (tl.constexpr,))
        )

    def annotation(self, node: ast.AST | None) -> None:
        if node is None or isinstance(node, ast.Constant) and isinstance(node.value, str):
            return  # a string annotation is never evaluated
        if isinstance(node, ast.Name) and node.id in ANNOTATION_BUILTINS:
            return
        if isinstance(node, (ast.Name, ast.Attribute)) and (self.resolve(node) is not None or self.problems):
            return
        self.refuse(node, f"the annotation `{ast.unparse(node)}`: an annotation names a Triton type (tl.constexpr)")

    # -- one @triton.jit function ----------------------------------------------------------------

    def kernel(self, node: ast.FunctionDef) -> None:
        import triton

        name = node.name
        if not node.decorator_list:
            self.refuse(
                node,
                f"{name} is a function without @triton.jit: a kernel calls only @triton.jit functions, and "
                "its module holds no other",
            )
            return
        if len(node.decorator_list) != 1 or not self.jit_decorator(node.decorator_list[0], triton.jit):
            shown = ", ".join(f"@{ast.unparse(d)}" for d in node.decorator_list)
            self.refuse(node, f"{name}'s decorators ({shown}): a kernel has exactly one decorator, @triton.jit")
        arguments = node.args
        if arguments.vararg or arguments.kwarg:
            self.refuse(node, f"{name} takes *args or **kwargs (a kernel names its arguments)")
        for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
            if not _literal(default):
                self.refuse(
                    default,
                    f"{name}'s default `{ast.unparse(default)}` is computed when the module loads; a "
                    "default is a literal",
                )
        parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        for parameter in parameters:
            if parameter.arg.startswith("_"):
                self.refuse(parameter, f"{name}'s argument {parameter.arg} starts with '_'")
            self.annotation(parameter.annotation)
        self.annotation(node.returns)
        if getattr(node, "type_params", None):
            self.refuse(node, f"{name} has type parameters")
        local = {parameter.arg for parameter in parameters}
        for child in ast.walk(ast.Module(body=node.body, type_ignores=[])):
            if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
                local.add(child.id)
        for statement in node.body:
            self.body(statement, name, local)

    def jit_decorator(self, node: ast.AST, jit: object) -> bool:
        if isinstance(node, ast.Call):
            return (
                not node.args
                and all(keyword.arg and _literal(keyword.value) for keyword in node.keywords)
                and self.names_triton(node.func, (jit,))
            )
        return self.names_triton(node, (jit,))

    def body(self, statement: ast.stmt, kernel: str, local: set[str]) -> None:
        inner = set()  # Attributes that are the first part of a longer chain (tl.math of tl.math.exp)
        for node in ast.walk(statement):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                inner.add(id(node.value))
        for node in ast.walk(statement):
            if isinstance(node, ast.stmt) and not isinstance(node, STATEMENTS):
                self.refuse(node, f"{kernel}: `{_first_line(node)}` is not kernel code")
            elif isinstance(node, ast.expr) and not isinstance(node, EXPRESSIONS):
                self.refuse(node, f"{kernel}: `{_first_line(node)}` is not kernel code")
            elif isinstance(node, ast.Attribute):
                if node.attr.startswith("_"):
                    self.refuse(node, f"{kernel}: `{ast.unparse(node)}` reads a private attribute")
                elif id(node) not in inner:
                    self.resolve(node)  # refuses a chain that leaves Triton's and math's names
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                self.name(node, kernel, local)

    def name(self, node: ast.Name, kernel: str, local: set[str]) -> None:
        known = (self.modules, self.objects, self.constants, self.kernels, local)
        if node.id.startswith("_"):
            self.refuse(node, f"{kernel}: the name {node.id} starts with '_'")
        elif not any(node.id in names for names in known) and node.id not in KERNEL_BUILTINS:
            self.refuse(
                node,
                f"{kernel} uses {node.id}, which is not a local, a constant, a @triton.jit function or an "
                "import of its module (nor one of range, float, int, min, max, len, print)",
            )


def validate_kernel_module(module: KernelModule | str) -> None:
    """Raise ``KernelSourceRefused`` naming every line of ``module`` that a compile would run and a
    kernel module may not hold (see the module docstring). Nothing of ``module`` runs here."""
    module = KernelModule(module) if isinstance(module, str) else module
    try:
        tree = ast.parse(module.source)
    except SyntaxError as error:
        raise KernelSourceRefused(f"{module.where(error.lineno or 0)}: a syntax error ({error.msg})") from None
    validator = _Validator(module.where)
    validator.module(tree)
    if validator.problems:
        raise KernelSourceRefused("\n".join(dict.fromkeys(validator.problems)))


def _first_line(node: ast.AST) -> str:
    return ast.unparse(node).splitlines()[0][:120]


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


def kernel_module_from_notebook(path: str | Path, kernels: Iterable[str]) -> KernelModule:
    """The module of ``kernels`` (names of @triton.jit functions) as the notebook at ``path`` defines
    them, read as text: each kernel's top-level definition and what it reads, as the notebook last
    binds it among the statements its definitions load with (``notebook_loader``). Validated; raises
    ``KernelSourceRefused`` when a kernel is missing or its module holds what a compile would run."""
    path = Path(path)
    bindings: dict[str, tuple[ast.stmt, _Statement]] = {}
    for cell, source in code_cells(path):
        try:
            tree = ast.parse(source)
        except SyntaxError as error:
            raise KernelSourceRefused(
                f"{path.name}, code cell {cell}, line {error.lineno}: a syntax error ({error.msg})"
            ) from None
        starts: dict[int, int] = {}
        for node in tree.body:
            for line in range(node.lineno, node.end_lineno + 1):
                starts[line] = starts.get(line, 0) + 1
        shared = {line for line, count in starts.items() if count > 1}
        for node in tree.body:
            if is_kept_definition(node):
                for name in _bound_names(node):
                    bindings[name] = (node, _statement(cell, source, node, shared))
    kernels = sorted(kernels)
    wanted, chosen, problems = list(kernels), {}, []
    while wanted:
        name = wanted.pop()
        if name in chosen or name in KERNEL_BUILTINS | ANNOTATION_BUILTINS and name not in bindings:
            continue
        if name not in bindings:  # the validation names the kernel that uses it, and where
            if name in kernels:
                problems.append(f"{name} is not defined at the top level of {path.name}")
            continue
        node, statement = bindings[name]
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and not _literal(node.value):
            func = node.value.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == "load_from_notebook":
                problems.append(
                    f"{path.name}, code cell {statement.cell}: {name} comes from another notebook "
                    "(load_from_notebook); the GPU compile reads the kernels a notebook defines: define it in this one"
                )
                continue
        for bound in _bound_names(node):
            chosen[bound] = statement
        wanted += sorted(_global_names(node))
    if problems:
        raise KernelSourceRefused("\n".join(problems))
    pieces, origins, line = [], [], 1
    for statement in sorted(set(chosen.values()), key=lambda s: (s.cell, s.first_line)):
        count = statement.text.count("\n") + 1
        origins.append((line, statement))
        pieces.append(statement.text)
        line += count + 1
    source = "\n\n".join(pieces) + "\n"

    def where(number: int) -> str:
        for start, statement in reversed(origins):
            if number >= start:
                return f"{path.name}, code cell {statement.cell}, line {statement.first_line + number - start}"
        return f"{path.name}"

    module = KernelModule(source, where)
    validate_kernel_module(module)
    return module
