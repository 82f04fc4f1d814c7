"""The rules of what a kernel module runs when it loads: its imports, constants and function headers.

Loading a module runs its top level: each import, each constant's value, each function's decorators,
defaults and annotations. So an import names Triton's or math's modules or public names only
(``check_import``), a constant is a constant expression (``check_constant``) and a function is a
``@triton.jit`` one with literal defaults and Triton's annotations (``check_header``). Each binds
its names in the module's ``ModuleNames``; each refusal names its rule.
"""

from __future__ import annotations

import ast
import importlib
import math
import types

from ..notebook_cells import is_constant_expression, is_literal
from .kernel_names import ANNOTATION_BUILTINS, MODULES, ModuleNames, is_triton_name
from .kernel_rules import first_line

__all__ = ["check_annotation", "check_constant", "check_header", "check_import"]


def check_import(names: ModuleNames, node: ast.Import | ast.ImportFrom) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in MODULES:
                names.refuse(node, f"`import {alias.name}`", "imports")
                continue
            importlib.import_module(alias.name)  # Triton's or math's own modules
            bound = alias.asname or alias.name.split(".")[0]
            module = importlib.import_module(alias.name if alias.asname else bound)
            if names.modules.get(bound) is module:
                continue  # import triton, then import triton.language: the same name, the same module
            names.bind(node, bound)
            names.modules[bound] = module
        return
    if node.level or node.module not in MODULES:
        names.refuse(node, f"`from {'.' * node.level}{node.module or ''} import ...`", "imports")
        return
    module = importlib.import_module(node.module)
    for alias in node.names:
        if alias.name == "*" or alias.name.startswith("_"):
            names.refuse(
                node, f"`from {node.module} import {alias.name}`: import the public names a kernel uses", "imports"
            )
            continue
        value = _imported_name(names, node, module, alias.name)
        if value is _REFUSED:
            continue
        bound = alias.asname or alias.name
        names.bind(node, bound)
        if isinstance(value, types.ModuleType):
            names.modules[bound] = value
        else:
            names.objects[bound] = value


# What ``_imported_name`` answers for a name it refused (None is a value a module may hold).
_REFUSED = object()


def _imported_name(names: ModuleNames, node: ast.ImportFrom, module: types.ModuleType, name: str) -> object:
    """What ``from module import name`` binds, when it is Triton's or math's; else ``_REFUSED``, refused."""
    try:
        value = getattr(module, name)
    except AttributeError:
        try:
            value = importlib.import_module(f"{node.module}.{name}")
        except ImportError:
            names.refuse(node, f"{node.module} has no name {name}", "imports")
            return _REFUSED
    if not is_triton_name(value) and value is not getattr(module, "jit", None):
        names.refuse(node, f"{node.module}.{name} is not one of triton.language's or math's names", "imports")
        return _REFUSED
    return value


def check_constant(names: ModuleNames, node: ast.Assign | ast.AnnAssign) -> None:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    if not all(isinstance(target, ast.Name) for target in targets) or node.value is None:
        names.refuse(node, f"`{first_line(node)}` is not NAME = a constant", "constants")
        return
    if isinstance(node, ast.AnnAssign):
        check_annotation(names, node.annotation)
    problems = len(names.refusals.problems)
    if not _constant_value(names, node.value) or len(names.refusals.problems) > problems:
        if len(names.refusals.problems) == problems:  # else the refusal names what its value reads
            names.refuse(node, f"`{first_line(node)}` computes a value when the module loads", "constants")
        return
    for target in targets:
        names.bind(node, target.id)
        names.constants.add(target.id)


def _constant_value(names: ModuleNames, node: ast.expr) -> bool:
    """``notebook_cells.is_constant_expression``, its names read as this module binds them."""
    import triton.language as tl

    def names_ok(what: str, name: ast.expr) -> bool:
        if what == "constexpr":
            return names.names_triton(name, (tl.constexpr,))
        if what == "math" and names.modules.get("math") is not math:  # `import math`, nothing else named math
            names.refuse(name, f"`{first_line(node)}` reads math, which is not `import math` here", "constants")
        elif what == "float" and names.bound("float"):  # the builtin float
            names.refuse(name, f"`{first_line(node)}` reads float, which this module binds itself", "constants")
        return True  # a refusal above is seen by ``check_constant``

    return is_constant_expression(node, names_ok)


def check_annotation(names: ModuleNames, node: ast.AST | None) -> None:
    if node is None or isinstance(node, ast.Constant) and isinstance(node.value, str):
        return  # a string annotation is never evaluated
    if isinstance(node, ast.Name) and node.id in ANNOTATION_BUILTINS:
        return
    problems = len(names.refusals.problems)
    if isinstance(node, (ast.Name, ast.Attribute)) and (
        names.resolve(node) is not None or len(names.refusals.problems) > problems
    ):
        return
    names.refuse(node, f"the annotation `{ast.unparse(node)}` is not a Triton type (tl.constexpr)", "functions")


def check_header(names: ModuleNames, node: ast.FunctionDef) -> bool:
    """A function's decorators, arguments, defaults and annotations; False when it has no decorator
    at all (it is no kernel, and its body is not read)."""
    import triton

    name = node.name
    if not node.decorator_list:
        names.refuse(
            node,
            f"{name} is a function without @triton.jit: a kernel calls only @triton.jit functions, and "
            "its module holds no other",
            "functions",
        )
        return False
    if len(node.decorator_list) != 1 or not _jit_decorator(names, node.decorator_list[0], triton.jit):
        shown = ", ".join(f"@{ast.unparse(d)}" for d in node.decorator_list)
        names.refuse(
            node, f"{name}'s decorators ({shown}): a kernel has exactly one decorator, @triton.jit", "functions"
        )
    arguments = node.args
    if arguments.vararg or arguments.kwarg:
        names.refuse(node, f"{name} takes *args or **kwargs (a kernel names its arguments)", "functions")
    for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
        if not is_literal(default):
            names.refuse(
                default,
                f"{name}'s default `{ast.unparse(default)}` is computed when the module loads; a default is a literal",
                "functions",
            )
    for parameter in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        if parameter.arg.startswith("__"):
            names.refuse(parameter, f"{name}'s argument {parameter.arg} starts with '__'", "names")
        check_annotation(names, parameter.annotation)
    check_annotation(names, node.returns)
    if getattr(node, "type_params", None):
        names.refuse(node, f"{name} has type parameters", "functions")
    return True


def _jit_decorator(names: ModuleNames, node: ast.AST, jit: object) -> bool:
    if isinstance(node, ast.Call):
        return (
            not node.args
            and all(keyword.arg and is_literal(keyword.value) for keyword in node.keywords)
            and names.names_triton(node.func, (jit,))
        )
    return names.names_triton(node, (jit,))
