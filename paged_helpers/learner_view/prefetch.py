"""Reading several attributes of the learner's objects in one request: a tree's nodes, a pool's counts.

    prefetch(allocator, names=("free", "refs", "num_free"))
    prefetch(radix, allocator, names=("root", "children", "tokens", "refs"), follow=("root", "children"))

A check that reads the learner's bookkeeping after every step reads many attributes, each a round
trip when the learner's objects live in another process. ``prefetch`` asks for them all at once:
where the objects live, ``read_here`` reads each named attribute of each object with ``getattr``
(exactly the read a check makes, so a property or a subclass answers as it would to the check), and
goes on to every object held in an attribute named in ``follow`` (the attribute itself, a dict's
values, a list's items), breadth first, at most ``limit`` objects. What it read comes back as plain
data (``wire``) and is kept as this moment's answers (``known``): the check then reads the
attributes as before, and each read is answered here until this side sends its next message.

``prefetch`` changes no answer, only where it comes from: in one process it does nothing (the check
reads the objects themselves); an attribute whose read raises, holds a tensor, or does not fit the
budget is left out, and the check's own read of it asks the learner's process, which raises or
answers as it always did. The reader runs no check and knows no expected value: it reads attributes.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from .crossing import (
    DICTS,
    MAX_COPY_VALUES,
    MAX_VALUES,
    MUTABLE_CONTAINERS,
    SEQUENCES,
    VALUE_TYPES,
    ByReference,
    small_plain,
)

__all__ = ["prefetch", "read_here"]

# Objects read by one prefetch, at most.
MAX_OBJECTS = 4096


def _is_object(value: Any) -> bool:
    """An object the wire names by reference (not a value it copies), so one a tree may lead to."""
    return value is not None and type(value) is not bool and not isinstance(value, (*VALUE_TYPES, type))


def _held(value: Any) -> list:
    """The objects ``value`` holds, where ``follow`` leads: a dict's values, a list's or tuple's items."""
    if type(value) in DICTS:
        items = list(dict.values(value))
    elif type(value) in SEQUENCES:
        items = list(value)
    else:
        items = [value]
    return [item for item in items if _is_object(item)]


def read_here(starts: list, names: list[str], follow: list[str], limit: int) -> list:
    """The learner's end: ``[[holder, name, kind, value(, copy)], ...]`` for each attribute read.

    ``kind`` is ``"ref"`` for a list, dict, set or deque (sent by reference, as a ``getattr`` answer
    sends it, with its contents as ``copy`` when they fit), ``"value"`` otherwise. A dotted name
    (``"allocator.refs"``) reads each step, on the object the step before gave.
    """
    for what in (names, follow):
        if type(what) is not list or any(type(name) is not str for name in what) or len(what) > 32:
            raise TypeError("a prefetch names up to 32 attributes")
    if not set(follow) <= set(names) or type(starts) is not list or type(limit) is not int:
        raise TypeError("a prefetch follows attributes it reads, from a list of objects")
    limit = min(limit, MAX_OBJECTS)
    records: list = []
    budget = MAX_VALUES
    seen, queue, read = {id(start) for start in starts}, collections.deque(starts), 0
    while queue and read < limit and budget > 0:
        obj, read = queue.popleft(), read + 1
        for path in names:
            holder = obj
            for step in path.split("."):
                try:
                    value = getattr(holder, step)
                except Exception:  # noqa: BLE001 - left out: the check's own read raises it
                    break
                if type(value) in MUTABLE_CONTAINERS:
                    size = small_plain(value, min(budget, MAX_COPY_VALUES))
                    record = [holder, step, "ref", ByReference(value)]
                    records.append(record + [value] if size >= 0 else record)
                    budget -= max(size, 1)
                else:
                    size = small_plain(value, budget)
                    if size < 0:
                        break  # a tensor, or too much: the check's own read brings it
                    records.append([holder, step, "value", value])
                    budget -= size
                if path in follow:
                    for item in _held(value):
                        if id(item) not in seen:
                            seen.add(id(item))
                            queue.append(item)
                holder = value
    return records


def prefetch(*objects: Any, names: Sequence[str], follow: Sequence[str] = (), limit: int = MAX_OBJECTS) -> None:
    """Read ``names`` of each of ``objects`` (and of every object reached through the attributes named
    in ``follow``) in one request, when they live in the learner's process; in this one, nothing to do."""
    from .remote import is_remote, remote_peer

    remote = [obj for obj in objects if is_remote(obj)]
    if remote and all(remote_peer(obj) is remote_peer(remote[0]) for obj in remote):
        remote_peer(remote[0]).prefetch(remote, list(names), list(follow), limit)
