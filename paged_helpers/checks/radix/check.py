"""Notebook 10's checks, each entry naming its story and telling it.

    check_radix_cache        the tree's bookkeeping on the learner's allocator (scenarios: TREE_STORY)
    check_cache_aware_order  admission order on waiting queues (order.scenarios: ORDER_STORY)
    check_radix_logits       the tree on the learner's paged cache under the tiny Qwen3 (on_the_model.scenarios)

Registered in the order notebook 10's cells call them: the tree's checks first.
"""

from __future__ import annotations

from typing import Any

from ..registry import check
from .on_the_model.scenarios import model_story
from .order.scenarios import ORDER_STORY
from .scenarios import TREE_STORY

__all__ = ["check_cache_aware_order", "check_radix_cache", "check_radix_logits"]


@check(notebook="10_radix_cache", builds="RadixCache", partners=(("02_block_allocator", "BlockAllocator"),))
def check_radix_cache(RadixCache: Any, BlockAllocator: Any, seed: int = 0) -> None:  # noqa: N803
    """Longest-prefix matches, splits, references, locks, LRU leaf eviction, a pool under pressure."""
    return TREE_STORY.tell(RadixCache, BlockAllocator, seed=seed)


@check(notebook="10_radix_cache", builds="cache_aware_order")
def check_cache_aware_order(cache_aware_order: Any, *, seed: int = 0, hidden: bool = False) -> None:
    """Most cached tokens first, ties by arrival, starving requests before everyone.

    ``hidden=True`` (the hidden tests): every kind of ``order.scenarios._HIDDEN_QUEUES``, at its fixed size and
    number of starving requests, drawn from ``seed`` until each slip the kind is meant for orders it otherwise.
    """
    return ORDER_STORY.tell(cache_aware_order, seed=seed, hidden=hidden)


@check(
    notebook="10_radix_cache",
    builds="RadixCache",
    partners=(("04_fork_and_copy_on_write", "PagedKVCache"),),
)
def check_radix_logits(RadixCache: Any, PagedKVCache: Any, seed: int = 0) -> str:  # noqa: N803
    """Requests reusing the tree's blocks on the tiny Qwen3 give their from-scratch logits."""
    return model_story(seed).tell(RadixCache, PagedKVCache, seed=seed)
