"""How a value crosses: by reference or as a copy, and how big a copy may be.

The vocabulary that the two ends (``peer``) and the read-ahead (``prefetch``) share, beneath both:
which containers a read hands over by reference (a check may change the learner's ``lengths``
dict in place, as in one process), which types count as values rather than objects, the two
wrappers that say how to send a container, and ``small_plain``, the size of a copy.
"""

from __future__ import annotations

import collections
from typing import Any

import torch

# What a read of an attribute or an item hands over by reference, not as a copy: a check may change
# the learner's ``lengths`` dict or ``running`` list in place, as it would in one process.
MUTABLE_CONTAINERS = (list, dict, set, collections.deque, collections.OrderedDict, collections.defaultdict)


VALUE_TYPES = (int, float, complex, str, bytes, list, tuple, dict, set, frozenset, collections.deque, torch.Tensor)


class ByValue:
    """A container to send as a copy even where it would go by reference (``plain``)."""

    def __init__(self, value: Any):
        self.value = value


class ByReference:
    """A container to send by reference, even where it comes with a copy of its contents."""

    def __init__(self, value: Any):
        self.value = value


# Values (items of lists, dicts, ...) in one answer that is kept as known (a prefetch's), at most.
MAX_VALUES = 200_000
# What a copy that comes with a container read by reference may hold, at most.
MAX_COPY_VALUES = 20_000

DICTS = (dict, collections.OrderedDict, collections.defaultdict)
SEQUENCES = (list, tuple, collections.deque)
CONTAINERS = (*DICTS, *SEQUENCES, set, frozenset)


def small_plain(value: Any, budget: int) -> int:
    """The values in ``value`` (its own and those of the builtin containers inside it), or -1 when
    it holds a tensor or an array (sent with its bytes, never kept as a known answer) or more than
    ``budget`` values, or is nested too deeply to send."""
    count, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        kind = type(item)
        if count > budget or depth > 32 or isinstance(item, torch.Tensor) or kind.__name__ == "ndarray":
            return -1
        if kind in DICTS:
            stack.extend((part, depth + 1) for pair in dict.items(item) for part in pair)
        elif kind in CONTAINERS:
            stack.extend((part, depth + 1) for part in item)
    return count
