"""``Remote``: the stand-in, on this side of the wire, of an object that lives on the other side.

A check handed ``Remote`` versions of the learner's class, function or launcher uses them as it
uses the real ones: it calls them, reads and sets attributes, takes ``len``, indexes, iterates,
compares, asks for a signature. Every one of those is a request (``peer``); what comes back is a
plain value (an int, a list, a tensor: a copy, made on this side) or another ``Remote``. Nothing
of the other side's code ever runs here, and nothing that is not plain data arrives here.

Where a check must know (a kernel is launched under the launch watcher, in the learner's process),
``is_remote`` tells it, and ``learner_view.launcher_runs`` does the rest.
"""

from __future__ import annotations

import inspect
from typing import Any

from .answers_held import UNKNOWN, Known

__all__ = [
    "Remote", "is_remote", "plain", "learner_type", "remote_container", "remote_peer", "remote_ref", "remote_type",
]  # fmt: skip

_SLOTS = ("_peer", "_ref", "_type", "_callable", "_is_class", "_value_like", "_container", "_methods")


class Remote:
    """An object of the other process. Its attributes are the other object's, read on each access."""

    __slots__ = _SLOTS

    def __init__(self, peer, description: dict):
        object.__setattr__(self, "_peer", peer)
        object.__setattr__(self, "_ref", description["mine"])
        object.__setattr__(self, "_type", str(description.get("type", "object")))
        object.__setattr__(self, "_callable", description.get("callable") is True)
        object.__setattr__(self, "_is_class", description.get("is_class") is True)
        object.__setattr__(self, "_value_like", description.get("value_like") is not False)
        object.__setattr__(self, "_container", description.get("container") is True)
        methods = description.get("methods") if type(description.get("methods")) is list else []
        object.__setattr__(self, "_methods", frozenset(m for m in methods if type(m) is str))

    def _ask(self, op: str, **fields: Any) -> Any:
        return object.__getattribute__(self, "_peer").request(op, target=self, **fields)

    def __getattr__(self, name: str) -> Any:
        if name in _SLOTS:
            raise AttributeError(name)
        if name in object.__getattribute__(self, "_methods"):
            return _Method(self, name)  # called later in one request
        known = self._known().attribute(object.__getattribute__(self, "_ref"), name)
        return self._ask("getattr", name=name) if known is UNKNOWN else known

    def _known(self) -> Known:
        return object.__getattribute__(self, "_peer").known

    def _special_known(self, how: str, name: str, *args: Any) -> Any:
        """A special's answer from this moment's copy of a container (``known``), else asked."""
        if object.__getattribute__(self, "_container"):
            value = getattr(self._known(), how)(object.__getattribute__(self, "_ref"), *args)
            if value is not UNKNOWN:
                return value
        return self._special(name, *args)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", name=name, value=value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._ask("call", args=list(args), kwargs=kwargs)

    def call_method(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``obj.name(*args, **kwargs)`` in one request (``obj.name(...)`` works too, in two)."""
        return self._ask("method", name=name, args=list(args), kwargs=kwargs)

    def _special(self, name: str, *args: Any) -> Any:
        return self._ask("special", name=name, args=list(args))

    def __len__(self) -> int:
        value = self._special_known("length", "len")
        if type(value) is not int or value < 0:
            raise TypeError("len() of the learner's object is not a non-negative int")
        return value

    def __getitem__(self, key: Any) -> Any:
        return self._special_known("item", "getitem", key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._special("setitem", key, value)

    def __delitem__(self, key: Any) -> None:
        self._special("delitem", key)

    def __contains__(self, item: Any) -> bool:
        return self._special_known("contains", "contains", item) is True

    def __iter__(self):
        items = self._special_known("items", "list")
        if type(items) is not list:
            raise TypeError("iterating the learner's object did not give a list")
        return iter(items)

    def __bool__(self) -> bool:
        return self._special_known("truth", "bool") is True

    def __repr__(self) -> str:
        try:
            text = self._special("repr")
        except Exception:  # noqa: BLE001 - a repr for messages must not fail
            text = None
        kind = object.__getattribute__(self, "_type")
        return text[:300] if type(text) is str else f"<{kind} of the learner's process>"

    def __str__(self) -> str:
        text = self._special("str")
        return text if type(text) is str else repr(self)

    # Equality is decided here. A learner's list or dict held by reference compares by its value,
    # copied over; any other object of the learner's is equal only to itself (plain data always
    # crosses by value, and the object's own ``__eq__`` is never asked to judge anything).
    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Remote):
            same_process = remote_peer(other) is remote_peer(self)
            if same_process and remote_ref(other) == remote_ref(self):
                return True
        if not object.__getattribute__(self, "_container"):
            return False
        mine = plain(self)
        theirs = plain(other)
        return not isinstance(mine, Remote) and not isinstance(theirs, Remote) and mine == theirs

    def __ne__(self, other: Any) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((id(remote_peer(self)), remote_ref(self)))

    def __int__(self) -> int:
        value = self._special("int")
        if type(value) is not int:
            raise TypeError("int() of the learner's object is not an int")
        return value

    def __index__(self) -> int:
        value = self._special("index")
        if type(value) is not int:
            raise TypeError("the learner's object is not an index")
        return value

    def __float__(self) -> float:
        value = self._special("float")
        if type(value) is not float:
            raise TypeError("float() of the learner's object is not a float")
        return value

    @property
    def __signature__(self) -> inspect.Signature:
        parameters = []
        for entry in self._ask("signature"):
            name, kind, has_default, default = entry
            parameters.append(
                inspect.Parameter(
                    name,
                    inspect._ParameterKind(kind),
                    default=default if has_default else inspect.Parameter.empty,
                )
            )
        return inspect.Signature(parameters)


class _Method:
    """``obj.name`` of a method of the other object's class: a call is one ``method`` request."""

    __slots__ = ("owner", "name")

    def __init__(self, owner: Remote, name: str):
        self.owner, self.name = owner, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.owner.call_method(self.name, *args, **kwargs)

    @property
    def __name__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<method {self.name} of the learner's {remote_type(self.owner)}>"


def is_remote(value: Any) -> bool:
    return isinstance(value, Remote)


def remote_peer(value: Remote):
    return object.__getattribute__(value, "_peer")


def remote_ref(value: Remote) -> int:
    return object.__getattribute__(value, "_ref")


def remote_value_like(value: Remote) -> bool:
    """Whether the other object is an int, a list, a tensor... of a subclass (never plain data)."""
    return object.__getattribute__(value, "_value_like")


def remote_container(value: Remote) -> bool:
    """Whether the other object is an exact list, dict, set or deque (held by reference)."""
    return object.__getattribute__(value, "_container")


def remote_type(value: Remote) -> str:
    """The name of the other object's type, as its process reported it."""
    return object.__getattribute__(value, "_type")


def plain(value: Any) -> Any:
    """``value`` as plain data: a ``Remote`` container (a learner's list or dict, held by reference so
    that a check can change it in place) copied over by value; anything else unchanged. An object
    that is not plain data stays a ``Remote``."""
    if not isinstance(value, Remote) or not remote_container(value):
        return value  # an object that is not a list, dict, set or deque crosses by reference even in a copy
    known = remote_peer(value).known.copy(remote_ref(value))
    return remote_peer(value).request("special", target=value, name="copy", args=[]) if known is UNKNOWN else known


def learner_type(value: Any) -> Any:
    """``type(value)``, asked of the learner's process when the value lives there."""
    if not isinstance(value, Remote):
        return type(value)
    known = value._known().attribute(remote_ref(value), "__class__")
    return value._ask("getattr", name="__class__") if known is UNKNOWN else known
