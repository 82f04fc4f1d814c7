"""check_block_allocator: a free list plus reference counts (notebook 02).

The learner writes ``BlockAllocator(num_blocks)`` with ``free`` (the free block ids),
``refs`` (one count per block: how many tables or caches point at it), ``allocate()``,
``share(block)``, ``release(block)`` and the property ``num_free``.

Invariants checked after every step: a block is in ``free`` exactly when its count is 0, and
then exactly once; ``num_free == len(free)``; allocated and free blocks add up to the pool.
Scenarios: a fresh pool, allocation until exhaustion (MemoryError, nothing changed), a shared
block released once (must stay in use), a double free (RuntimeError, nothing changed), reuse of
released blocks, and a seeded random walk of allocations, shares and releases compared
against exact counts.
"""

from __future__ import annotations

from ..registry import check
from .scenarios import STORY

__all__ = ["check_block_allocator"]


@check(notebook="02_block_allocator", builds="BlockAllocator")
def check_block_allocator(BlockAllocator: type, *, seed: int = 0, hidden: bool = False) -> str | None:  # noqa: N803
    """Exact reference counts and free list through allocation, sharing, release and exhaustion.

    ``hidden=True`` (the hidden tests, after the visible call) runs every one of ``HIDDEN_KINDS`` (a random
    walk among them) with sizes and moves drawn from ``seed``, and names none of their numbers.
    """
    return STORY.tell(BlockAllocator, seed=seed, hidden=hidden)
