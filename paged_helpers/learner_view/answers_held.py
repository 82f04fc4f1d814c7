"""What the checking side already knows of the learner's objects, until the learner's process runs again.

The learner's process runs code only when it is sent a message (a request, or the answer to one of
its own). So whatever it said since this side last sent anything still holds: an attribute read a
moment ago reads the same now, and a list that arrived by reference still holds what came with it.
``Known`` keeps those answers, and ``Peer._send`` forgets them all (``Peer.known`` is replaced on
every message out), so a value served from here is exactly what a request would have brought back,
without the round trip.

Two things fill it, both plain data the learner's process sent:

* the copy that comes with a learner's list, dict, set or deque read by reference (a ``getattr`` or
  ``getitem`` answer): ``plain``, ``len``, iterating and ``in`` read it instead of asking again;
* ``learner_view.prefetch``: several attributes of an object, or of every node of a tree, read in
  one request.

Each read hands out a fresh copy of the containers (as a fresh answer would), never the stored one.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["Known", "UNKNOWN", "fresh", "has_remote"]


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()  # not known: ask the learner's process


def fresh(value: Any) -> Any:
    """A copy of ``value``'s containers (what decoding the same answer again would give)."""
    kind = type(value)
    if kind is list:
        return [fresh(item) for item in value]
    if kind is tuple:
        return tuple(fresh(item) for item in value)
    if kind is dict:
        return {key: fresh(item) for key, item in value.items()}
    if kind is collections.OrderedDict:
        return collections.OrderedDict((key, fresh(item)) for key, item in value.items())
    if kind is set:
        return {fresh(item) for item in value}
    if kind is collections.deque:
        return collections.deque(fresh(item) for item in value)
    return value  # an immutable value, or the stand-in of an object (the same one a fresh answer names)


def has_remote(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` holds an object of the other side (or anything but plain data)."""
    kind = type(value)
    if depth > 64:
        return True  # a stand-in (``remote.Remote``) is none of the plain types below
    if kind in (list, tuple, set, collections.deque):
        return any(has_remote(item, depth + 1) for item in value)
    if kind in (dict, collections.OrderedDict):
        return any(has_remote(key, depth + 1) or has_remote(item, depth + 1) for key, item in value.items())
    return kind not in (type(None), bool, int, float, str)


class Known:
    """The answers of one moment (between two messages this side sends), by the other side's object id."""

    def __init__(self) -> None:
        self.attributes: dict[int, dict[str, Any]] = {}  # object id -> attribute name -> value
        self.copies: dict[int, Any] = {}  # object id of a list, dict, set or deque -> its contents
        self.prefetched: set[tuple] = set()  # the prefetches made (learner_view.prefetch), as asked

    def attribute(self, ref: int, name: str) -> Any:
        value = self.attributes.get(ref, {}).get(name, UNKNOWN)
        return value if value is UNKNOWN else fresh(value)

    def knows(self, refs: tuple[int, ...], names: list[str]) -> bool:
        """Whether every one of ``names`` (no dotted one) of every object in ``refs`` is known."""
        return all("." not in name and name in self.attributes.get(ref, {}) for ref in refs for name in names)

    def copy(self, ref: int) -> Any:
        value = self.copies.get(ref, UNKNOWN)
        return value if value is UNKNOWN else fresh(value)

    def length(self, ref: int) -> Any:
        value = self.copies.get(ref, UNKNOWN)
        return value if value is UNKNOWN else len(value)

    def truth(self, ref: int) -> Any:
        value = self.copies.get(ref, UNKNOWN)
        return value if value is UNKNOWN else bool(value)

    def items(self, ref: int) -> Any:
        """``list(container)`` as the other side would give it: not for a set (its order is the other
        process's, which a set made here need not keep)."""
        value = self.copies.get(ref, UNKNOWN)
        if value is UNKNOWN or type(value) is set:
            return UNKNOWN
        return fresh(list(value))

    def contains(self, ref: int, item: Any) -> Any:
        """``item in container``, when both are plain data (so no object's ``__eq__`` could take part)."""
        value = self.copies.get(ref, UNKNOWN)
        if value is UNKNOWN or has_remote(item):
            return UNKNOWN
        compared = list(value.keys()) if type(value) in (dict, collections.OrderedDict) else value
        if has_remote(list(compared)):
            return UNKNOWN
        try:
            return item in value
        except TypeError:  # an unhashable item: the other side raises, and says so
            return UNKNOWN

    def item(self, ref: int, key: Any) -> Any:
        """``container[key]`` for a key that is there and an item that is plain and immutable (a
        container item arrives by reference, which only a request can give)."""
        value = self.copies.get(ref, UNKNOWN)
        if value is UNKNOWN or type(key) not in (int, str, tuple) or has_remote(key) or not _hashable(key):
            return UNKNOWN
        if type(value) in (dict, collections.OrderedDict):
            if has_remote(list(value.keys())) or key not in value:
                return UNKNOWN
            found = value[key]
        elif type(value) in (list, collections.deque) and type(key) is int and -len(value) <= key < len(value):
            found = value[key]
        else:
            return UNKNOWN
        return found if _immutable_plain(found) else UNKNOWN


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _immutable_plain(value: Any) -> bool:
    if type(value) in (type(None), bool, int, float, str):
        return True
    return type(value) is tuple and all(_immutable_plain(item) for item in value)
