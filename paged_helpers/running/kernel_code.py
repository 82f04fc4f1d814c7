"""The rules of a kernel's body: the statements and expressions Triton compiles, the names it reads.

Inside Triton's code generator every call a kernel's body makes to something that is not a Triton
builtin runs, at compile time; under Triton's interpreter the whole body runs as Python. So a body
holds only kernel code (``STATEMENTS``, ``EXPRESSIONS``), reads only its locals, the module's names,
the builtins Triton gives kernels and Triton's or math's public names, reads on a value only the
attributes of Triton's values (never ``handle``), and passes no private keyword Triton passes itself.
"""

from __future__ import annotations

import ast

from .kernel_names import HOST_ATTRIBUTES, KERNEL_BUILTINS, ModuleNames, allowed_attributes
from .kernel_rules import first_line

__all__ = ["EXPRESSIONS", "STATEMENTS", "check_body"]

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


def check_body(names: ModuleNames, node: ast.FunctionDef) -> None:
    """Every statement of the @triton.jit function ``node``, read against the module's ``names``."""
    arguments = node.args
    local = {parameter.arg for parameter in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    for child in ast.walk(ast.Module(body=node.body, type_ignores=[])):
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            local.add(child.id)
    for statement in node.body:
        _statement(names, statement, node.name, local)


def _statement(names: ModuleNames, statement: ast.stmt, kernel: str, local: set[str]) -> None:
    inner = set()  # Attributes that are the first part of a longer chain (tl.math of tl.math.exp)
    for node in ast.walk(statement):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner.add(id(node.value))
    for node in ast.walk(statement):
        if isinstance(node, ast.stmt) and not isinstance(node, STATEMENTS):
            names.refuse(node, f"{kernel}: `{first_line(node)}` is not kernel code", "kernel code")
        elif isinstance(node, ast.expr) and not isinstance(node, EXPRESSIONS):
            names.refuse(node, f"{kernel}: `{first_line(node)}` is not kernel code", "kernel code")
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            _attribute(names, node, kernel)
        elif isinstance(node, ast.Name):
            if node.id.startswith("__"):
                names.refuse(node, f"{kernel}: the name {node.id} starts with '__'", "names")
            elif isinstance(node.ctx, ast.Load):
                _name(names, node, kernel, local)
        elif isinstance(node, ast.keyword) and node.arg is not None:
            _keyword(names, node, kernel)


def _attribute(names: ModuleNames, node: ast.Attribute, kernel: str) -> None:
    """A whole chain (``x.dtype.element_ty``, ``tl.math.exp``): through an imported module by
    Triton's and math's names (``resolve``); on anything else, by the attributes of Triton's values."""
    chain, root = [], node
    while isinstance(root, ast.Attribute):
        chain.insert(0, root.attr)
        root = root.value
    dunder = next((name for name in chain if name.startswith("__")), None)
    if dunder is not None:
        names.refuse(node, f"{kernel}: `{first_line(node)}` reads the dunder attribute {dunder}", "names")
    elif isinstance(root, ast.Name) and names.imported(root.id):
        names.resolve(node)  # refuses a chain that leaves Triton's and math's names
    else:
        for name in chain:
            if name not in allowed_attributes():
                why = " (the host's data under the interpreter)" if name in HOST_ATTRIBUTES else ""
                names.refuse(
                    node,
                    f"{kernel}: `{first_line(node)}` reads .{name}, which is not an attribute of Triton's values{why}",
                    "kernel code",
                )
                break


def _keyword(names: ModuleNames, node: ast.keyword, kernel: str) -> None:
    if node.arg.startswith("__"):
        names.refuse(node, f"{kernel}: the keyword {node.arg}= starts with '__'", "names")
    elif node.arg.startswith("_") and node.arg not in names.parameters:
        names.refuse(
            node,
            f"{kernel}: the keyword {node.arg}= is none of this module's arguments (Triton passes its own "
            "private arguments itself)",
            "names",
        )


def _name(names: ModuleNames, node: ast.Name, kernel: str, local: set[str]) -> None:
    if not names.bound(node.id) and node.id not in local and node.id not in KERNEL_BUILTINS:
        names.refuse(
            node,
            f"{kernel} uses {node.id}, which is not a local, a constant, a @triton.jit function or an "
            "import of its module (nor one of range, float, int, min, max, len, print)",
            "kernel code",
        )
