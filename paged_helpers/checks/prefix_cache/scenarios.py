"""check_prefix_cache's scenarios as tables: the visible steps, in order, and the hidden kinds.

The visible scenarios live by concept (``reuse_stories``: what attach reuses and the references taken;
``eviction_stories``: LRU order, blocks in use, tails first); the hidden kinds are here. A hidden call runs
every kind in full, sized and drawn by the grader's seed.
"""

from __future__ import annotations

import random
from typing import Any

from ..story import Story
from .diagnosis import LAST_TOKEN_HINT
from .eviction_stories import (
    evict_under_pressure,
    hit_without_prefill,
    long_prompt_evicted_in_steps,
    lru_after_hit,
    shared_root,
)
from .prefix_codes import BLOCK, draw_tokens
from .prefix_server import Server
from .reuse_stories import entirely_cached, gap_before_a_cached_block, same_text_other_history, served_twice

# The visible scenarios, in order (a bug fails in the first one that shows it).
VISIBLE_SCENARIOS = (
    served_twice,
    entirely_cached,
    same_text_other_history,
    lru_after_hit,
    hit_without_prefill,
    evict_under_pressure,
    long_prompt_evicted_in_steps,
    shared_root,
    gap_before_a_cached_block,
)


def _expected_reuse(cached: set[tuple[int, ...]], prompt: list[int]) -> int:
    """Tokens attach must reuse: whole cached blocks from the start, leaving one token to prefill."""
    reused = 0
    while reused + BLOCK <= len(prompt) - 1 and tuple(prompt[: reused + BLOCK]) in cached:
        reused += BLOCK
    return reused


def _hidden_prefix_tree(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    """Nine prompts, all but one branching off an earlier prompt at a random point, some still
    running, none evicted."""
    server = Server(PrefixCache, PagedKVCache, 96, "a hidden scenario")
    cached: set[tuple[int, ...]] = set()
    prompts: list[list[int]] = []
    running: list[str] = []
    fresh_again = rng.randint(2, 8)  # one more prompt that shares nothing, somewhere in the middle
    for k in range(9):
        if k not in (0, fresh_again):
            parent = rng.choice(prompts)
            prompt = parent[: rng.randint(1, min(len(parent), 24))]
        else:
            prompt = []
        prompt = prompt + draw_tokens(rng, rng.randint(1, 12))
        seq = f"h{k}"
        server.serve(seq, prompt, f"prompt {k}", reused=_expected_reuse(cached, prompt))
        cached.update(tuple(prompt[:end]) for end in range(BLOCK, len(prompt) + 1, BLOCK))
        prompts.append(prompt)
        running.append(seq)
        if len(running) > 2 or rng.random() < 0.5:
            server.free(running.pop(rng.randrange(len(running))))
    server.finish()


def _hidden_exact_multiples(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    """Prompts whose length is a whole number of blocks, served again and extended by one token."""
    server = Server(PrefixCache, PagedKVCache, 64, "a hidden scenario")
    for k, blocks in enumerate(rng.sample((1, 2, 3, 4), 4)):
        prompt = draw_tokens(rng, BLOCK * blocks)
        server.serve(f"m{k}", prompt, f"prompt {k}", reused=0)
        server.free(f"m{k}")
        server.serve(f"n{k}", prompt, f"prompt {k} again", reused=len(prompt) - BLOCK, short_hint=LAST_TOKEN_HINT)
        server.free(f"n{k}")
        longer = prompt + draw_tokens(rng, 1)
        server.serve(f"o{k}", longer, f"prompt {k} plus one token", reused=len(prompt))
        server.free(f"o{k}")
    server.finish()


def _hidden_visible_scenarios(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    for scenario in VISIBLE_SCENARIOS:
        scenario(PrefixCache, PagedKVCache, rng)


HIDDEN_KINDS = {
    "prompts branching off earlier prompts at random points, some still running": _hidden_prefix_tree,
    "prompts of a whole number of blocks, served again and extended by one token": _hidden_exact_multiples,
    "the visible scenarios again, their tokens drawn from the grader's seed": _hidden_visible_scenarios,
}


STORY = Story(visible=VISIBLE_SCENARIOS, hidden=HIDDEN_KINDS)
