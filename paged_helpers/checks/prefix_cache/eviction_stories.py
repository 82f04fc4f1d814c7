"""check_prefix_cache's visible scenarios about eviction: LRU order, blocks in use, and tails first.

Each is a small story on a fresh ``Server``: LRU order after a hit (with and without prefill);
eviction while some cached blocks are in use, asking for more blocks than can be freed (evict
frees what it can and returns, or raises MemoryError having changed nothing: both pass); partial
eviction of a 3-block prompt (served, attached without prefill, served again) and of two prompts
sharing a root, after which every block the cache still holds must be reachable by attach (tails
go first, so no entry outlives an earlier block).
"""

from __future__ import annotations

import random
from typing import Any

from ..speaking.failure import fail
from .diagnosis import EXTRA_REFERENCE_HINT, HIT_WITHOUT_PREFILL_HINT, LRU_TOUCH_HINT, STRANDED_HINT
from .prefix_codes import draw_tokens
from .prefix_expectations import expect_free, expect_one_evicted, expect_reachable, expect_refcount
from .prefix_server import Server


def lru_after_hit(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(PrefixCache, PagedKVCache, 12, "F then G cached, F hit again, then evict one block")
    f, g = draw_tokens(rng, 9), draw_tokens(rng, 9)
    f_blocks = server.serve("f1", f, "F", reused=0)[:2]
    server.free("f1")
    g_blocks = server.serve("g1", g, "G", reused=0)[:2]
    server.free("g1")
    server.serve("f2", f, "F", reused=8)  # a hit: F's entries become the most recently used
    server.free("f2")
    wanted = server.reads.num_free(server.scenario) + 1
    server.evict(wanted)
    after = f"evict({wanted}) (one more block wanted)"
    expect_one_evicted(server, wanted, after)
    for block in f_blocks:
        expect_refcount(
            server, block, 1, "F's block, used just now: still cached", after, LRU_TOUCH_HINT, EXTRA_REFERENCE_HINT
        )
    _expect_g_tail_evicted(server, g_blocks, after)
    server.attach("f3", f, "F", reused=8, short_hint="F's blocks were used after G's and must still be cached")
    server.finish()


def _expect_g_tail_evicted(server: Server, g_blocks: list[int], after: str) -> None:
    """Of G's two cached blocks, the least recently used entries, the tail went: its root stays reachable."""
    refs = server.reads.refs(f"{server.scenario}, after {after}")
    if refs[g_blocks[0]] == 0 and refs[g_blocks[1]] == 1:
        fail(
            f"{server.scenario}, after {after}",
            f"G's last full block (block {g_blocks[1]}) evicted, its first (block {g_blocks[0]}) kept",
            f"block {g_blocks[0]}, G's first block, evicted: block {g_blocks[1]} stays cached but is now "
            "unreachable (attach stops at G's first block)",
            STRANDED_HINT,
        )
    expect_refcount(
        server,
        g_blocks[1],
        0,
        "G's last full block, the least recently used entry: evicted",
        after,
        "a count below 0 means a block was released more often than it was shared",
        "evict the least recently used entry first: G's (F was hit after G was cached), and of G's "
        "entries its tail (G's second block), since a prompt's entries are touched tail first",
    )


def hit_without_prefill(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(
        PrefixCache, PagedKVCache, 12, "F then G cached, F attached and undone before prefill, then evict 2"
    )
    f, g = draw_tokens(rng, 9), draw_tokens(rng, 9)
    f_blocks = server.serve("f1", f, "F", reused=0)[:2]
    server.free("f1")
    server.serve("g1", g, "G", reused=0)
    server.free("g1")
    # An engine attaches F, finds no room for the rest and frees it again: attach alone was the hit.
    server.attach("f2", f, "F", reused=8)
    server.free("f2")
    after = server.evict_blocks(2, " after F's hit")
    for block in f_blocks:
        expect_refcount(
            server,
            block,
            1,
            "F's block, hit after G's were cached: still cached",
            after,
            HIT_WITHOUT_PREFILL_HINT,
            EXTRA_REFERENCE_HINT,
        )
    server.finish()


def evict_under_pressure(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(PrefixCache, PagedKVCache, 12, "H cached and still running, I cached and finished, evict all")
    h, i = draw_tokens(rng, 9), draw_tokens(rng, 9)
    h_blocks = server.serve("h1", h, "H", reused=0)  # h1 keeps running: its blocks are in use
    server.serve("i1", i, "I", reused=0)
    server.free("i1")
    server.evict(12)
    after = "evict(12) with H's cached blocks still in use by 'h1'"
    for block in h_blocks[:2]:
        expect_refcount(
            server,
            block,
            2,
            "h1's table + the prefix cache: in use, so not evictable",
            after,
            "evict must skip blocks that someone else uses (refcount above 1): dropping them "
            "frees no memory and throws away a prefix that is still hot",
            EXTRA_REFERENCE_HINT,
        )
    expect_free(
        server,
        12 - 3,
        after,
        "every cached block nobody else uses (I's two) goes back to the pool; H's three blocks stay in use",
    )
    server.attach("h2", h, "H", reused=8, short_hint="H's entries are in use and must survive evict")
    server.finish()


def long_prompt_evicted_in_steps(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(
        PrefixCache, PagedKVCache, 16, "a 13-token prompt A (three full blocks) cached, then evicted in steps"
    )
    prompt = draw_tokens(rng, 13)
    server.serve("a1", prompt, "A", reused=0)
    server.free("a1")
    after = server.evict_blocks(1, " after A was served and freed")
    expect_reachable(server, after, {"A": (prompt, 8)})
    # An engine attaches, finds no room for the rest, and undoes the admission before any prefill.
    server.attach("a2", prompt, "A", reused=8, short_hint="A's first two blocks must still be cached")
    server.free("a2")
    after = server.evict_blocks(1, " after A was attached and freed again without prefill")
    expect_reachable(server, after, {"A": (prompt, 4)})
    # Served again: attach reuses block 0, remember publishes blocks 1 and 2 anew.
    server.serve("a3", prompt, "A", reused=4, short_hint="A's first block must still be cached")
    server.free("a3")
    after = server.evict_blocks(2, " after A was served again from its first block")
    expect_reachable(server, after, {"A": (prompt, 4)})
    server.finish()


def shared_root(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(
        PrefixCache, PagedKVCache, 16, "prompts A and B sharing their first block, cached, then evicted in steps"
    )
    root = draw_tokens(rng, 4)
    a, b = root + draw_tokens(rng, 9), root + draw_tokens(rng, 9)
    server.serve("a", a, "A", reused=0)
    server.free("a")
    server.serve("b", b, "B", reused=4, short_hint="B starts with A's first block, which is cached")
    server.free("b")
    after = server.evict_blocks(1, " after A, then B, were served and freed")
    expect_reachable(server, after, {"A": (a, 8), "B": (b, 12)})
    after = server.evict_blocks(2, " after A, then B, were attached again")
    expect_reachable(server, after, {"A": (a, 4), "B": (b, 8)})
    server.finish()
