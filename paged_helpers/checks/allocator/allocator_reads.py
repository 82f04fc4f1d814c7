"""The learner's allocator, read strictly: its members (``free``, ``refs``, ``num_free``) as plain data.

A missing member is named as missing (not as an AttributeError of the check's), a property that
raises is read again through ``call_learner`` to name its error, and ``free`` must be an ordered
sequence (the notebook's deque, or a list or tuple): a set or dict would hide a block freed twice.
"""

from __future__ import annotations

from collections import deque

from ..reading.calls import call_learner
from ..reading.learner_code import learner_type, read_ahead
from ..reading.strict import learner_int, learner_int_list, look_alike, type_name
from ..speaking.failure import fail
from .diagnosis import FREE_LIST_IS_A_QUEUE

__all__ = ["MEMBERS", "free_list", "member", "state"]

# The members the check reads, and what ``member`` reads to tell a missing one: fetched in one request
# when the allocator lives in another process (read_ahead; each read below as before).
MEMBERS = ("free", "refs", "num_free")
_MEMBER_READS = ("__dict__", *MEMBERS, *(f"__class__.{name}" for name in MEMBERS))

# The containers `free` may be: the notebook asks for a deque; a list or tuple reads the same way.
_FREE_LIST_TYPES = (deque, list, tuple)


def member(allocator: object, name: str, scenario: str) -> object:
    """``allocator.name``, with a clear message when it is missing or when reading it raises (a property)."""
    read_ahead(allocator, names=_MEMBER_READS)
    if name not in getattr(allocator, "__dict__", {}) and not hasattr(learner_type(allocator), name):
        fail(
            scenario,
            f"an attribute `{name}`",
            "no such attribute",
            f"BlockAllocator needs `{name}` (see the table at the top of the notebook).",
        )
    try:
        return getattr(allocator, name)
    except Exception:  # a property of the learner's raised: read it again to name the error
        return call_learner(f"reading `{name}`", getattr, allocator, name, scenario=scenario)


def free_list(value: object, scenario: str) -> list[int]:
    """``free`` in order. A set or dict (or any other plain container) is a wrong design, named as such;
    a look-alike built to answer comparisons is refused by ``learner_int_list``."""
    if type(value) not in _FREE_LIST_TYPES and not look_alike(value):
        fail(
            f"{scenario}: `free`",
            "a collections.deque of the free block ids (a list is read the same way)",
            f"a value of type {type_name(value)}",
            FREE_LIST_IS_A_QUEUE,
        )
    return learner_int_list(value, "free", scenario)


def state(allocator: object, scenario: str) -> tuple[list[int], list[int], int]:
    """(free ids in order, refs, num_free), with a clear message when an attribute is missing."""
    free = free_list(member(allocator, "free", scenario), scenario)
    refs = learner_int_list(member(allocator, "refs", scenario), "refs", scenario)
    return free, refs, learner_int(member(allocator, "num_free", scenario), "num_free", scenario)
