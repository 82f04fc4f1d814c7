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
* constants, ``NAME = <constant expression>`` (``notebook_loader.is_constant_expression``, the
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
import functools
import importlib
import math
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..notebook_loader import code_cells, is_constant_expression, is_kept_definition

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
# The rules, once: each refusal names its rule; ``KERNEL_CELL_RULES`` (for a learner, one line a
# rule) and ``WHAT_IS_ALLOWED`` (one sentence) are these words, put together.
RULES = {
    "imports": "Imports: only triton, triton.language and math.",
    "constants": (
        'Constants: NAME = a literal, float("-inf"), math.pi or math.inf, - or + before one, optionally '
        "inside tl.constexpr(...); nothing computed (not 2 ** 10)."
    ),
    "functions": (
        "Functions: only @triton.jit ones (that one decorator), with literal defaults and annotations "
        "like tl.constexpr; nothing else runs at the top level."
    ),
    "kernel code": (
        "Kernel code: assignments, if/for/while/return/assert over locals, constants, tl.*/math.* names, "
        "@triton.jit functions and range, float, int, min, max, len, print; a value's attributes only "
        "Triton's own (x.dtype, x.shape, x.T, x.to(...)), never x.handle."
    ),
    "names": (
        "Names: one leading _ is fine (_attn_fwd, _BLOCK); no name, attribute or keyword starts with __; "
        "each top-level name is bound once."
    ),
}
KERNEL_CELL_RULES = "\n".join(RULES.values())
WHAT_IS_ALLOWED = "a kernel's module may hold only what these rules allow: " + " ".join(RULES.values())


def _refusal(problems: list[tuple[str, str]]) -> str:
    """Each problem's line, naming its rule (``(rule: constants)``), then each rule named, stated once."""
    lines = dict.fromkeys(f"{text} (rule: {rule})" for text, rule in problems)
    rules = dict.fromkeys(rule for _, rule in problems)
    return "\n".join([*lines, "The rules of a kernel cell that these lines break:", *(RULES[r] for r in rules)])


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


# Attributes that would hand a kernel's Python (under Triton's interpreter, its body runs as
# Python) the host's objects, taken out of what the value classes offer: a tensor's ``handle`` is
# its IR value when compiling and, interpreted, a TensorHandle whose ``data`` is the numpy array
# itself (``x.handle.data.tofile("/tmp/f")``, ``x.handle.data.ctypes``).
HOST_ATTRIBUTES = frozenset({"handle"})
# The instance attributes kernels read (set in ``__init__``, so in no class's ``dir()``): read from
# instances below; these, if another Triton's constructors differ from the ones called there.
_INSTANCE_ATTRIBUTES = frozenset({"dtype", "shape", "numel", "type", "element_ty", "value", "name"})


@functools.cache
def allowed_attributes() -> frozenset[str]:
    """The attribute names a kernel may read on a value (anything but a chain from an imported
    module): the public names (no leading ``_``) in ``dir()`` of Triton's value classes,
    ``triton.language``'s ``tensor``, ``dtype``, ``pointer_type``, ``block_type`` and ``constexpr``,
    and of one instance of each (``x.dtype``, ``x.shape``, ``ptr.dtype.element_ty`` and
    ``BLOCK.value`` are set in ``__init__``, not on the class), less ``HOST_ATTRIBUTES``."""
    import triton.language as tl

    classes = (tl.tensor, tl.dtype, tl.pointer_type, tl.block_type, tl.constexpr)
    names = {name for value in classes for name in dir(value)}
    try:
        block = tl.block_type(tl.float32, [16])
        instances = (tl.tensor(None, block), tl.float32, tl.pointer_type(tl.float32), block, tl.constexpr(16))
        names |= {name for value in instances for name in dir(value)}
    except Exception:  # another Triton's constructors: the floor below still holds
        names |= _INSTANCE_ATTRIBUTES
    return frozenset(name for name in names if not name.startswith("_")) - HOST_ATTRIBUTES


class _Validator:
    def __init__(self, where: Callable[[int], str]):
        self.where = where
        self.problems: list[tuple[str, str]] = []  # (where and what, the name of the rule in RULES)
        self.modules: dict[str, types.ModuleType] = {}  # module names bound by an import
        self.objects: dict[str, object] = {}  # names bound by ``from m import x``
        self.constants: set[str] = set()
        self.kernels: set[str] = set()
        self.parameters: set[str] = set()  # every argument name of the module's functions

    def refuse(self, node: ast.AST, text: str, rule: str) -> None:
        self.problems.append((f"{self.where(getattr(node, 'lineno', 0))}: {text}", rule))

    def bound(self, name: str) -> bool:
        return any(name in names for names in (self.modules, self.objects, self.constants, self.kernels))

    # -- names reached through the imported modules ----------------------------------------------

    def resolve(self, node: ast.AST, also: tuple = ()) -> object | None:
        """The object a chain like ``tl.math.exp`` names, when it starts at an imported module; None
        (and a refusal) when it leaves Triton's and math's names, or reads, past them, an attribute
        that is not one of Triton's values' (``allowed_attributes``); None when it starts elsewhere."""
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.modules and node.id not in self.objects:
            return None
        value = self.modules.get(node.id, self.objects.get(node.id))
        reached = node.id
        for name in reversed(chain):
            if name.startswith("__"):
                self.refuse(node, f"`{reached}.{name}` reads a dunder attribute", "names")
                return None
            if not isinstance(value, types.ModuleType):
                # An attribute of a Triton object (tl.float32.primitive_bitwidth): one of its values'.
                if name not in allowed_attributes():
                    self.refuse(
                        node, f"`{reached}.{name}`: {name} is not an attribute of Triton's values", "kernel code"
                    )
                    return None
                reached += f".{name}"
                continue
            if name.startswith("_"):
                self.refuse(node, f"`{reached}.{name}` reads a private attribute of {reached}", "kernel code")
                return None
            try:
                value = getattr(value, name)
            except AttributeError:
                self.refuse(node, f"{reached}.{name} does not exist", "kernel code")
                return None
            reached += f".{name}"
            if not _is_triton_name(value) and not any(value is item for item in also):
                self.refuse(node, f"{reached} is not one of triton.language's or math's names", "kernel code")
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
                arguments = node.args
                self.parameters |= {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
            else:
                self.refuse(node, f"`{_first_line(node)}` runs when the module loads", "functions")
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.kernel(node)

    def bind(self, node: ast.AST, name: str) -> None:
        if name.startswith("__"):
            self.refuse(node, f"the name {name} starts with '__'", "names")
        elif self.bound(name):
            self.refuse(node, f"{name} is bound twice (a kernel's module binds each name once)", "names")

    def import_(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in MODULES:
                    self.refuse(node, f"`import {alias.name}`", "imports")
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
            self.refuse(node, f"`from {'.' * node.level}{node.module or ''} import ...`", "imports")
            return
        module = importlib.import_module(node.module)
        for alias in node.names:
            bound = alias.asname or alias.name
            if alias.name == "*" or alias.name.startswith("_"):
                self.refuse(
                    node, f"`from {node.module} import {alias.name}`: import the public names a kernel uses", "imports"
                )
                continue
            try:
                value = getattr(module, alias.name)
            except AttributeError:
                try:
                    value = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    self.refuse(node, f"{node.module} has no name {alias.name}", "imports")
                    continue
            if not _is_triton_name(value) and value is not getattr(module, "jit", None):
                self.refuse(
                    node, f"{node.module}.{alias.name} is not one of triton.language's or math's names", "imports"
                )
                continue
            self.bind(node, bound)
            if isinstance(value, types.ModuleType):
                self.modules[bound] = value
            else:
                self.objects[bound] = value

    def constant(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(target, ast.Name) for target in targets) or node.value is None:
            self.refuse(node, f"`{_first_line(node)}` is not NAME = a constant", "constants")
            return
        if isinstance(node, ast.AnnAssign):
            self.annotation(node.annotation)
        problems = len(self.problems)
        if not self.constant_value(node.value) or len(self.problems) > problems:
            if len(self.problems) == problems:  # else the refusal names what its value reads
                self.refuse(node, f"`{_first_line(node)}` computes a value when the module loads", "constants")
            return
        for target in targets:
            self.bind(node, target.id)
            self.constants.add(target.id)

    def constant_value(self, node: ast.expr) -> bool:
        """``notebook_loader.is_constant_expression``, its names read as this module binds them."""
        import triton.language as tl

        def names_ok(what: str, name: ast.expr) -> bool:
            if what == "constexpr":
                return self.names_triton(name, (tl.constexpr,))
            if what == "math" and self.modules.get("math") is not math:  # `import math`, nothing else named math
                self.refuse(name, f"`{_first_line(node)}` reads math, which is not `import math` here", "constants")
            elif what == "float" and self.bound("float"):  # the builtin float
                self.refuse(name, f"`{_first_line(node)}` reads float, which this module binds itself", "constants")
            return True  # a refusal above is seen by ``constant``

        return is_constant_expression(node, names_ok)

    def annotation(self, node: ast.AST | None) -> None:
        if node is None or isinstance(node, ast.Constant) and isinstance(node.value, str):
            return  # a string annotation is never evaluated
        if isinstance(node, ast.Name) and node.id in ANNOTATION_BUILTINS:
            return
        problems = len(self.problems)
        if isinstance(node, (ast.Name, ast.Attribute)) and (
            self.resolve(node) is not None or len(self.problems) > problems
        ):
            return
        self.refuse(node, f"the annotation `{ast.unparse(node)}` is not a Triton type (tl.constexpr)", "functions")

    # -- one @triton.jit function ----------------------------------------------------------------

    def kernel(self, node: ast.FunctionDef) -> None:
        import triton

        name = node.name
        if not node.decorator_list:
            self.refuse(
                node,
                f"{name} is a function without @triton.jit: a kernel calls only @triton.jit functions, and "
                "its module holds no other",
                "functions",
            )
            return
        if len(node.decorator_list) != 1 or not self.jit_decorator(node.decorator_list[0], triton.jit):
            shown = ", ".join(f"@{ast.unparse(d)}" for d in node.decorator_list)
            self.refuse(
                node, f"{name}'s decorators ({shown}): a kernel has exactly one decorator, @triton.jit", "functions"
            )
        arguments = node.args
        if arguments.vararg or arguments.kwarg:
            self.refuse(node, f"{name} takes *args or **kwargs (a kernel names its arguments)", "functions")
        for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
            if not _literal(default):
                self.refuse(
                    default,
                    f"{name}'s default `{ast.unparse(default)}` is computed when the module loads; a "
                    "default is a literal",
                    "functions",
                )
        parameters = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        for parameter in parameters:
            if parameter.arg.startswith("__"):
                self.refuse(parameter, f"{name}'s argument {parameter.arg} starts with '__'", "names")
            self.annotation(parameter.annotation)
        self.annotation(node.returns)
        if getattr(node, "type_params", None):
            self.refuse(node, f"{name} has type parameters", "functions")
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
                self.refuse(node, f"{kernel}: `{_first_line(node)}` is not kernel code", "kernel code")
            elif isinstance(node, ast.expr) and not isinstance(node, EXPRESSIONS):
                self.refuse(node, f"{kernel}: `{_first_line(node)}` is not kernel code", "kernel code")
            elif isinstance(node, ast.Attribute) and id(node) not in inner:
                self.attribute(node, kernel)
            elif isinstance(node, ast.Name):
                if node.id.startswith("__"):
                    self.refuse(node, f"{kernel}: the name {node.id} starts with '__'", "names")
                elif isinstance(node.ctx, ast.Load):
                    self.name(node, kernel, local)
            elif isinstance(node, ast.keyword) and node.arg is not None:
                self.keyword(node, kernel)

    def attribute(self, node: ast.Attribute, kernel: str) -> None:
        """A whole chain (``x.dtype.element_ty``, ``tl.math.exp``): through an imported module by
        Triton's and math's names (``resolve``); on anything else, by the attributes of Triton's values."""
        chain, root = [], node
        while isinstance(root, ast.Attribute):
            chain.insert(0, root.attr)
            root = root.value
        dunder = next((name for name in chain if name.startswith("__")), None)
        if dunder is not None:
            self.refuse(node, f"{kernel}: `{_first_line(node)}` reads the dunder attribute {dunder}", "names")
        elif isinstance(root, ast.Name) and (root.id in self.modules or root.id in self.objects):
            self.resolve(node)  # refuses a chain that leaves Triton's and math's names
        else:
            for name in chain:
                if name not in allowed_attributes():
                    why = " (the host's data under the interpreter)" if name in HOST_ATTRIBUTES else ""
                    self.refuse(
                        node,
                        f"{kernel}: `{_first_line(node)}` reads .{name}, which is not an attribute of Triton's "
                        f"values{why}",
                        "kernel code",
                    )
                    break

    def keyword(self, node: ast.keyword, kernel: str) -> None:
        if node.arg.startswith("__"):
            self.refuse(node, f"{kernel}: the keyword {node.arg}= starts with '__'", "names")
        elif node.arg.startswith("_") and node.arg not in self.parameters:
            self.refuse(
                node,
                f"{kernel}: the keyword {node.arg}= is none of this module's arguments (Triton passes its own "
                "private arguments itself)",
                "names",
            )

    def name(self, node: ast.Name, kernel: str, local: set[str]) -> None:
        if not self.bound(node.id) and node.id not in local and node.id not in KERNEL_BUILTINS:
            self.refuse(
                node,
                f"{kernel} uses {node.id}, which is not a local, a constant, a @triton.jit function or an "
                "import of its module (nor one of range, float, int, min, max, len, print)",
                "kernel code",
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
        raise KernelSourceRefused(_refusal(validator.problems))


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
    return kernel_module_from_cells(code_cells(path), kernels, path.name)


def kernel_module_from_cells(
    cells: Iterable[tuple[int, str]], kernels: Iterable[str], origin: str, cell_word: str = "code cell"
) -> KernelModule:
    """``kernel_module_from_notebook`` for cells given as (number, source), in the order they ran
    (a notebook's code cells, or the cells a Jupyter kernel ran); ``origin`` and ``cell_word`` say in
    messages where they came from ("07_paged_decode_kernel.ipynb, code cell 14, line 3")."""
    bindings: dict[str, tuple[ast.stmt, _Statement]] = {}
    unparsed: list[str] = []  # a cell with a syntax error defines nothing (it never ran)
    for cell, source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError as error:
            unparsed.append(f"{origin}, {cell_word} {cell}, line {error.lineno}: a syntax error ({error.msg})")
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
    kernels = sorted(kernels)
    wanted, chosen, problems = list(kernels), {}, []
    while wanted:
        name = wanted.pop()
        if name in chosen or name in KERNEL_BUILTINS | ANNOTATION_BUILTINS and name not in bindings:
            continue
        if name not in bindings:  # the validation names the kernel that uses it, and where
            if name in kernels:
                problems.append(f"{name} is not defined at the top level of {origin}")
                problems += unparsed
            continue
        node, statement = bindings[name]
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and not _literal(node.value):
            func = node.value.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == "load_from_notebook":
                problems.append(
                    f"{origin}, {cell_word} {statement.cell}: {name} comes from another notebook "
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

    defines: dict[_Statement, str] = {}  # the first name each statement binds: how a learner finds its cell
    for bound, statement in chosen.items():
        defines.setdefault(statement, bound)

    def where(number: int) -> str:
        for start, statement in reversed(origins):
            if number >= start:
                return (
                    f"{origin}, {cell_word} {statement.cell} (the cell defining {defines[statement]}), "
                    f"line {statement.first_line + number - start}"
                )
        return origin

    module = KernelModule(source, where)
    validate_kernel_module(module)
    return module
