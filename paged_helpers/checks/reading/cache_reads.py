"""A paged cache's bookkeeping, read strictly as plain copies: the one reader of every check.

Every check that drives a learner's ``PagedKVCache`` reads the same four things between steps:
``tables``, ``lengths``, ``allocator.refs`` and ``allocator.num_free``. ``CacheReads(cache)`` reads
each through the strict readers (``strict.py``: a learner's int, list or dict subclass cannot answer
for itself, and what comes back is a copy the check may keep), after fetching them all in one request
when the cache lives in the learner's process (``pool_accounts.read_cache_ahead``; each later read is
answered from that until the learner's code runs again). A message about an odd value names the
scenario the read was made in.
"""

from __future__ import annotations

from typing import Any

from .pool_accounts import read_cache_ahead
from .strict import learner_dict, learner_int, learner_int_list

__all__ = ["CacheReads"]


class CacheReads:
    """Plain copies of ``cache``'s bookkeeping, read when asked (never kept: the learner's code may
    change it between two reads)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def tables(self, where: str) -> dict:
        """Every sequence -> its table, as lists of ints."""
        read_cache_ahead(self.cache)
        return learner_dict(self.cache.tables, "cache.tables", where, learner_int_list)

    def table(self, seq: Any, where: str) -> list[int]:
        read_cache_ahead(self.cache)
        return learner_int_list(self.cache.tables[seq], f"tables[{seq!r}]", where)

    def lengths(self, where: str) -> dict:
        read_cache_ahead(self.cache)
        return learner_dict(self.cache.lengths, "cache.lengths", where, learner_int)

    def length(self, seq: Any, where: str) -> int:
        read_cache_ahead(self.cache)
        return learner_int(self.cache.lengths[seq], f"lengths[{seq!r}]", where)

    def refs(self, where: str) -> list[int]:
        read_cache_ahead(self.cache)
        return learner_int_list(self.cache.allocator.refs, "allocator.refs", where)

    def num_free(self, where: str) -> int:
        read_cache_ahead(self.cache)
        return learner_int(self.cache.allocator.num_free, "allocator.num_free", where)
