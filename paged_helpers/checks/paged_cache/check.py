"""check_paged_kv_cache: the paged KV cache, block by block and then on the real model (notebook 03).

The learner writes ``PagedKVCache(layers, num_blocks, block_size, kv_heads, head_dim, device,
dtype)`` with ``create``, ``blocks_needed``, ``reserve``, ``set_batch``, ``update``, ``free``
and ``truncate``, on top of their own ``BlockAllocator`` (``cache.allocator``).

The check tells two stories (``scenarios``): ``CACHE_STORY``, named steps an engine takes, each
followed by its expectations (``cache_harness``, ``kv_writes``), then ``MODEL_STORY``, the course's
tiny Qwen3 on a fresh cache, every step's logits against a from-scratch run (``model_harness``).
After every step the learner's tables must equal the check's own account, each block in a table
must have count 1, and every other block must be on the free list exactly once (``cache_account``).
"""

from __future__ import annotations

import functools

from ..registry import check
from ..story import Story
from .scenarios import HIDDEN_KINDS, visible_story

__all__ = ["check_paged_kv_cache"]


@check(notebook="03_paged_kv_cache", builds="PagedKVCache")
def check_paged_kv_cache(PagedKVCache: type, *, seed: int = 0, hidden: bool = False) -> str | None:  # noqa: N803
    """Block accounting, placement through block tables, and the tiny Qwen3's logits on the cache.

    ``hidden=True`` (the hidden tests) runs every one of ``HIDDEN_KINDS`` instead, sized by ``seed``:
    the visible call in the same cell runs the visible story.
    """
    story = Story(visible=(functools.partial(visible_story, seed=seed),), hidden=HIDDEN_KINDS)
    return story.tell(PagedKVCache, seed=seed, hidden=hidden)
