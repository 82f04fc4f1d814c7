"""A paged cache's bookkeeping, read strictly as plain copies: the one reader of every check.

Every check that drives a learner's ``PagedKVCache`` reads the same four things between steps:
``tables``, ``lengths``, ``allocator.refs`` and ``allocator.num_free``. ``CacheReads(cache)`` reads
each through the strict readers (``strict.py``: a learner's int, list or dict subclass cannot answer
for itself, and what comes back is a copy the check may keep), after fetching them all in one request
when the cache lives in the learner's process (``read_cache_ahead``; each later read is
answered from that until the learner's code runs again). A message about an odd value names the
scenario the read was made in.
"""

from __future__ import annotations

from typing import Any

from .calls import call_learner
from .learner_code import read_ahead
from .strict import learner_dict, learner_int, learner_int_list

__all__ = ["CACHE_READS", "PAGED_CACHE_SIZES", "CacheReads", "new_paged_cache", "read_cache_ahead"]

PAGED_CACHE_SIZES = ("layers", "num_blocks", "block_size", "kv_heads", "head_dim")
# A paged cache's bookkeeping, as the checks read it after a step.
CACHE_READS = ("tables", "lengths", "block_size", "allocator", "allocator.refs", "allocator.free", "allocator.num_free")


def read_cache_ahead(cache: Any) -> None:
    """Fetch ``CACHE_READS`` of the learner's cache in one request when it lives in another process
    (``learner_code.read_ahead``): the reads that follow, until the learner's code runs again, are
    answered from it. In one process, nothing to do."""
    read_ahead(cache, names=CACHE_READS)


def new_paged_cache(PagedKVCache: Any, sizes: tuple[int, ...], *, scenario: str, **options: Any) -> Any:  # noqa: N803
    """The learner's ``PagedKVCache(layers, num_blocks, block_size, kv_heads, head_dim, **options)``.

    ``sizes`` holds those five numbers, in that order; a message names the call with them.
    """
    shown = [f"{name}={value}" for name, value in zip(PAGED_CACHE_SIZES, sizes, strict=True)]
    shown += [f"{name}={value}" for name, value in options.items()]
    return call_learner(f"PagedKVCache({', '.join(shown)})", PagedKVCache, *sizes, scenario=scenario, **options)


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
