"""Reading what the learner's code returned, strictly: plain values first, then the comparison.

A check compares the learner's values with its own. Those comparisons must not run learner code:
an object whose ``__eq__`` always says True, an ``int`` subclass, or a tensor subclass (or a
leftover torch function mode) that makes ``torch.allclose`` say yes would otherwise pass anything.
So values are first turned into plain Python ints, lists, dicts, or exact ``torch.Tensor``s here
(anything else fails with a message naming what was expected and what was found: ``Refused``, which
the grader's clean run also reports to the instructor, only for a look-alike built to answer a
comparison for itself; a plain value of the wrong type is an ordinary failure), and tensors are compared with
torch's function overrides switched off (``strict_allclose``). ``call_learner`` screens every
value the learner's code returns (``refuse_odd_value``).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..speaking.failure import fail, refuse
from .learner_code import is_remote, plain, remote_type, remote_value_like


def _mro(kind: type) -> tuple[type, ...]:
    """``kind``'s MRO as ``type`` keeps it (no metaclass code runs)."""
    return type.__dict__["__mro__"].__get__(kind)


def _lookup(kind: type, name: str) -> Any:
    """``kind``'s attribute ``name`` as the MRO's dictionaries hold it (no metaclass code runs)."""
    for klass in _mro(kind):
        namespace = type.__dict__["__dict__"].__get__(klass)
        if name in namespace:
            return namespace[name]
    return None


def type_name(value: Any) -> str:
    """The value's type's name, read without running any code the type defines."""
    if is_remote(value):
        return remote_type(value)
    cls = type(value)
    name = type.__dict__["__qualname__"].__get__(cls)
    module = type.__dict__["__module__"].__get__(cls)
    return name if module in ("builtins", None) else f"{module}.{name}"


def _numpy_int_types() -> tuple[type, ...]:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency
        return ()
    return tuple({numpy.dtype(code).type for code in "bhilqpBHILQP"})


_NUMPY_INTS = _numpy_int_types()


def _odd_type(scenario: str, what: str, expected: str, value: Any) -> None:
    """Fail: ``value`` is not ``expected``. ``Refused`` only for a look-alike (``look_alike``): a plain
    value of another type (a set where a list is read) is an ordinary mistake, an ordinary failure."""
    where = f"{scenario}: {what}" if scenario else what
    got = f"a value of type {type_name(value)}"
    if look_alike(value):
        refuse(
            where,
            expected,
            got,
            f"the check reads {what} as {expected}. Keep plain Python values there (a list of ints, an "
            "int); a subclass or an object of your own that changes how values compare is not accepted.",
        )
    fail(
        where,
        expected,
        got,
        f"the check reads {what} as {expected}, and found a {type_name(value)} there: keep {what} as the "
        "notebook's table of members says (each member's type is part of the interface the checks and "
        "the later notebooks use).",
    )


# What an object defines to decide for itself what it equals.
_COMPARISONS = ("__eq__", "__ne__")


def look_alike(value: Any) -> str | None:
    """Why ``value`` looks built to answer a comparison for itself, or None for an honest value of
    another type. A look-alike is what ``odd_value`` names (a builtin subclass that redefines how it
    compares or converts, a tensor subclass, an object with its own ``__torch_function__``), or an
    object of the learner's class that defines ``__eq__`` or ``__ne__``. A plain set, dict or float, or
    an object of the learner's that defines no comparison, is an ordinary wrong type."""
    why = odd_value(value)
    if why:
        return why
    for klass in _mro(type(value)):
        if str(type.__dict__["__module__"].__get__(klass)).split(".")[0] in _TRUSTED_MODULES + _LIBRARY_MODULES:
            continue
        namespace = type.__dict__["__dict__"].__get__(klass)
        defined = [name for name in _COMPARISONS if name in namespace]
        if defined:
            return f"an object of type {type_name(value)} with its own {', '.join(defined)}"
    return None


def learner_int(value: Any, what: str, scenario: str = "") -> int:
    """``value`` as a plain int: an exact ``int`` (not bool) or an exact numpy integer; else fail."""
    value = plain(value)
    kind = type(value)
    if kind is int:
        return value
    if kind in _NUMPY_INTS:
        return int(value)
    _odd_type(scenario, what, "an int", value)
    raise AssertionError("unreachable: fail() raises")


_SEQUENCE_TYPES = (list, tuple, range)


def learner_int_list(value: Any, what: str, scenario: str = "") -> list[int]:
    """``value`` as a list of plain ints (a list, tuple, deque, range, 1-D integer array/tensor)."""
    value = plain(value)
    from collections import deque

    kind = type(value)
    if kind in _SEQUENCE_TYPES or kind is deque:
        items = list(value)  # iterating an exact builtin runs no learner code
    elif _is_exact_ndarray(value) and value.ndim == 1 and value.dtype.kind in "iu":
        items = [int(v) for v in value.tolist()]
    elif _is_exact_tensor(value):
        import torch

        with torch._C.DisableTorchFunction():
            if value.ndim != 1 or value.dtype.is_floating_point or value.dtype.is_complex:
                _odd_type(scenario, what, "a list of ints", value)
            items = [int(v) for v in value.tolist()]
    else:
        _odd_type(scenario, what, "a list of ints", value)
        raise AssertionError("unreachable: fail() raises")
    return [learner_int(item, f"an element of {what}", scenario) for item in items]


def learner_list(value: Any, what: str, scenario: str, read_item: Callable[[Any, str, str], Any]) -> list:
    """``value`` as a plain list (a list, tuple or deque), each item read by ``read_item``."""
    value = plain(value)
    from collections import deque

    if type(value) not in (list, tuple, deque):
        _odd_type(scenario, what, "a list", value)
    return [read_item(item, f"{what}[{index}]", scenario) for index, item in enumerate(list(value))]


def learner_bool(value: Any, what: str, scenario: str = "") -> bool:
    """``value`` as a plain bool: an exact ``bool`` or numpy bool; else fail."""
    value = plain(value)
    kind = type(value)
    if kind is bool:
        return value
    numpy = sys.modules.get("numpy")
    if numpy is not None and kind is numpy.bool_:
        return bool(value)
    _odd_type(scenario, what, "a bool", value)
    raise AssertionError("unreachable: fail() raises")


def learner_float(value: Any, what: str, scenario: str = "") -> float:
    """``value`` as a plain number: an exact ``float`` (or a plain int, read as one); else fail."""
    value = plain(value)
    kind = type(value)
    if kind is float:
        return value
    if kind is int or kind in _NUMPY_INTS:
        return float(value)
    _odd_type(scenario, what, "a float", value)
    raise AssertionError("unreachable: fail() raises")


def learner_key(value: Any, what: str, scenario: str = "") -> Any:
    """A dictionary key the check compares: an exact str, int or tuple of those."""
    value = plain(value)
    kind = type(value)
    if kind in (str, int) or kind in _NUMPY_INTS:
        return int(value) if kind in _NUMPY_INTS else value
    if kind is tuple:
        return tuple(learner_key(item, what, scenario) for item in value)
    _odd_type(scenario, what, "a str or int key", value)
    raise AssertionError("unreachable: fail() raises")


def learner_dict(value: Any, what: str, scenario: str, read_value: Callable[[Any, str, str], Any]) -> dict:
    """``value`` as a plain dict: an exact dict (or defaultdict/OrderedDict), keys and values read strictly."""
    value = plain(value)
    from collections import OrderedDict, defaultdict

    if type(value) not in (dict, defaultdict, OrderedDict):
        _odd_type(scenario, what, "a dict", value)
    return {
        learner_key(key, f"a key of {what}", scenario): read_value(item, f"{what}[{key!r}]", scenario)
        for key, item in dict.items(value)
    }


def _is_exact_ndarray(value: Any) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and type(value) is numpy.ndarray


def _is_exact_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and type(value) is torch.Tensor


def learner_tensor(value: Any, what: str, scenario: str = "") -> Any:
    """``value`` if it is an exact ``torch.Tensor`` (no subclass: a subclass can answer for torch)."""
    value = plain(value)
    if not _is_exact_tensor(value):
        _odd_type(scenario, what, "a torch.Tensor", value)
    return value


@contextlib.contextmanager
def torch_unhooked() -> Iterator[None]:
    """Torch with every ``__torch_function__`` override and mode off (a learner may leave one active)."""
    import torch

    with torch._C.DisableTorchFunction():
        yield


def strict_allclose(got: Any, expected: Any, *, atol: float, rtol: float, equal_nan: bool = False) -> bool:
    """``torch.allclose`` on an exact tensor the learner gave, with torch's overrides switched off."""
    import torch

    if not _is_exact_tensor(got) or not _is_exact_tensor(expected):
        return False
    with torch._C.DisableTorchFunction():
        if got.shape != expected.shape:
            return False
        return bool(torch.allclose(got, expected, atol=atol, rtol=rtol, equal_nan=equal_nan))


def strict_equal(got: Any, expected: Any) -> bool:
    """``torch.equal`` on exact tensors with torch's overrides switched off."""
    import torch

    if not _is_exact_tensor(got) or not _is_exact_tensor(expected):
        return False
    with torch._C.DisableTorchFunction():
        return bool(torch.equal(got, expected))


_BUILTIN_VALUES = (int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def odd_value(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` (or something inside a list/tuple/dict/set of it) may not reach a comparison.

    A subclass of a builtin value type that changes how it compares, converts or iterates, a
    ``torch.Tensor`` subclass, or any object carrying its own ``__torch_function__``: each can make a
    check's ``==``, ``in`` or ``torch.allclose`` say yes to a wrong answer. None when the value is plain.
    """
    if is_remote(value):
        if remote_value_like(value):
            return f"a {remote_type(value)} (a subclass of a builtin value)"
        value = plain(value)  # a list or dict of the learner's, by reference: judged by its copy
        if is_remote(value):
            return None  # an object of the learner's own class: compared by identity only (learner_view.remote)
    kind = type(value)
    if kind in _BUILTIN_VALUES or value is None or kind is bool or depth > 4:
        return _odd_inside(value, depth) if kind in (list, tuple, dict, set, frozenset) else None
    mro = _mro(kind)
    torch = sys.modules.get("torch")
    if torch is not None and torch.Tensor in mro:
        return None if kind is torch.Tensor else f"a torch.Tensor subclass ({type_name(value)})"
    if _lookup(kind, "__torch_function__") is not None:
        return f"an object with its own __torch_function__ ({type_name(value)})"
    for base in _BUILTIN_VALUES:
        if base in mro:
            changed = [
                name
                for klass in mro[: mro.index(base)]
                if type.__dict__["__module__"].__get__(klass) not in _TRUSTED_MODULES
                for name in type.__dict__["__dict__"].__get__(klass)
                if name.startswith("__") and name.endswith("__") and name not in _HARMLESS_DUNDERS
            ]
            if changed:
                return f"a {base.__name__} subclass ({type_name(value)}) that redefines {', '.join(changed[:3])}"
            return _odd_inside(value, depth)
    return None


# Subclasses of builtin values made by the standard library (OrderedDict, defaultdict, Counter):
# their methods are not the learner's.
_TRUSTED_MODULES = ("builtins", "collections")
# Libraries whose exact values (a numpy float, an array of the wrong dtype) are honest wrong types.
_LIBRARY_MODULES = ("numpy", "torch")
# What a subclass may define without changing how its values compare, convert, iterate or compute
# (a namedtuple defines these).
_HARMLESS_DUNDERS = frozenset(
    {
        "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__", "__repr__",
        "__str__", "__format__", "__init__", "__new__", "__reduce__", "__reduce_ex__", "__getnewargs__",
        "__annotations__", "__match_args__", "__init_subclass__", "__class_getitem__", "__orig_bases__",
        "__parameters__", "__firstlineno__", "__static_attributes__",
    }
)  # fmt: skip


def _odd_inside(value: Any, depth: int) -> str | None:
    if isinstance(value, dict):
        items = [*dict.keys(value), *dict.values(value)]
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)[:10_000]
    else:
        return None
    for item in items:
        why = odd_value(item, depth + 1)
        if why:
            return why
    return None


def refuse_odd_value(value: Any, what: str, scenario: str = "") -> Any:
    """Fail when ``value`` is an ``odd_value``; return it unchanged otherwise."""
    why = odd_value(value)
    if why:
        refuse(
            f"{scenario}: {what}" if scenario else what,
            "plain values (ints, lists, tuples, exact torch.Tensors)",
            why,
            "the check compares what your code returns with the right answer; return plain Python values "
            "or tensors, not objects that decide for themselves what they are equal to.",
        )
    return value
