"""check_prefix_cache's visible scenarios about reuse: what attach may reuse, and the references it
and remember take.

Each is a small story on a fresh ``Server`` that states how many tokens must be reused and what each
block's reference count must be: a prompt served twice (the cache's own reference keeps blocks
alive; a partial block is never published; remembering cached blocks again takes no extra
reference); a prompt that is entirely cached (one token is always left to prefill); blocks with
the same text but different histories; a gap before a cached block (attach must stop at the first
miss).
"""

from __future__ import annotations

import random
from typing import Any

from ..speaking.failure import Hint
from .diagnosis import EXTRA_REFERENCE_HINT, LEAK_HINT, OWN_REFERENCE_HINT, PARTIAL_HINT
from .prefix_codes import draw_tokens
from .prefix_expectations import expect_free, expect_refcount
from .prefix_server import Server


def served_twice(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(PrefixCache, PagedKVCache, 16, "a 10-token prompt A served, freed, then served again")
    prompt = draw_tokens(rng, 10)
    first = server.serve("a1", prompt, "A", reused=0)
    after = "remember('a1', A)"
    for block in first[:2]:
        expect_refcount(
            server,
            block,
            2,
            "a1's table + the prefix cache's own reference",
            after,
            OWN_REFERENCE_HINT,
            "publish each block once: one reference for the cache",
        )
    expect_refcount(
        server,
        first[2],
        1,
        "a1's table only: it holds 2 of 4 tokens",
        after,
        "a1 still uses its partial block",
        PARTIAL_HINT,
    )
    server.free("a1")
    expect_free(
        server,
        16 - 2,
        "free('a1')",
        "the two full blocks stay (the cache holds them), the partial one returns to the pool",
    )
    kept = Hint("the cache's blocks must survive free('a1'): " + OWN_REFERENCE_HINT.concept, OWN_REFERENCE_HINT.change)
    second = server.serve("a2", prompt, "A", reused=8, short_hint=kept)
    after = "attach('a2', A), prefill and remember('a2', A)"
    for block in second[:2]:
        expect_refcount(
            server,
            block,
            2,
            "a2's table + the prefix cache",
            after,
            "attach must share() each reused block: a2's table points at it too",
            "remember must not take a second reference on a block already cached under "
            "that prefix (skip keys that are already there)",
        )
    longer = prompt + draw_tokens(rng, 3)
    server.serve(
        "a3",
        longer,
        "A + 3 tokens",
        reused=8,
        short_hint="A's full blocks are cached: a longer prompt starting with A reuses them",
    )
    server.finish()


def entirely_cached(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(PrefixCache, PagedKVCache, 16, "a 12-token prompt B (three full blocks), cached")
    prompt = draw_tokens(rng, 12)
    first = server.serve("b1", prompt, "B", reused=0)
    for block in first:
        expect_refcount(
            server,
            block,
            2,
            "b1's table + the prefix cache",
            "remember('b1', B)",
            OWN_REFERENCE_HINT,
            "publish each block once",
        )
    server.free("b1")
    server.serve("b2", prompt, "B again", reused=8)  # all of B is cached, yet its last token is prefilled
    server.attach("b3", prompt[:9], "B[:9]", reused=8)
    server.attach("b4", prompt[:8], "B[:8]", reused=4)
    server.attach("b5", prompt[:1], "B[:1]", reused=0)
    server.finish()


def same_text_other_history(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(PrefixCache, PagedKVCache, 24, "prompts C and D cached, then blocks with their text elsewhere")
    c, d = draw_tokens(rng, 10), draw_tokens(rng, 10)
    server.serve("c", c, "C", reused=0)
    server.serve("d", d, "D", reused=0)
    server.free("c")
    server.free("d")
    shifted = c[4:8] + draw_tokens(rng, 3)  # C's second block of text, but at the start of the prompt
    server.attach("e1", shifted, "C[4:8] + 3 tokens", reused=0)
    crossed = c[:4] + d[4:8] + draw_tokens(rng, 2)  # C's first block, then D's second block of text
    server.attach("e2", crossed, "C[:4] + D[4:8] + 2 tokens", reused=4)
    server.finish()


def gap_before_a_cached_block(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = Server(
        PrefixCache,
        PagedKVCache,
        16,
        "P[:5] and P[:9] admitted together, P[:5] finished and its block evicted, then P attached",
    )
    prompt = draw_tokens(rng, 14)
    server.attach("s1", prompt[:5], "P[:5]", reused=0)
    server.attach("s2", prompt[:9], "P[:9]", reused=0)  # admitted before s1 published anything
    first = server.prefill("s1")
    second = server.prefill("s2")
    after = "remember('s2', P[:9]) with P[:4] already cached by 's1'"
    expect_refcount(
        server, first[0], 2, "s1's table + the prefix cache", after, OWN_REFERENCE_HINT, EXTRA_REFERENCE_HINT
    )
    expect_refcount(
        server,
        second[0],
        1,
        "s2's table only: P[:4] is already cached under s1's block",
        after,
        "a count below 1 means s2's block was released while s2 still uses it",
        LEAK_HINT,
    )
    expect_refcount(
        server,
        second[1],
        2,
        "s2's table + the prefix cache (P[:8] is new)",
        after,
        OWN_REFERENCE_HINT,
        EXTRA_REFERENCE_HINT,
    )
    server.free("s1")
    # P[:8]'s block is in use by s2, so only P[:4]'s entry can go: a gap before a cached block.
    server.evict_blocks(1, " with s2 still running")
    server.attach("s3", prompt, "P", reused=0, short_hint="P[:4] was evicted: nothing after it can be reused")
    server.finish()
