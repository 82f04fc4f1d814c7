"""What one end does when asked: the protocol's operations, and the few the checking end lends.

The learner's end (``serves="all"``) answers every operation on its objects: ``global`` (a name of
the notebook's definitions), ``getattr``, ``setattr``, ``call``, ``method``, ``special`` (one of
``SPECIALS``: ``len``, an index, a comparison, a copy, an assignment a check makes for the model...),
``signature`` and ``run`` (a launcher under the launch watcher). The checking end (``serves="calls"``)
answers only calls of the objects it handed over and reads of the names their class lends
(``lent_names``), never a name that starts with ``_``: its objects (a model, a sampler) are lent
to the learner's code to be called, not to be explored.
"""

from __future__ import annotations

import inspect
from typing import Any

from . import wire
from .crossing import ByValue

__all__ = ["LENT_SPECIALS", "SPECIALS", "perform"]


def _assign(owner: Any, path: Any, value: Any) -> None:
    from .access import assign_here

    if type(path) is not list or not path or type(path[0]) is not str:
        raise TypeError("an assignment's path must start with an attribute name")
    assign_here(owner, path, value)


def _read_here(starts: list, names: Any, follow: Any, limit: Any) -> list:
    from .prefetch import read_here

    return read_here(starts, names, follow, limit)


def _construct(path: Any, fields: Any) -> Any:
    from .access import construct_here

    if type(path) is not str or type(fields) is not dict:
        raise TypeError("a construct needs a class path and a dict of fields")
    return construct_here(path, fields)


def _subclass(base: Any, name: Any, hooks: Any) -> type:
    from .subclass import subclass_here

    if not isinstance(base, type) or type(name) is not str or type(hooks) is not dict:
        raise TypeError("a subclass needs a class, a name and a dict of hooks")
    return subclass_here(base, name, hooks)


# The specials, by name: each takes the request's target, then its arguments.
SPECIALS = {
    "copy": lambda obj: ByValue(obj),
    "assign": lambda obj, path, value: _assign(obj, path, value),
    "subclass": lambda base, name, hooks: _subclass(base, name, hooks),
    "construct": lambda owner, path, fields: _construct(path, fields),
    "len": len,
    "getitem": lambda obj, key: obj[key],
    "setitem": lambda obj, key, value: obj.__setitem__(key, value),
    "delitem": lambda obj, key: obj.__delitem__(key),
    "contains": lambda obj, item: item in obj,
    "list": list,
    "bool": bool,
    "repr": repr,
    "str": str,
    "eq": lambda a, b: a == b,
    "hash": hash,
    "int": int,
    "index": lambda obj: obj.__index__(),
    "float": float,
    "prefetch": lambda obj, names, follow, limit, more: _read_here([obj, *more], names, follow, limit),
}
# What the checking end lends: calls, public reads, and the specials a caller of a model uses.
LENT_SPECIALS = {"len", "getitem", "contains", "list", "bool", "repr", "str"}


def perform(op: str, fields: dict, *, serves: str, namespace: dict) -> Any:
    """The answer to one request (``op`` with its decoded ``fields``), as the end that ``serves`` gives it;
    ``namespace`` holds the names a ``global`` may ask for (the learner's end only)."""
    target, name = fields["target"], fields["name"]
    args = fields["args"] or []
    kwargs = fields["kwargs"] or {}
    if type(args) is not list or type(kwargs) is not dict or any(type(k) is not str for k in kwargs):
        raise TypeError("a request's args must be a list and its kwargs a dict of names")
    if serves == "calls":
        return _perform_lent(op, target, name, args=args, kwargs=kwargs)
    if op == "global":
        if type(name) is not str or name not in namespace:
            raise NameError(f"name {name!r} is not defined")
        return namespace[name]
    if op == "getattr":
        return getattr(target, name)
    if op == "setattr":
        setattr(target, name, fields["value"])
        return None
    if op == "call":
        return target(*args, **kwargs)
    if op == "method":
        return getattr(target, name)(*args, **kwargs)
    if op == "special" and name in SPECIALS:
        return SPECIALS[name](target, *args)
    if op == "signature":
        return _signature(target)
    if op == "run":
        from .launcher_runs import serve_run

        return serve_run(name, target, *args)
    raise ValueError(f"an operation the protocol does not have: {op[:40]}")


def _perform_lent(op: str, target: Any, name: Any, *, args: list, kwargs: dict) -> Any:
    """An object this end lent may be called; only the names its class lists in ``lent_names``
    may be read or called by name (a model lends ``forward``, never ``load_state_dict``)."""
    if op in ("getattr", "method"):
        names = getattr(type(target), "lent_names", ())
        if type(name) is not str or name.startswith("_") or name not in names:
            raise PermissionError(f"the checking process does not lend {type(target).__name__}.{name}")
        return getattr(target, name) if op == "getattr" else getattr(target, name)(*args, **kwargs)
    if op == "call" and callable(target) and not isinstance(target, type):
        return target(*args, **kwargs)
    if op == "special" and name in LENT_SPECIALS:
        return SPECIALS[name](target, *args)
    raise PermissionError(f"the checking process does not answer {op!r} on what it lent")


def _signature(target: Any) -> list:
    """[[name, kind, has_default, default_or_None], ...] of a callable of this end."""
    parameters = []
    for parameter in inspect.signature(target).parameters.values():
        default = parameter.default
        plain = default is inspect.Parameter.empty or type(default) in wire.PLAIN
        parameters.append(
            [parameter.name, int(parameter.kind), default is not inspect.Parameter.empty, default if plain else None]
        )
    return parameters
