"""The checks for notebook 10: a radix-tree prefix cache and cache-aware scheduling.

check_radix_cache(RadixCache, BlockAllocator, seed=0)
    Drives the learner's ``RadixCache`` over the learner's allocator (blocks of 4) the way an
    engine does: ``match`` the prompt, ``lock`` the node, share the matched blocks into the
    request's table and allocate the rest (``evict`` when the pool is empty), ``insert`` after
    prefill, lock the new node and unlock the old one, and at the end unlock and release the table.
    The check records, for every block it "prefilled", the token prefix whose keys it holds, and
    after every step walks the learner's tree (``root``, and each node's ``tokens``, ``blocks``,
    ``children``, ``parent``, ``lock_count``) to verify:

    * every match equals a brute-force reference: the longest run of whole blocks of the probe
      that some inserted sequence shares (scenario "every prefix"), and returns those blocks;
    * the node returned by match ends exactly where the match ends (a split when it ends inside
      an edge), and splits keep every block at its position (each block in the tree holds the
      keys of the prefix ending at its place in the tree);
    * each block's reference count is one for the cache (if it is in the tree) plus one per
      request table holding it, and a block nobody holds is free;
    * lock counts: a node counts the live locks on it and below it; unlocking returns them to 0;
    * evict removes only unlocked leaves, least recently used first, and stops once enough
      blocks are free.

check_cache_aware_order(cache_aware_order)
    A table of waiting queues (arrival order, cached tokens, rounds waited) with the admission
    order each must give: starving requests first in arrival order, then most cached tokens
    first, ties in arrival order.
"""

from __future__ import annotations

import random
from typing import Any

from ..reading.calls import call_learner, call_learner_allowing
from ..reading.learner_code import read_ahead
from ..reading.ledger import Ledger, ceil_div
from ..reading.strict import learner_dict, learner_int, learner_int_list
from ..registry import check
from ..speaking.failure import fail
from ..story import Story

__all__ = ["check_cache_aware_order", "check_radix_cache"]

BLOCK = 4
VOCAB = 1000

SPLIT_HINT = (
    "when a match ends inside a node's edge, split the node there: the node match returns must end "
    "exactly where the match ends, so that locking it protects only what the request uses"
)
SPLIT_KEEPS_HINT = (
    "a split cuts the edge's tokens and its blocks at the same place: the upper node takes "
    "tokens[:cut] and blocks[:cut // block_size], the lower keeps the rest, in order"
)
SPLIT_LOSES_HINT = (
    "a split must keep the whole edge: the new upper node takes tokens[:cut] and blocks[:cut // block_size], "
    "and the node itself, hung below it (upper.children[its first block] = node), keeps the rest of the tokens "
    "and blocks, and its children; match only cuts nodes in two, so no block leaves the tree"
)
SHARE_HINT = (
    "insert shares (allocator.share) each block of the new leaf once: the cache's own reference; "
    "positions already cached keep the cache's blocks, and the request's duplicates are not taken"
)
LEAF_HINT = (
    "evict removes leaves only (nodes without children): an inner node's blocks are the prefix of "
    "its children's, which would become unreachable while still holding their blocks"
)
LOCK_HINT = (
    "lock(node) adds one to node.lock_count and to every ancestor's up to the root; unlock(node) "
    "takes one away from the same nodes; evict skips any node whose lock_count is above 0"
)
LRU_HINT = (
    "match and insert stamp every node on their path with a new, larger last_used; evict removes "
    "the unlocked leaf with the smallest last_used first"
)


# What the check reads of the tree and the pool after a step: asked in one request when the learner's
# objects live in another process (read_ahead), each read as before.
TREE_READS = ("root", "children", "tokens", "blocks", "lock_count", "parent", "refs", "num_free")


def _tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(count)]


class _Engine:
    """The learner's RadixCache over the learner's allocator, used like an engine uses it."""

    def __init__(self, RadixCache: Any, BlockAllocator: Any, num_blocks: int, scenario: str) -> None:
        self.scenario, self.num_blocks = scenario, num_blocks
        self.allocator = call_learner(f"BlockAllocator({num_blocks})", BlockAllocator, num_blocks, scenario=scenario)
        self.radix = call_learner(
            f"RadixCache(allocator, block_size={BLOCK})", RadixCache, self.allocator, BLOCK, scenario=scenario
        )
        # ledger.tables: the live requests' block tables; ledger.contents[block]: the prefix whose keys
        # the check wrote in it
        self.ledger = Ledger(num_blocks)
        self.locked: dict[str, tuple[Any, tuple[int, ...]]] = {}  # request -> (node it locked, prefix)
        self.names: dict[tuple[int, ...], str] = {}  # inserted sequence -> its name in messages

    # --- the learner's calls -----------------------------------------------------------------
    def match(self, tokens: list[int], what: str) -> tuple[Any, list[int]]:
        cached = self.tree_blocks()
        got = call_learner(f"match({what})", self.radix.match, list(tokens), scenario=self.scenario)
        where = f"{self.scenario}, match({what})"
        lost = sorted(cached - self.tree_blocks())
        if lost:  # before the blocks match returned are read: a lost tail would be blamed on them, or on evict
            fail(
                where,
                "every block cached before the match still in the tree (match may split a node, never drop one)",
                f"the split lost the rest of the edge: block(s) {lost} left the tree ("
                + "; ".join(f"block {block} holds {self.describe(block)}" for block in lost)
                + ")",
                SPLIT_LOSES_HINT,
            )
        if not (isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], (list, tuple))):
            fail(
                where, "a pair (node, list of blocks)", repr(got), "return the node where the match ends and its blocks"
            )
        node, blocks = got[0], learner_int_list(got[1], f"the blocks match({what}) returned", self.scenario)
        reused = len(blocks) * BLOCK
        path = self.path(node, where)
        if path != tuple(tokens[:reused]):
            fail(
                where,
                f"the returned node ends after the {reused} matched tokens ({len(blocks)} blocks)",
                f"it ends after {len(path)} tokens",
                SPLIT_HINT,
            )
        for index, block in enumerate(blocks):
            wanted = tuple(tokens[: (index + 1) * BLOCK])
            if self.ledger.contents.get(block) != wanted:
                fail(
                    where,
                    f"block {index} of the match holding the keys of tokens 0..{(index + 1) * BLOCK - 1} of this probe",
                    f"block {block}, which holds {self.describe(block)}",
                    SPLIT_KEEPS_HINT,
                )
        return node, blocks

    def lock(self, node: Any, what: str) -> None:
        call_learner(f"lock({what})", self.radix.lock, node, scenario=self.scenario)

    def unlock(self, node: Any, what: str) -> None:
        call_learner(f"unlock({what})", self.radix.unlock, node, scenario=self.scenario)

    def evict(self, wanted: int) -> None:
        """evict, then: only unlocked leaves left the tree (a cascade of them), each releasing its blocks."""
        before = {id(node): (node, path, self.lock_count(node)) for node, path in self.nodes()}
        refs = self.refs()
        call_learner(f"evict({wanted})", self.radix.evict, wanted, scenario=self.scenario)
        where = f"{self.scenario}, evict({wanted})"
        remaining = {id(node) for node, _ in self.nodes()}
        removed = [entry for key, entry in before.items() if key not in remaining]
        for _, path, locks in removed:
            if locks:
                fail(
                    where,
                    "every locked node kept: a running request uses it",
                    f"the node ending after {len(path)} tokens (lock_count {locks}) left the tree",
                    LOCK_HINT,
                )
        dropped = {}
        for node, _, _ in removed:
            for block in self.blocks(node):
                dropped[block] = dropped.get(block, 0) + 1
        refs_now = self.refs()
        for node, path, _ in removed:
            kept = [block for block in self.blocks(node) if refs[block] - refs_now[block] != dropped[block]]
            if kept:
                fail(
                    where,
                    f"the blocks of every node that left the tree released once by the cache (the node "
                    f"ending after {len(path)} tokens: blocks {self.blocks(node)})",
                    f"block(s) {kept} still hold the cache's reference, though no match can reach them",
                    LEAF_HINT,
                )

    # --- an engine's request -----------------------------------------------------------------
    def serve(self, request: str, prompt: list[int], name: str, reused: int | None = None) -> list[int]:
        """match + lock, a table of matched blocks + fresh ones, prefill, insert, move the lock."""
        node, blocks = self.match(prompt, name)
        if reused is not None and len(blocks) * BLOCK != reused:
            fail(
                f"{self.scenario}, match({name})",
                f"{reused} cached tokens ({reused // BLOCK} blocks)",
                f"{len(blocks) * BLOCK} tokens, blocks {blocks}",
                "match walks down the tree while the next whole block of the prompt equals the edge's, "
                "from the root, through every child, into the middle of an edge",
            )
        self.lock(node, name)
        table = []
        for block in blocks:
            call_learner(f"allocator.share({block})", self.allocator.share, block, scenario=self.scenario)
            table.append(block)
        for index in range(len(blocks), ceil_div(len(prompt), BLOCK)):
            table.append(self.allocate(name))
            self.ledger.wrote(table[-1], tuple(prompt[: (index + 1) * BLOCK]))  # the prefill writes this block
        self.ledger.tables[request] = table
        new = call_learner(
            f"insert({name}, table)", self.radix.insert, list(prompt), list(table), scenario=self.scenario
        )
        self.names.setdefault(tuple(prompt[: len(prompt) // BLOCK * BLOCK]), name)
        full = tuple(prompt[: len(prompt) // BLOCK * BLOCK])
        where = f"{self.scenario}, insert({name}, table)"
        if self.path(new, where) != full:
            fail(
                where,
                f"the node where {name}'s {len(full)} tokens of whole blocks end",
                f"a node ending after {len(self.path(new, where))} tokens",
                "insert returns the node whose path from the root is exactly the inserted whole blocks",
            )
        self.lock(new, name)
        self.unlock(node, f"{name}'s matched node, after insert")
        self.locked[request] = (new, full)
        self.verify(f"{where} (request {request!r} running)")
        return table

    def allocate(self, name: str) -> int:
        """A block for ``name``'s prefill: from the free list, or, when the pool is short, after
        evicting one (as an engine does). Any error but MemoryError is the allocator's bug."""
        where = f"{self.scenario}, prefilling {name}"

        def ask() -> int:
            block = call_learner_allowing(MemoryError, "allocator.allocate()", self.allocator.allocate, scenario=where)
            return self._in_pool(block, where)

        try:
            return ask()
        except MemoryError:
            self.evict(self.num_free() + 1)
        try:
            return ask()
        except MemoryError:
            fail(
                f"{self.scenario}, prefilling {name}",
                "evict to free a block: some cached leaf is unlocked",
                "no free block after evict",
                LOCK_HINT,
            )
            raise  # fail always raises; this keeps type checkers content

    def _in_pool(self, block: Any, where: str) -> int:
        """A block id the allocator handed out: an int of the pool, or a failure naming it."""
        if type(block) is not int or not 0 <= block < self.num_blocks:
            fail(
                where,
                f"allocator.allocate() returning a block id in 0..{self.num_blocks - 1}",
                repr(block),
                "allocate hands out a block from the free list",
            )
        return block

    def finish(self, request: str) -> None:
        node, _ = self.locked.pop(request)
        self.unlock(node, f"{request}'s node")
        for block in self.ledger.tables.pop(request):
            call_learner(f"allocator.release({block})", self.allocator.release, block, scenario=self.scenario)
        self.verify(f"{self.scenario}, after request {request!r} finished (unlock, release its table)")

    # --- reading the learner's tree ----------------------------------------------------------
    def read_ahead(self) -> None:
        """The tree's nodes and the pool's counts, fetched at once (the reads below are answered
        from it until the learner's code runs again; in one process this does nothing)."""
        read_ahead(self.radix, self.allocator, names=TREE_READS, follow=("root", "children"))

    def path(self, node: Any, where: str) -> tuple[int, ...]:
        """The tokens from the root to ``node``."""
        self.read_ahead()
        parts, seen = [], 0
        while node is not None and node is not self.radix.root:
            parts.append(self.tokens(node))
            node, seen = node.parent, seen + 1
            if seen > 10_000:
                fail(where, "parent links that lead to the root", "a cycle", "each node's parent is the node above it")
        if node is None:
            fail(
                where,
                "a node in the tree (its parents lead to cache.root)",
                "a node whose parents never reach the root",
                "keep parent links right when splitting: the lower part's parent is the new upper node",
            )
        return tuple(token for part in reversed(parts) for token in part)

    def tree_blocks(self) -> set[int]:
        """Every block some node of the tree holds."""
        return {block for node, _ in self.nodes() for block in self.blocks(node)}

    def nodes(self) -> list[tuple[Any, tuple[int, ...]]]:
        """(node, tokens from the root to its end) for every node but the root."""
        self.read_ahead()
        found, stack = [], [(self.radix.root, ())]
        while stack:
            node, prefix = stack.pop()
            for child in self.children(node):
                path = prefix + self.tokens(child)
                found.append((child, path))
                stack.append((child, path))
        return found

    # Read strictly (checks/reading/strict.py): a learner's int, list or dict subclass cannot answer for itself.
    def tokens(self, node: Any) -> tuple[int, ...]:
        return tuple(learner_int_list(node.tokens, "node.tokens", self.scenario))

    def blocks(self, node: Any) -> list[int]:
        return learner_int_list(node.blocks, "node.blocks", self.scenario)

    def lock_count(self, node: Any) -> int:
        return learner_int(node.lock_count, "node.lock_count", self.scenario)

    def children(self, node: Any) -> list[Any]:
        return list(learner_dict(node.children, "node.children", self.scenario, lambda child, _w, _s: child).values())

    def refs(self) -> list[int]:
        self.read_ahead()
        return learner_int_list(self.allocator.refs, "allocator.refs", self.scenario)

    def num_free(self) -> int:
        self.read_ahead()
        return learner_int(self.allocator.num_free, "allocator.num_free", self.scenario)

    def describe(self, block: int) -> str:
        prefix = self.ledger.contents.get(block)
        if prefix is None:
            return "nothing written by this check"
        for sequence, name in self.names.items():
            if sequence[: len(prefix)] == prefix:
                return f"the keys of {name}'s tokens 0..{len(prefix) - 1}"
        return f"the keys of another prompt's first {len(prefix)} tokens"

    def verify(self, where: str) -> None:
        """Structure, blocks at their positions, reference counts, lock counts."""
        in_tree: dict[int, int] = {}
        for node, path in self.nodes():
            tokens, blocks = self.tokens(node), self.blocks(node)
            if not tokens or len(tokens) % BLOCK or len(blocks) != len(tokens) // BLOCK:
                fail(
                    where,
                    f"every edge a whole number of blocks of {BLOCK} tokens, one block per {BLOCK} tokens",
                    f"the node ending after {len(path)} tokens holds {len(tokens)} tokens, blocks {blocks}",
                    SPLIT_KEEPS_HINT,
                )
            start = len(path) - len(tokens)
            for index, block in enumerate(blocks):
                end = start + (index + 1) * BLOCK
                if self.ledger.contents.get(block) != path[:end]:
                    fail(
                        where,
                        f"block {index} of the node ending after {len(path)} tokens holding the keys of its "
                        f"path's tokens 0..{end - 1}",
                        f"block {block}, which holds {self.describe(block)}",
                        SPLIT_KEEPS_HINT,
                    )
                in_tree[block] = in_tree.get(block, 0) + 1
        in_tables: dict[int, int] = {}
        for table in self.ledger.tables.values():
            for block in table:
                in_tables[block] = in_tables.get(block, 0) + 1
        refs = self.refs()
        for block in range(self.num_blocks):
            cached = in_tree.get(block, 0)
            expected = cached + in_tables.get(block, 0)
            got = refs[block]
            if got != expected:
                who = f"{cached} for the cache + {in_tables.get(block, 0)} request table(s)"
                if got > expected and not cached:
                    hint = (
                        f"block {block} holds {self.describe(block)} but is not in the tree: "
                        "evict must release every block of each node it removes; " + LEAF_HINT
                    )
                else:
                    hint = SHARE_HINT
                fail(where, f"block {block}: refcount {expected} ({who})", f"refcount {got}", hint)
        expected_free = sum(1 for block in range(self.num_blocks) if not refs[block])
        if self.num_free() != expected_free:
            fail(
                where,
                f"{expected_free} free blocks",
                f"{self.num_free()}",
                "release blocks through the allocator",
            )
        self.verify_locks(where)

    def verify_locks(self, where: str) -> None:
        expected: dict[int, int] = {}
        for request, (node, prefix) in self.locked.items():
            if self.path(node, where) != prefix:
                fail(
                    where,
                    f"the node request {request!r} locked still ending after its {len(prefix)} tokens",
                    f"it ends after {len(self.path(node, where))} tokens",
                    "a split keeps the node itself as the lower part (it still ends where it did) and "
                    "puts a new node above it, so the handles requests hold stay right",
                )
            if id(node) not in {id(other) for other, _ in self.nodes()}:
                fail(
                    where,
                    f"the node request {request!r} locked still in the tree",
                    "it was removed",
                    LOCK_HINT,
                )
            while node is not None:
                expected[id(node)] = expected.get(id(node), 0) + 1
                node = node.parent
        for node, path in self.nodes():
            if self.lock_count(node) != expected.get(id(node), 0):
                fail(
                    where,
                    f"the node ending after {len(path)} tokens: lock_count {expected.get(id(node), 0)} "
                    "(live locks on it or below it)",
                    f"lock_count {self.lock_count(node)}",
                    LOCK_HINT + "; a split gives the new upper node the lower node's count",
                )

    def drain(self) -> None:
        """Finish every request, evict everything: no block may stay in use."""
        for request in list(self.ledger.tables):
            self.finish(request)
        self.evict(self.num_blocks)
        refs = self.refs()
        stuck = [block for block in range(self.num_blocks) if refs[block]]
        if stuck or self.children(self.radix.root):
            fail(
                f"{self.scenario}, after every request finished and evict({self.num_blocks})",
                f"an empty tree and all {self.num_blocks} blocks free",
                f"{len(self.nodes())} node(s) left, block(s) {stuck} in use",
                "with nothing locked every node becomes a leaf in turn: " + LOCK_HINT,
            )


def _every_prefix(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """Sequences sharing prefixes of 0, 1 and 2 blocks; match equals brute force on every prefix."""
    engine = _Engine(RadixCache, BlockAllocator, 64, "A, B (shares A's first block), C (shares A's first two), D")
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
                SPLIT_HINT
                if len(blocks) > len(expected)
                else "keep walking while the next whole block equals the edge's",
            )
        engine.verify(f"{engine.scenario}, after match({what})")
    for name, prompt in sequences.items():  # after all those splits, each sequence still finds its blocks
        engine.match(prompt, f"{name} again, after the splits")
    engine.drain()


def _duplicate_insert(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """A request that prefilled a cached prefix itself: the cache keeps its blocks, takes no duplicate."""
    engine = _Engine(RadixCache, BlockAllocator, 16, "E cached, then a request that computed E again in its own blocks")
    e = _tokens(rng, 8)
    engine.serve("e1", e, "E", reused=0)
    engine.finish("e1")
    table = [engine.allocate("E again") for _ in range(2)]
    for index, block in enumerate(table):
        engine.ledger.wrote(block, tuple(e[: (index + 1) * BLOCK]))
    engine.ledger.tables["e2"] = table
    node = call_learner("insert(E, its own table)", engine.radix.insert, list(e), list(table), scenario=engine.scenario)
    engine.lock(node, "E")
    engine.locked["e2"] = (node, tuple(e))
    engine.verify(f"{engine.scenario}, insert(E, a table of 2 fresh blocks)")
    engine.drain()


def _locks(RadixCache: Any, BlockAllocator: Any, rng: random.Random) -> None:
    """A running request's node survives evict, even after a split above it; unlock lets it go."""
    engine = _Engine(RadixCache, BlockAllocator, 12, "P running (locked), Q finished, evict everything")
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
    engine = _Engine(RadixCache, BlockAllocator, 12, "F, G, H cached (2 blocks each), F hit again, evict 2 blocks")
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
            "evict stops as soon as allocator.num_free >= blocks_wanted",
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

    engine = _Engine(RadixCache, BlockAllocator, 8, "X cached, then X + Y (X becomes an inner node), evict 1 block")
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
    engine = _Engine(RadixCache, BlockAllocator, 20, "four seeded chats of five turns in a pool of 20 blocks")
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


@check(notebook="10_radix_cache", builds="RadixCache", partners=(("02_block_allocator", "BlockAllocator"),))
def check_radix_cache(RadixCache: Any, BlockAllocator: Any, seed: int = 0) -> None:
    """Longest-prefix matches, splits, references, locks, LRU leaf eviction, a pool under pressure."""
    return TREE_STORY.tell(RadixCache, BlockAllocator, seed=seed)


# (what, waiting in arrival order, cached tokens, rounds waited, max_wait, expected order, hint if wrong)
ORDER_CASES = (
    (
        "three requests, none starving",
        ["a", "b", "c"],
        {"a": 0, "b": 64, "c": 16},
        {"a": 0, "b": 0, "c": 0},
        4,
        ["b", "c", "a"],
        "sort by cached tokens, most first",
    ),
    (
        "equal cached tokens",
        ["d", "a", "c", "b"],
        {"d": 32, "a": 0, "c": 32, "b": 32},
        {"d": 1, "a": 1, "c": 0, "b": 0},
        4,
        ["d", "c", "b", "a"],
        "ties keep arrival order (the order of waiting), not the ids' order: sorted() is stable",
    ),
    (
        "a request that waited max_wait rounds",
        ["old", "hot", "new"],
        {"old": 0, "hot": 96, "new": 8},
        {"old": 3, "hot": 1, "new": 0},
        3,
        ["old", "hot", "new"],
        "a request that has waited max_wait rounds or more goes first, whatever it has cached: without "
        "that guard a request with nothing cached could wait forever behind hot ones",
    ),
    (
        "two starving requests",
        ["s2", "x", "s1"],
        {"s2": 16, "x": 80, "s1": 48},
        {"s2": 7, "x": 2, "s1": 5},
        5,
        ["s2", "s1", "x"],
        "starving requests go first in arrival order (the longest waiting first), not by cached tokens",
    ),
    ("an empty queue", [], {}, {}, 2, [], "nothing waiting: return an empty list"),
)


# The classic slips of cache_aware_order, each a keyword of _expected_order: the hidden queues are drawn
# so that each slip their kind is meant for orders them otherwise.
MISTAKES = ("no_guard", "guard_off_by_one", "starving_by_cache", "ties_by_id")


def _expected_order(waiting: list[str], cached: dict, waited: dict, max_wait: int, mistake: str = "") -> list[str]:
    """The rule, as a sort key: starving requests first by arrival, then most cached first, ties by arrival;
    or, with ``mistake`` (one of ``MISTAKES``), the order that slip gives."""
    arrival = {request: index for index, request in enumerate(waiting)}

    def starving(request: str) -> bool:
        if mistake == "no_guard":
            return False
        return waited[request] > max_wait if mistake == "guard_off_by_one" else waited[request] >= max_wait

    def rank(request: str) -> tuple:
        if starving(request):
            return (0, -cached[request] if mistake == "starving_by_cache" else 0, arrival[request])
        return (1, -cached[request], request if mistake == "ties_by_id" else arrival[request])

    return sorted(waiting, key=rank)


def _check_order(cache_aware_order: Any, case: tuple) -> None:
    what, waiting, cached, waited, max_wait, expected, hint = case
    arguments = (list(waiting), dict(cached), dict(waited), max_wait)
    got = call_learner(f"cache_aware_order(...) with {what}", cache_aware_order, *arguments, scenario=what)
    if not isinstance(got, list) or sorted(map(str, got)) != sorted(waiting):
        fail(
            what,
            f"a list of every waiting request, once each: {sorted(waiting)}",
            repr(got),
            "return the ids of waiting, reordered, none dropped or repeated",
        )
    if got != expected:
        fail(
            f"{what}: waiting {waiting}, cached tokens {cached}, rounds waited {waited}, max_wait {max_wait}",
            expected,
            got,
            hint,
        )
    if arguments != (waiting, cached, waited, max_wait):
        fail(what, "the arguments left as they were", "cache_aware_order changed them", "build a new list")


def _random_queue(rng, what: str, size: int, starving: int, cached_blocks: int, hint: str) -> tuple:
    """A queue of ``size`` requests, ``starving`` of them (at drawn places) waited max_wait rounds or more."""
    waiting = rng.sample([f"r{i}" for i in range(100)], size)
    max_wait = rng.randint(2, 6)
    cached = {r: BLOCK * rng.randint(0, cached_blocks) for r in waiting}
    hungry = set(rng.sample(waiting, starving))
    waited = {r: rng.randint(max_wait, max_wait + 3) if r in hungry else rng.randrange(max_wait) for r in waiting}
    return what, waiting, cached, waited, max_wait, _expected_order(waiting, cached, waited, max_wait), hint


def _telling(case: tuple, mistakes: tuple[str, ...]) -> bool:
    """Does each of ``mistakes`` order ``case``'s queue otherwise, and does the rule reorder it at all (so a
    sort in place shows)?"""
    _, waiting, cached, waited, max_wait, expected, _ = case
    others = [_expected_order(waiting, cached, waited, max_wait, mistake) for mistake in mistakes]
    return all(other != expected for other in others) and (len(waiting) < 2 or expected != waiting)


def _hidden_queue(size: int, starving: int, cached_blocks: int, mistakes: tuple[str, ...], what: str, hint: str):
    """A hidden scenario: a queue of ``size`` requests, ``starving`` of them starving, redrawn until each of
    ``mistakes`` orders it otherwise; ordered by the learner and by the rule."""

    def scenario(cache_aware_order: Any, rng) -> None:
        while not _telling(case := _random_queue(rng, what, size, starving, cached_blocks, hint), mistakes):
            pass
        _check_order(cache_aware_order, case)

    return scenario


# Every kind runs at its largest size in every draw (the seed picks names, cached tokens, rounds waited
# and which requests starve, never how many).
_HIDDEN_QUEUES = {
    "a long queue with many ties in cached tokens": _hidden_queue(
        16, 0, 2, ("ties_by_id",), "a long queue", "ties keep arrival order (the order of waiting)"
    ),
    "a queue where several requests starve": _hidden_queue(
        10,
        3,
        6,
        ("no_guard", "guard_off_by_one", "starving_by_cache"),
        "starving requests",
        "starving requests (waited max_wait rounds or more) first, in arrival order",
    ),
    "a queue of one request": _hidden_queue(1, 1, 4, (), "one request", "return [it]"),
    "a mixed queue": _hidden_queue(
        12, 2, 8, MISTAKES, "a mixed queue", "starving first, then most cached first, ties by arrival"
    ),
}


def _every_order_case(cache_aware_order: Any, _rng: random.Random) -> None:
    for case in ORDER_CASES:
        _check_order(cache_aware_order, case)


ORDER_STORY = Story(visible=(_every_order_case,), hidden=_HIDDEN_QUEUES, told=f"{len(ORDER_CASES)} queues")


@check(notebook="10_radix_cache", builds="cache_aware_order")
def check_cache_aware_order(cache_aware_order: Any, *, seed: int = 0, hidden: bool = False) -> None:
    """Most cached tokens first, ties by arrival, starving requests before everyone.

    ``hidden=True`` (the hidden tests): every kind of ``_HIDDEN_QUEUES``, at its fixed size and number of
    starving requests, drawn from ``seed`` until each slip the kind is meant for orders it otherwise.
    """
    return ORDER_STORY.tell(cache_aware_order, seed=seed, hidden=hidden)
