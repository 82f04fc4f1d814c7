"""The prefix cache as the course's tools see it: the interface notebook 05 teaches.

A prefix cache (the learner's ``PrefixCache``, or anything shaped like it) offers:

    attach(seq, prompt) -> int        create ``seq`` holding the longest cached prefix of ``prompt``
                                      (whole blocks, at least one prompt token left to compute);
                                      returns the number of tokens reused
    remember(seq, tokens) -> None     after prefill: publish ``seq``'s full blocks
    evict(blocks_wanted)              drop least recently used entries no sequence uses, until
                                      ``blocks_wanted`` blocks are free; when fewer can be freed,
                                      drop every such entry and return (the caller reads
                                      ``allocator.num_free``). Notebook 05's check also accepts a
                                      MemoryError raised before anything is dropped, the cache
                                      unchanged; a caller that is handed such a prefix cache
                                      must then catch it
    cache                             the PagedKVCache whose blocks it shares
    entries                           an ordered mapping, least recently used first:
                                      whole-prefix key (the tuple of every token up to the end of
                                      the block) -> physical block

Ownership: the prefix cache holds one reference on every block in ``entries``, and only its own
methods change ``entries``. The widgets and checks read ``entries`` through ``cached_entries``
(never write it) and call the methods; nothing else of a learner's class is assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["PrefixCacheLike", "cached_entries"]


@runtime_checkable
class PrefixCacheLike(Protocol):
    """What the course's tools use of a prefix cache (see the module docstring for the contract)."""

    cache: Any
    entries: Mapping[tuple[int, ...], int]

    def attach(self, seq: Any, prompt: list[int]) -> int: ...

    def remember(self, seq: Any, tokens: list[int]) -> None: ...

    def evict(self, blocks_wanted: int) -> Any: ...


def cached_entries(prefix_cache: Any) -> list[tuple[tuple[int, ...], int]]:
    """``prefix_cache.entries`` as (key, block) pairs in its order (least recently used first).

    Raises TypeError naming what is missing when ``prefix_cache`` is not shaped like notebook 05's.
    """
    entries = getattr(prefix_cache, "entries", None)
    if not isinstance(entries, Mapping):
        raise TypeError(
            f"{type(prefix_cache).__name__} has no `entries` mapping (whole-prefix key -> block, least recently "
            "used first), which notebook 05's PrefixCache keeps in __init__ as self.entries = OrderedDict(); "
            "the widgets read it to draw the cache"
        )
    return [(tuple(int(token) for token in key), int(block)) for key, block in entries.items()]
