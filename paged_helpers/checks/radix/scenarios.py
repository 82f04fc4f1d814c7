"""The scenarios of ``check_radix_cache``: five visible steps, each a story of an engine's requests on
the learner's tree (``TreeEngine``), its tokens drawn from the check's rng in the order written.

    _every_prefix          A, B, C, D sharing prefixes of 0, 1 and 2 blocks: every prefix of each, and
                           each with other tokens after it, matched against brute force (splits)
    _duplicate_insert      a request that prefilled a cached prefix in its own blocks: the cache keeps its own
    _locks                 a running request's node survives evict, even after a split above it
    _lru_leaves            least recently used leaf first; an inner node waits for its children
    _pool_under_pressure   four seeded chats of five turns in a pool of 20 blocks, two requests at a time
"""

from __future__ import annotations

import random
from typing import Any

from ..reading.calls import call_learner
from ..speaking.failure import fail
from ..story import Story
from .diagnosis import EVICT_STOPS_HINT, KEEP_WALKING_HINT, LEAF_HINT, LOCK_HINT, LRU_HINT, SPLIT_HINT
from .tree import TreeEngine
from .tree_reads import BLOCK

__all__ = ["TREE_STORY"]

VOCAB = 1000


def _tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(count)]


def _every_prefix(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """Sequences sharing prefixes of 0, 1 and 2 blocks; match equals brute force on every prefix."""
    engine = TreeEngine(RadixCache, BlockAllocator, 64, "A, B (shares A's first block), C (shares A's first two), D")
    a = _tokens(rng, 14)
    sequences = {
        "A": a,
        "B": a[:4] + _tokens(rng, 10),
        "C": a[:8] + _tokens(rng, 8),
        "D": _tokens(rng, 9),
    }
    shared = {"A": 0, "B": 4, "C": 8, "D": 0}
    reference: dict[tuple[int, ...], int] = {}  # whole-block prefix -> the block cached for it
    for name, prompt in sequences.items():
        table = engine.serve(f"r{name}", prompt, name, reused=shared[name])
        for index in range(len(prompt) // BLOCK):
            reference.setdefault(tuple(prompt[: (index + 1) * BLOCK]), table[index])
        engine.finish(f"r{name}")
    probes = [(f"{name}[:{cut}]", prompt[:cut]) for name, prompt in sequences.items() for cut in range(len(prompt) + 1)]
    probes += [
        (f"{name}[:{cut}] + other tokens", prompt[:cut] + _tokens(rng, 6))
        for name, prompt in sequences.items()
        for cut in (4, 6, 8, 12)
    ]
    for what, probe in probes:
        _, blocks = engine.match(probe, what)
        expected = []
        while tuple(probe[: (len(expected) + 1) * BLOCK]) in reference and (len(expected) + 1) * BLOCK <= len(probe):
            expected.append(reference[tuple(probe[: (len(expected) + 1) * BLOCK])])
        if blocks != expected:
            fail(
                f"{engine.scenario}, match({what})",
                f"the longest cached run of whole blocks: {len(expected) * BLOCK} tokens, blocks {expected}",
                f"{len(blocks) * BLOCK} tokens, blocks {blocks}",
                SPLIT_HINT if len(blocks) > len(expected) else KEEP_WALKING_HINT,
            )
        engine.verify(f"{engine.scenario}, after match({what})")
    for name, prompt in sequences.items():  # after all those splits, each sequence still finds its blocks
        engine.match(prompt, f"{name} again, after the splits")
    engine.drain()


def _duplicate_insert(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """A request that prefilled a cached prefix itself: the cache keeps its blocks, takes no duplicate."""
    engine = TreeEngine(
        RadixCache, BlockAllocator, 16, "E cached, then a request that computed E again in its own blocks"
    )
    e = _tokens(rng, 8)
    engine.serve("e1", e, "E", reused=0)
    engine.finish("e1")
    table = [engine.allocate("E again") for _ in range(2)]
    for index, block in enumerate(table):
        engine.account.ledger.wrote(block, tuple(e[: (index + 1) * BLOCK]))
    engine.account.ledger.tables["e2"] = table
    node = call_learner("insert(E, its own table)", engine.radix.insert, list(e), list(table), scenario=engine.scenario)
    engine.lock(node, "E")
    engine.account.locked["e2"] = (node, tuple(e))
    engine.verify(f"{engine.scenario}, insert(E, a table of 2 fresh blocks)")
    engine.drain()


def _locks(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """A running request's node survives evict, even after a split above it; unlock lets it go."""
    engine = TreeEngine(RadixCache, BlockAllocator, 12, "P running (locked), Q finished, evict everything")
    p, q = _tokens(rng, 12), _tokens(rng, 8)
    engine.serve("p", p, "P", reused=0)
    engine.serve("q", q, "Q", reused=0)
    engine.finish("q")
    engine.match(p[:4] + _tokens(rng, 4), "P[:4] + 4 other tokens (splits P's node above the lock)")
    engine.verify(f"{engine.scenario}, after a match that split P's locked node")
    engine.evict(engine.num_blocks)
    where = f"{engine.scenario}, evict({engine.num_blocks}) while P runs"
    engine.verify(where)
    if engine.num_free() != engine.num_blocks - 3:
        fail(
            where,
            f"{engine.num_blocks - 3} free blocks: Q's 2 evicted, P's 3 kept",
            f"{engine.num_free()}",
            LOCK_HINT,
        )
    engine.serve("p2", p, "P again (while P runs)", reused=12)
    engine.finish("p")
    engine.finish("p2")
    engine.evict(engine.num_blocks)
    where = f"{engine.scenario}, P finished (unlocked), then evict({engine.num_blocks})"
    if engine.num_free() != engine.num_blocks:
        fail(
            where,
            f"all {engine.num_blocks} blocks free: nothing is locked any more",
            f"{engine.num_free()} free",
            "a lock that is never undone keeps its nodes forever: " + LOCK_HINT,
        )
    engine.drain()


def _lru_leaves(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """Least recently used leaf first; an inner node waits until its children are gone."""
    engine = TreeEngine(RadixCache, BlockAllocator, 12, "F, G, H cached (2 blocks each), F hit again, evict 2 blocks")
    f, g, h = _tokens(rng, 8), _tokens(rng, 8), _tokens(rng, 8)
    for name, prompt in (("F", f), ("G", g), ("H", h)):
        engine.serve(name, prompt, name, reused=0)
        engine.finish(name)
    engine.match(f, "F")
    free = engine.num_free()
    engine.evict(free + 2)
    where = f"{engine.scenario}, evict({free + 2})"
    engine.verify(where)
    if engine.num_free() != free + 2:
        fail(
            where,
            f"{free + 2} free blocks: one leaf of 2 blocks evicted",
            f"{engine.num_free()}",
            EVICT_STOPS_HINT,
        )
    for name, prompt, cached in (("G", g, 0), ("F", f, 8), ("H", h, 8)):
        _, blocks = engine.match(prompt, name)
        if len(blocks) * BLOCK != cached:
            fail(
                where,
                f"{name}: {cached} tokens still cached (G was the least recently used leaf)",
                f"{len(blocks) * BLOCK}",
                LRU_HINT,
            )
    engine.drain()

    engine = TreeEngine(RadixCache, BlockAllocator, 8, "X cached, then X + Y (X becomes an inner node), evict 1 block")
    x, y = _tokens(rng, 4), _tokens(rng, 4)
    engine.serve("x", x, "X", reused=0)
    engine.finish("x")
    engine.serve("xy", x + y, "X + Y", reused=4)
    engine.finish("xy")
    free = engine.num_free()
    engine.evict(free + 1)
    where = f"{engine.scenario}, evict({free + 1})"
    engine.verify(where)
    _, blocks = engine.match(x + y, "X + Y")
    if len(blocks) != 1:
        fail(
            where,
            "X + Y matching 4 tokens: the leaf Y evicted, the inner node X kept",
            f"{len(blocks) * BLOCK} tokens",
            LEAF_HINT,
        )
    engine.drain()


def _pool_under_pressure(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """Seeded chats in a small pool: every step keeps the tree, the counts and the locks consistent."""
    engine = TreeEngine(RadixCache, BlockAllocator, 20, "four seeded chats of five turns in a pool of 20 blocks")
    chats = [_tokens(rng, 4) for _ in range(4)]
    running: list[str] = []
    for turn in range(5):
        for index in rng.sample(range(4), 4):
            chats[index] += _tokens(rng, rng.choice((3, 4, 6)))
            request = f"chat{index}-turn{turn}"
            engine.serve(request, chats[index], f"chat {index}, turn {turn}")
            running.append(request)
            if len(running) > 1:  # the next request is served while this one still runs, locked
                engine.finish(running.pop(0))
    engine.drain()


TREE_STORY = Story(
    visible=(_every_prefix, _duplicate_insert, _locks, _lru_leaves, _pool_under_pressure), told="5 scenarios"
)
