"""A paged cache's blocks in the checks: who holds each one, and what the allocator must say.

The checks of notebooks 03 and 04 keep their own account of every block table; these helpers
compare it with the learner's allocator through the pool's one invariant reader
(``pool_invariant.PoolReading``): each block's count is the number of its holders,
the free list is exactly the blocks nobody holds, each once, and ``num_free`` is its length.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...learner_view.prefetch import prefetch
from ..speaking.failure import Hint, fail
from .calls import call_learner
from .pool_invariant import PoolReading
from .strict import learner_int, learner_int_list

PAGED_CACHE_SIZES = ("layers", "num_blocks", "block_size", "kv_heads", "head_dim")
# A paged cache's bookkeeping, as the checks read it after a step.
CACHE_READS = ("tables", "lengths", "block_size", "allocator", "allocator.refs", "allocator.free", "allocator.num_free")


def read_cache_ahead(cache: Any) -> None:
    """Fetch ``CACHE_READS`` of the learner's cache in one request when it lives in another process
    (``learner_view.prefetch``): the reads that follow, until the learner's code runs again, are
    answered from it. In one process, nothing to do."""
    prefetch(cache, names=CACHE_READS)


def new_paged_cache(PagedKVCache: Any, sizes: tuple[int, ...], *, scenario: str, **options: Any) -> Any:  # noqa: N803
    """The learner's ``PagedKVCache(layers, num_blocks, block_size, kv_heads, head_dim, **options)``.

    ``sizes`` holds those five numbers, in that order; a message names the call with them.
    """
    shown = [f"{name}={value}" for name, value in zip(PAGED_CACHE_SIZES, sizes, strict=True)]
    shown += [f"{name}={value}" for name, value in options.items()]
    return call_learner(f"PagedKVCache({', '.join(shown)})", PagedKVCache, *sizes, scenario=scenario, **options)


def ceil_div(count: int, size: int) -> int:
    """``count / size`` rounded up, in integers: the blocks that hold ``count`` tokens."""
    return -(-count // size)


def block_holders(tables: dict, num_blocks: int) -> list[list]:
    """For each block id, the sequences whose table names it (once per entry that names it)."""
    holders: list[list] = [[] for _ in range(num_blocks)]
    for seq, table in tables.items():
        for block in table:
            if isinstance(block, int) and 0 <= block < num_blocks:
                holders[block].append(seq)
    return holders


def expect_pool_matches(
    allocator: Any, holders: list[list], where: str, hint: Callable[[int, list, int], str | Hint]
) -> PoolReading:
    """The allocator agrees with the check's account of who holds each block.

    Who owns a reference is the caller's account (``holders[block]``: the tables, or anything else
    that keeps a block alive); this compares it with the pool's own invariant: each block's count is
    the number of its holders; the free list is exactly the blocks nobody holds, each once;
    ``num_free`` is the length of the free list. ``hint(block, holders, count)`` explains a count.
    """
    reading = PoolReading.of(allocator)
    for block, who in enumerate(holders):
        count = reading.refs[block]
        if count != len(who):
            fail(
                f"{where}: the reference count of block {block}",
                f"refcount {len(who)} (the tables holding it: {who or 'none'})",
                f"refcount {count}",
                hint(block, who, count),
            )
    unused = [block for block, who in enumerate(holders) if not who]
    if sorted(reading.free) != unused:
        lost, twice = reading.lost(), reading.twice_on_free_list()
        if lost:
            why = (
                f"block(s) {lost} have count 0 but are not on the free list: the release that brings a count "
                "to 0 must put the block back on the free list"
            )
        elif twice:
            why = f"block(s) {twice} are on the free list more than once: allocate() would hand them out twice"
        else:
            why = "a block returns to the free list when its last reference is released, not before"
        fail(f"{where}: the allocator's free list", f"exactly the unused blocks {unused}", sorted(reading.free), why)
    if not reading.num_free_agrees():
        fail(f"{where}: allocator.num_free", len(unused), reading.num_free, "num_free counts the blocks nobody holds.")
    return reading


def expect_all_free(allocator: Any, num_blocks: int, where: str, hint: str | Hint) -> None:
    """Every sequence is gone: all ``num_blocks`` blocks must be free again (nothing leaked)."""
    free = learner_int(allocator.num_free, "allocator.num_free", where)
    if free != num_blocks:
        refs = learner_int_list(allocator.refs, "allocator.refs", where)
        stuck = [block for block, count in enumerate(refs) if count]
        fail(
            where,
            f"all {num_blocks} blocks free",
            f"{free} free; block(s) {stuck} still counted as used",
            hint,
        )
