"""Which of the other end's answers this end keeps as this moment's (``answers_held.Known``).

Two answers carry more than was asked: a list, dict, set or deque read by reference comes with a
copy of its contents, and a prefetch (``learner_view.prefetch``) brings many attributes at once.
Both come from the learner's process, which may answer for its own objects as it likes, as any read
lets it; what no read could bring is not kept, and the check's own read then asks: a container by
value (a read brings one by reference), a reference to what is not a container of the other end's,
a tensor or too many values kept as contents.
"""

from __future__ import annotations

import collections
from typing import Any

from .answers_held import Known
from .crossing import MAX_VALUES, MUTABLE_CONTAINERS, small_plain
from .handles import Handles

__all__ = ["keep_copy", "keep_prefetched"]


def keep_copy(container: Any, contents: Any, *, known: Known, handles: Handles) -> None:
    """Keep ``contents`` as what ``container`` (a stand-in of the other end's list, dict, set or deque)
    holds this moment, when they are small plain data."""
    from .remote import remote_container

    ref = handles.theirs(container)
    if ref is not None and remote_container(container) and small_plain(contents, MAX_VALUES) >= 0:
        if type(contents) in (list, dict, set, collections.deque, collections.OrderedDict):
            known.copies[ref] = contents


def keep_prefetched(records: list, *, known: Known, handles: Handles) -> None:
    """Keep each ``[holder, name, kind, value(, copy)]`` record of a prefetch's answer that a read could
    have brought (``prefetch.read_here`` makes them); skip every other one."""
    from .remote import remote_container

    for record in records:
        if type(record) is not list or len(record) not in (4, 5) or type(record[1]) is not str:
            continue
        holder, name, kind, value = record[:4]
        where = handles.theirs(holder)
        if where is None or kind not in ("ref", "value") or small_plain(value, MAX_VALUES) < 0:
            continue
        if kind == "ref" and not (handles.theirs(value) is not None and remote_container(value)):
            continue  # a reference, but not to a list, dict, set or deque of the other end's
        if kind == "value" and type(value) in MUTABLE_CONTAINERS:
            continue  # a container comes by reference, as a getattr's answer brings it
        known.attributes.setdefault(where, {})[name] = value
        if kind == "ref" and len(record) == 5:
            keep_copy(value, record[4], known=known, handles=handles)
