"""The handles one end holds across the wire: the objects it lent, and the stand-ins of the other's.

An object that is not plain data crosses by reference. The end that owns it lends it (``lend``: a
number of its own and a description, ``{"mine": n, ...}``); the other end holds a stand-in for it
(``make_proxy``, a ``remote.Remote``), one per number, so that ``is`` works as in one process, and
names it back as ``{"yours": n}``, which the owner resolves to the object itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from . import wire
from .crossing import MUTABLE_CONTAINERS, VALUE_TYPES, ByReference

__all__ = ["Handles"]


class Handles:
    """One end's two tables, owned by its ``Peer`` (``peer``), for as long as the conversation lasts.

    ``objects``: number -> an object of this end the other end holds (kept alive here, never
    forgotten: the other end may name it again at any time). ``proxies``: the other end's number ->
    this end's stand-in for that object.
    """

    def __init__(self, *, peer: Any, make_proxy: Callable[[Any, dict], Any]):
        self.peer, self.make_proxy = peer, make_proxy
        self.objects: dict[int, Any] = {}  # id -> an object of this end the other holds
        self.proxies: dict[int, Any] = {}  # id -> the stand-in of an object of the other end
        self._ids: dict[int, int] = {}  # id(object) -> its id here
        self._method_names: dict[type, list[str]] = {}

    def lend(self, value: Any) -> dict:
        """The description of an object of this end, registered so the other end can name it."""
        key = id(value)
        if key not in self._ids:
            self._ids[key] = len(self.objects) + 1
            self.objects[self._ids[key]] = value
        try:
            type_name = type(value).__name__
        except Exception:  # noqa: BLE001
            type_name = "object"
        return {
            "mine": self._ids[key],
            "type": str(type_name)[:80],
            "callable": callable(value),
            "is_class": isinstance(value, type),
            # Not plain, yet an int, a list, a tensor...: a subclass, which may lie when compared.
            "value_like": isinstance(value, VALUE_TYPES) and type(value) not in MUTABLE_CONTAINERS,
            # An exact list, dict, set or deque, sent by reference (``MUTABLE_CONTAINERS``).
            "container": type(value) in MUTABLE_CONTAINERS,
            # The methods its class defines, so that ``obj.name(...)`` is one request, not two.
            "methods": self._methods(value),
        }

    def _methods(self, value: Any) -> list[str]:
        """Public names of plain functions in ``value``'s class (not shadowed by its own attributes)."""
        kind = type(value)
        if isinstance(value, type) or kind.__module__ == "builtins":
            return []
        if kind not in self._method_names:
            names = set()
            for klass in kind.__mro__[:-1]:
                names.update(n for n, v in vars(klass).items() if inspect.isfunction(v) and not n.startswith("__"))
            self._method_names[kind] = sorted(names)
        try:
            own = vars(value)
        except TypeError:
            own = {}
        return [name for name in self._method_names[kind] if name not in own]

    def theirs(self, value: Any) -> int | None:
        """The other end's number for ``value`` when it is the stand-in of one of its objects; else None."""
        from .remote import Remote, remote_peer, remote_ref

        return remote_ref(value) if isinstance(value, Remote) and remote_peer(value) is self.peer else None

    def describe(self, value: Any) -> dict:
        """How a message names ``value``, an object that is not plain data (``wire.Encoder``'s ``other``)."""
        ref = self.theirs(value)
        if ref is not None:
            return {"yours": ref}
        if isinstance(value, ByReference):
            return self.lend(value.value)
        return self.lend(value)

    def resolve(self, description: dict) -> Any:
        """The object a ``mine``/``yours`` dict of a message names (``wire.decode``'s ``other``)."""
        if "yours" in description:
            key = description["yours"]
            if type(key) is not int or key not in self.objects:
                raise wire.Malformed("a message names an object this side never lent")
            return self.objects[key]
        if "mine" in description:
            key = description["mine"]
            if type(key) is not int:
                raise wire.Malformed("an object's id is not an int")
            if key not in self.proxies:  # one stand-in per object, so that ``is`` works as in one process
                self.proxies[key] = self.make_proxy(self.peer, description)
            return self.proxies[key]
        raise wire.Malformed("an object description without an id")
