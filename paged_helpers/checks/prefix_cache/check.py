"""The check for notebook 05: a prefix cache that reuses full blocks of earlier prompts.

check_prefix_cache(PrefixCache, PagedKVCache, seed=0)
    Serves seeded prompts through the learner's ``PrefixCache`` on the learner's cache (blocks
    of 4) the way an engine does (``prefix_server.Server``): ``attach``, reserve and prefill the rest (the
    check writes each position's key straight into the pool, a number that stands for the whole
    prefix up to that position: ``prefix_codes``), ``remember``, and later ``free`` and ``evict``.
    Each scenario (``scenarios``) states how many tokens must be reused and what each block's
    reference count must be, and reused blocks are read back to make sure they hold this prompt's
    history, not another one's (``prefix_expectations``).
"""

from __future__ import annotations

from typing import Any

from ..registry import check
from .scenarios import STORY

__all__ = ["check_prefix_cache"]


@check(notebook="05_prefix_caching", builds="PrefixCache", partners=(("04_fork_and_copy_on_write", "PagedKVCache"),))
def check_prefix_cache(PrefixCache: Any, PagedKVCache: Any, seed: int = 0, hidden: bool = False) -> str | None:
    """Reuse, references, history-aware keys, the token left to prefill, LRU and eviction rules.

    ``hidden=True`` (the hidden tests) runs every one of ``scenarios.HIDDEN_KINDS`` instead, sized by ``seed``.
    """
    return STORY.tell(PrefixCache, PagedKVCache, seed=seed, hidden=hidden)
