"""The names a kernel module binds, and the names it reaches through Triton's and math's modules.

``ModuleNames`` is the module's namespace as validation builds it (what each import, constant and
@triton.jit function binds, each name once) and the one place that follows a chain from an imported
module (``tl.math.exp``): every step a public name of Triton's or math's, looked up on the real
modules here (attribute reads of Triton's and math's own modules, nothing of the learner's). What a
kernel may read on a value that is not a module is ``allowed_attributes()``: Triton's values' own.
"""

from __future__ import annotations

import ast
import functools
import types

from .kernel_rules import Refusals

__all__ = ["ANNOTATION_BUILTINS", "HOST_ATTRIBUTES", "KERNEL_BUILTINS", "MODULES", "ModuleNames"]
__all__ += ["allowed_attributes", "is_triton_name"]

MODULES = ("triton", "triton.language", "triton.language.math", "math")
# The builtins Triton's code generator gives a kernel (print, min and max as Triton's own).
KERNEL_BUILTINS = frozenset({"range", "float", "int", "min", "max", "len", "print"})
ANNOTATION_BUILTINS = frozenset({"int", "float", "bool", "str"})
# Attributes that would hand a kernel's Python (under Triton's interpreter, its body runs as
# Python) the host's objects, taken out of what the value classes offer: a tensor's ``handle`` is
# its IR value when compiling and, interpreted, a TensorHandle whose ``data`` is the numpy array
# itself (``x.handle.data.tofile("/tmp/f")``, ``x.handle.data.ctypes``).
HOST_ATTRIBUTES = frozenset({"handle"})
# The instance attributes kernels read (set in ``__init__``, so in no class's ``dir()``): read from
# instances below; these, if another Triton's constructors differ from the ones called there.
_INSTANCE_ATTRIBUTES = frozenset({"dtype", "shape", "numel", "type", "element_ty", "value", "name"})


def _triton_objects() -> tuple:
    import triton

    return triton.cdiv, triton.next_power_of_2


def _is_jit(value: object) -> bool:
    return hasattr(value, "fn") and type(value).__name__ in ("JITFunction", "InterpretedFunction")


def is_triton_name(value: object) -> bool:
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


class ModuleNames:
    """The names one kernel module binds at its top level, filled as validation reads its statements.

    Owns nothing of the learner's: ``modules`` and ``objects`` hold Triton's and math's own modules
    and names, imported here; ``constants`` and ``kernels`` only the names. Refusals go to ``refusals``.
    """

    def __init__(self, refusals: Refusals):
        self.refusals = refusals
        self.modules: dict[str, types.ModuleType] = {}  # module names bound by an import
        self.objects: dict[str, object] = {}  # names bound by ``from m import x``
        self.constants: set[str] = set()
        self.kernels: set[str] = set()
        self.parameters: set[str] = set()  # every argument name of the module's functions

    def refuse(self, node: ast.AST, text: str, rule: str) -> None:
        self.refusals.refuse(node, text, rule)

    def bound(self, name: str) -> bool:
        return any(name in names for names in (self.modules, self.objects, self.constants, self.kernels))

    def bind(self, node: ast.AST, name: str) -> None:
        """Refuse ``name`` when it starts with ``__`` or is bound already (the caller then records it)."""
        if name.startswith("__"):
            self.refuse(node, f"the name {name} starts with '__'", "names")
        elif self.bound(name):
            self.refuse(node, f"{name} is bound twice (a kernel's module binds each name once)", "names")

    def imported(self, name: str) -> bool:
        """Whether ``name`` is a module or a name this module imported."""
        return name in self.modules or name in self.objects

    def resolve(self, node: ast.AST, also: tuple = ()) -> object | None:
        """The object a chain like ``tl.math.exp`` names, when it starts at an imported module; None
        (and a refusal) when it leaves Triton's and math's names, or reads, past them, an attribute
        that is not one of Triton's values' (``allowed_attributes``); None when it starts elsewhere."""
        chain = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or not self.imported(node.id):
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
            value = self._module_attribute(node, value, reached, name, also)
            if value is None:
                return None
            reached += f".{name}"
        return value

    def _module_attribute(
        self, node: ast.AST, module: types.ModuleType, reached: str, name: str, also: tuple
    ) -> object | None:
        """``module.name`` (``reached`` names ``module``) when it is public, exists and is Triton's or
        math's (or one of ``also``); else None, refused."""
        if name.startswith("_"):
            self.refuse(node, f"`{reached}.{name}` reads a private attribute of {reached}", "kernel code")
            return None
        try:
            value = getattr(module, name)
        except AttributeError:
            self.refuse(node, f"{reached}.{name} does not exist", "kernel code")
            return None
        if not is_triton_name(value) and not any(value is item for item in also):
            self.refuse(node, f"{reached}.{name} is not one of triton.language's or math's names", "kernel code")
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
