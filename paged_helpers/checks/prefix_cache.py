"""The check for notebook 05: a prefix cache that reuses full blocks of earlier prompts.

check_prefix_cache(PrefixCache, PagedKVCache, seed=0)
    Serves seeded prompts through the learner's ``PrefixCache`` on the learner's cache (blocks
    of 4) the way an engine does: ``attach``, reserve and prefill the rest (the check writes each
    position's key straight into the pool, a number that stands for the whole prefix up to that
    position), ``remember``, and later ``free`` and ``evict``. It states in each scenario how many
    tokens must be reused and what each block's reference count must be, and reads reused blocks
    back to make sure they hold this prompt's history, not another one's.

    Scenarios: a prompt served twice (the cache's own reference keeps blocks alive; a partial
    block is never published; remembering cached blocks again takes no extra reference); a prompt
    that is entirely cached (one token is always left to prefill); blocks with the same text but
    different histories; LRU order after a hit (with and without prefill); eviction while some cached blocks are in use,
    asking for more blocks than can be freed (evict frees what it can and returns, or raises
    MemoryError having changed nothing: both pass);
    partial eviction of a 3-block prompt (served, attached without prefill, served again) and of
    two prompts sharing a root, after which every block the cache still holds must be reachable
    by attach (tails go first, so no entry outlives an earlier block); a gap before a cached
    block (attach must stop at the first miss).
"""

from __future__ import annotations

import random
import zlib
from array import array
from typing import Any

from .reading.cache_reads import CacheReads
from .reading.calls import call_learner
from .reading.learner_code import assign
from .reading.ledger import Ledger
from .reading.snapshot import CacheSnapshot
from .reading.strict import learner_tensor, torch_unhooked
from .registry import check
from .speaking.failure import CheckFailed, Hint, NotImplementedYet, fail
from .story import Story

__all__ = ["check_prefix_cache"]

BLOCK = 4
VOCAB = 1000

# Hints in two tiers (report.Hint): the idea first, the concrete change when the same failure repeats.
WHOLE_PREFIX_HINT = Hint(
    "a block's keys and values depend on every earlier token, so a cached block may only be reused after "
    "exactly the same history: its key must cover the whole prefix, not only the block's own tokens",
    "key block i of a prompt by tuple(prompt[:(i + 1) * block_size]), in attach and in remember",
)
LAST_TOKEN_HINT = Hint(
    "always leave at least one prompt token to prefill: the last prompt position must run through "
    "the model, since its logits choose the first output token",
    "walk only while reused + block_size <= len(prompt) - 1",
)
OWN_REFERENCE_HINT = Hint(
    "the prefix cache is one more owner of every block it publishes, so the block outlives the request "
    "that computed it",
    "in remember, call cache.allocator.share(block) for each entry it adds",
)
EXTRA_REFERENCE_HINT = (
    "a block's count is one per table that holds it plus one for the prefix cache: remember shares a "
    "block only when it publishes a new entry, and attach once per block it reuses"
)
LEAK_HINT = Hint(
    "the prefix cache holds a reference it has no entry for, so evict can never give it back: it took a "
    "reference on a block and then did not keep that block as an entry",
    "in remember, when the key is already in entries (under this block or another request's copy), keep "
    "that entry and take no reference; share() only the blocks you add as new entries",
)
STOP_AT_MISS_HINT = Hint(
    "a cached block after a gap holds keys computed at later positions: reusing it puts those keys at the "
    "gap's logical block and shifts every later position, so the walk must end at the first miss",
    "in attach, break out of the loop at the first key that is not in entries (break, not continue)",
)
STRANDED_HINT = Hint(
    "evict dropped an earlier block of a prompt while its later blocks stayed cached: attach stops at the "
    "first miss, so those entries can never be reached, yet they keep their blocks out of the pool. A "
    "prompt's root must be its most recently used entry, so that eviction takes tails first",
    "in attach, move_to_end the keys it hit in reverse order (last hit first) after the walk; in remember, "
    "walk reversed(range(len(tokens) // block_size)), move_to_end keys already cached and add the others",
)
PARTIAL_HINT = Hint(
    "publish full blocks only: a partial block is still being written by its sequence, and its key would "
    "not be a whole block of prefix",
    "remember publishes len(tokens) // block_size blocks",
)


def prefix_code(prefix: list[int]) -> float:
    """The number the check stores as the key of the last position of ``prefix`` (exact in float32)."""
    return float(zlib.crc32(array("q", prefix).tobytes()) % (1 << 22) + 1)


class _Server:
    """The learner's PrefixCache over the learner's PagedKVCache, driven like an engine would."""

    def __init__(self, PrefixCache: Any, PagedKVCache: Any, num_blocks: int, scenario: str) -> None:
        self.scenario, self.num_blocks = scenario, num_blocks
        self.cache = call_learner(
            f"PagedKVCache(layers=1, num_blocks={num_blocks}, block_size={BLOCK}, kv_heads=1, head_dim=1)",
            PagedKVCache,
            1,
            num_blocks,
            BLOCK,
            1,
            1,
            scenario=scenario,
        )
        self.reads = CacheReads(self.cache)
        self.prefixes = call_learner("PrefixCache(cache)", PrefixCache, self.cache, scenario=scenario)
        self.prompts: dict[str, list[int]] = {}
        self.names: dict[str, str] = {}  # seq -> the prompt's name in messages
        self.ledger = Ledger(num_blocks)  # ledger.writers: each stored code -> (prompt name, position)

    @property
    def allocator(self) -> Any:
        return self.cache.allocator

    def serve(self, seq: str, prompt: list[int], name: str, reused: int, short_hint: str | Hint = "") -> list[int]:
        """attach, check what was reused, prefill the rest, remember. Returns seq's block table."""
        self.attach(seq, prompt, name, reused, short_hint)
        return self.prefill(seq)

    def prefill(self, seq: str) -> list[int]:
        """Reserve and write what attach did not reuse, then remember. Returns seq's block table."""
        prompt, name = self.prompts[seq], self.names[seq]
        reused = self.reads.length(seq, self.scenario)
        what = f"prefilling {name} as {seq!r} (reserve, then the forward pass)"
        call_learner(
            f"reserve({seq!r}, {len(prompt) - reused})",
            self.cache.reserve,
            seq,
            len(prompt) - reused,
            scenario=f"{self.scenario}, {what}",
        )
        table = self.reads.table(seq, self.scenario)
        for position in range(reused, len(prompt)):
            code = prefix_code(prompt[: position + 1])
            assign(self.cache, ("k_pool", 0, (table[position // BLOCK], slice(None), position % BLOCK)), code)
            self.ledger.stored(code, name, position)
        self.cache.lengths[seq] = len(prompt)
        call_learner(f"remember({seq!r}, {name})", self.prefixes.remember, seq, list(prompt), scenario=self.scenario)
        return list(table)

    def attach(self, seq: str, prompt: list[int], name: str, reused: int, short_hint: str | Hint = "") -> None:
        what = f"attach({seq!r}, {name}) of a {len(prompt)}-token prompt"
        where = f"{self.scenario}, {what}"
        got = call_learner(what, self.prefixes.attach, seq, list(prompt), scenario=self.scenario)
        self.prompts[seq], self.names[seq] = list(prompt), name
        if seq not in self.reads.tables(where):
            fail(
                where,
                f"{seq!r} created in the cache",
                "no table for it",
                Hint(
                    "attach creates the sequence in the cache, then shares the reused blocks into its table",
                    "start attach with self.cache.create(seq)",
                ),
            )
        if type(got) is not int or got < 0 or got % BLOCK:
            fail(
                where,
                "the number of prompt tokens reused: a multiple of the block size",
                repr(got),
                "return how many tokens the reused blocks hold (blocks reused x block_size)",
            )
        table = self.reads.table(seq, where)
        length = self.reads.length(seq, where)
        if len(table) != got // BLOCK or length != got:
            fail(
                where,
                f"a table of {got // BLOCK} reused block(s) and lengths[{seq!r}] == {got}",
                f"table {table}, length {length}",
                "attach returns the tokens reused, appends exactly those blocks and sets the length to match",
            )
        self._expect_history(where, seq, prompt, got)
        if got != reused:
            if got > reused and got >= len(prompt):
                hint = LAST_TOKEN_HINT
            elif got > reused:
                hint = WHOLE_PREFIX_HINT
            else:
                hint = short_hint or "attach reuses every full block whose whole prefix is cached"
            fail(where, f"{reused} prompt tokens reused", f"{got}", hint)

    def _expect_history(self, where: str, seq: str, prompt: list[int], reused: int) -> None:
        """Every reused position must hold the key computed for *this* prompt's prefix."""
        table = self.reads.table(seq, where)
        pool = learner_tensor(self.cache.k_pool[0], "cache.k_pool[0]", where)
        for position in range(reused):
            with torch_unhooked():  # the pool's values, whatever torch function mode is active
                found = float(pool[table[position // BLOCK], 0, position % BLOCK, 0])
            if found == prefix_code(prompt[: position + 1]):
                continue
            owner = self.ledger.writers.get(found)
            held = (
                f"the keys of {owner[0]} at position {owner[1]}"
                if owner
                else "keys no request computed for this prefix"
            )
            later = [q for q in range(position + 1, len(prompt)) if prefix_code(prompt[: q + 1]) == found]
            fail(
                where,
                f"block {table[position // BLOCK]}, reused for positions {position - position % BLOCK}.."
                f"{position - position % BLOCK + BLOCK - 1}, holding this prompt's keys",
                f"at position {position} it holds {held}"
                + (f" (this prompt's position {later[0]}: a later block, mapped too early)" if later else ""),
                STOP_AT_MISS_HINT if later else WHOLE_PREFIX_HINT,
            )

    def expect_refcount(
        self, block: int, refs: int, who: str, after: str, too_low: str | Hint, too_high: str | Hint
    ) -> None:
        got = self.reads.refs(f"{self.scenario}, after {after}")[block]
        if got != refs:
            fail(
                f"{self.scenario}, after {after}",
                f"block {block}: refcount {refs} ({who})",
                f"refcount {got}",
                too_low if got < refs else too_high,
            )

    def free(self, seq: str) -> None:
        call_learner(f"free({seq!r})", self.cache.free, seq, scenario=self.scenario)
        del self.prompts[seq]

    def evictable(self, snapshot: CacheSnapshot) -> list[int]:
        """Blocks held by the prefix cache alone: referenced, but in no sequence's table."""
        in_tables = {block for table in snapshot.tables.values() for block in table}
        return [block for block, count in enumerate(snapshot.refs) if count and block not in in_tables]

    def evict(self, blocks_wanted: int) -> None:
        """``evict(blocks_wanted)``, either way notebook 05 allows when fewer blocks can be freed than
        asked: drop every entry nobody else uses and return, or raise MemoryError having changed
        nothing. After such a refusal the check asks for what can be freed, so the scenario goes on
        as after the first design."""
        before = CacheSnapshot.of(self.cache)
        possible = len(before.free) + len(self.evictable(before))
        try:
            call_learner(f"evict({blocks_wanted})", self.prefixes.evict, blocks_wanted, scenario=self.scenario)
        except CheckFailed as error:
            if not isinstance(error.__cause__, MemoryError) or isinstance(error, NotImplementedYet):
                raise
            where = f"{self.scenario}: evict({blocks_wanted}) with {possible} block(s) free at most after evicting"
            if blocks_wanted <= possible:
                fail(
                    where,
                    f"{blocks_wanted} free blocks: evict drops unused entries until that many are free",
                    f"MemoryError: {error.__cause__}",
                    "MemoryError is only for a request evict cannot meet; here dropping the entries nobody "
                    "else uses (reference count 1) frees enough",
                )
            changes = before.changes(CacheSnapshot.of(self.cache))
            if changes:
                fail(
                    where,
                    "either every entry nobody else uses dropped and no error, or MemoryError with nothing changed",
                    "MemoryError, after changing: " + "; ".join(changes),
                    "when evict cannot free blocks_wanted blocks, free all it can and return (the notebook's "
                    "design), or raise MemoryError before dropping anything: a caller that catches the "
                    "error must find the cache as it was",
                )
            call_learner(f"evict({possible})", self.prefixes.evict, possible, scenario=self.scenario)

    def expect_free(self, count: int, after: str, hint: str | Hint) -> None:
        free = self.reads.num_free(f"{self.scenario}, after {after}")
        if free != count:
            fail(f"{self.scenario}, after {after}", f"{count} free blocks", f"{free}", hint)

    def evict_blocks(self, count: int, why: str) -> str:
        """evict(num_free + count): exactly ``count`` cached blocks must go back. Returns the step's name."""
        wanted = self.reads.num_free(self.scenario) + count
        self.evict(wanted)
        after = f"evict({wanted}) ({count} more block(s) wanted{why})"
        free = self.reads.num_free(f"{self.scenario}, after {after}")
        if free != wanted:
            fail(
                f"{self.scenario}, after {after}",
                f"{wanted} free blocks: exactly {count} cached block(s) dropped",
                f"{free}",
                "evict drops unused entries, least recently used first, until allocator.num_free >= "
                "blocks_wanted, then stops",
            )
        return after

    def expect_reachable(self, after: str, reuse: dict[str, tuple[list[int], int]]) -> None:
        """With no request running, every block the prefix cache holds must be reachable by attach.

        ``reuse`` maps a prompt's name to (prompt, tokens attach must reuse). Each prompt is attached
        as a probe and freed again (which touches its entries: call this last in a step).
        """
        assert not self.prompts, "expect_reachable needs every request freed"
        held = {
            block
            for block, refs in enumerate(self.reads.refs(self.scenario))
            if refs
        }
        reached, got = set(), {}
        for name, (prompt, _) in reuse.items():
            probe = f"probe {name}"
            got[name] = call_learner(
                f"attach({probe!r}, {name})", self.prefixes.attach, probe, list(prompt), scenario=self.scenario
            )
            reached.update(self.reads.table(probe, self.scenario))
            call_learner(f"free({probe!r})", self.cache.free, probe, scenario=self.scenario)
        stranded = sorted(held - reached)
        if stranded:
            fail(
                f"{self.scenario}, after {after}, then attaching {', '.join(reuse)} again",
                "every block the prefix cache still holds reachable: "
                + ", ".join(f"{name} reuses {tokens} tokens" for name, (_, tokens) in reuse.items()),
                f"block(s) {stranded} still held by the prefix cache but reached by no attach ("
                + ", ".join(f"{name} reused {tokens}" for name, tokens in got.items())
                + "): their entries lost an earlier block",
                STRANDED_HINT,
            )
        for name, (_, tokens) in reuse.items():
            if got[name] != tokens:
                fail(
                    f"{self.scenario}, after {after}, then attaching {name} again",
                    f"{tokens} prompt tokens reused",
                    f"{got[name]}",
                    STRANDED_HINT if got[name] < tokens else "evict dropped fewer entries than it reported",
                )

    def finish(self) -> None:
        """Free every request and evict everything: no block may stay in use."""
        for seq in list(self.prompts):
            self.free(seq)
        self.evict(self.num_blocks)
        stuck = [
            block
            for block, refs in enumerate(self.reads.refs(self.scenario))
            if refs
        ]
        if stuck:
            fail(
                f"{self.scenario}, after freeing every request and evict({self.num_blocks})",
                f"all {self.num_blocks} blocks free (nothing uses them, so the cache can drop them all)",
                f"block(s) {stuck} still hold references {[self.allocator.refs[b] for b in stuck]}",
                LEAK_HINT,
            )


def _tokens(rng: random.Random, count: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(count)]


def _served_twice(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(PrefixCache, PagedKVCache, 16, "a 10-token prompt A served, freed, then served again")
    prompt = _tokens(rng, 10)
    first = server.serve("a1", prompt, "A", reused=0)
    after = "remember('a1', A)"
    for block in first[:2]:
        server.expect_refcount(
            block,
            2,
            "a1's table + the prefix cache's own reference",
            after,
            OWN_REFERENCE_HINT,
            "publish each block once: one reference for the cache",
        )
    server.expect_refcount(
        first[2],
        1,
        "a1's table only: it holds 2 of 4 tokens",
        after,
        "a1 still uses its partial block",
        PARTIAL_HINT,
    )
    server.free("a1")
    server.expect_free(
        16 - 2,
        "free('a1')",
        "the two full blocks stay (the cache holds them), the partial one returns to the pool",
    )
    second = server.serve(
        "a2",
        prompt,
        "A",
        reused=8,
        short_hint=Hint(
            "the cache's blocks must survive free('a1'): " + OWN_REFERENCE_HINT.concept, OWN_REFERENCE_HINT.change
        ),
    )
    after = "attach('a2', A), prefill and remember('a2', A)"
    for block in second[:2]:
        server.expect_refcount(
            block,
            2,
            "a2's table + the prefix cache",
            after,
            "attach must share() each reused block: a2's table points at it too",
            "remember must not take a second reference on a block already cached under "
            "that prefix (skip keys that are already there)",
        )
    longer = prompt + _tokens(rng, 3)
    server.serve(
        "a3",
        longer,
        "A + 3 tokens",
        reused=8,
        short_hint="A's full blocks are cached: a longer prompt starting with A reuses them",
    )
    server.finish()


def _entirely_cached(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(PrefixCache, PagedKVCache, 16, "a 12-token prompt B (three full blocks), cached")
    prompt = _tokens(rng, 12)
    first = server.serve("b1", prompt, "B", reused=0)
    for block in first:
        server.expect_refcount(
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


def _same_text_other_history(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(PrefixCache, PagedKVCache, 24, "prompts C and D cached, then blocks with their text elsewhere")
    c, d = _tokens(rng, 10), _tokens(rng, 10)
    server.serve("c", c, "C", reused=0)
    server.serve("d", d, "D", reused=0)
    server.free("c")
    server.free("d")
    shifted = c[4:8] + _tokens(rng, 3)  # C's second block of text, but at the start of the prompt
    server.attach("e1", shifted, "C[4:8] + 3 tokens", reused=0)
    crossed = c[:4] + d[4:8] + _tokens(rng, 2)  # C's first block, then D's second block of text
    server.attach("e2", crossed, "C[:4] + D[4:8] + 2 tokens", reused=4)
    server.finish()


def _lru_after_hit(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(PrefixCache, PagedKVCache, 12, "F then G cached, F hit again, then evict one block")
    f, g = _tokens(rng, 9), _tokens(rng, 9)
    f_blocks = server.serve("f1", f, "F", reused=0)[:2]
    server.free("f1")
    g_blocks = server.serve("g1", g, "G", reused=0)[:2]
    server.free("g1")
    server.serve("f2", f, "F", reused=8)  # a hit: F's entries become the most recently used
    server.free("f2")
    wanted = server.reads.num_free(server.scenario) + 1
    server.evict(wanted)
    after = f"evict({wanted}) (one more block wanted)"
    free = server.reads.num_free(server.scenario)
    if free != wanted:
        fail(
            f"{server.scenario}, after {after}",
            f"{wanted} free blocks: exactly one cached block dropped",
            f"{free}",
            "evict drops entries only until allocator.num_free >= blocks_wanted, then stops",
        )
    for block in f_blocks:
        server.expect_refcount(
            block,
            1,
            "F's block, used just now: still cached",
            after,
            Hint(
                "G's blocks were the least recently used, not F's: attach must mark every entry it hits as "
                "most recently used, and evict must go from the least recently used end",
                "in attach, entries.move_to_end(key) for every hit; in evict, walk list(entries) from the start",
            ),
            EXTRA_REFERENCE_HINT,
        )
    if server.allocator.refs[g_blocks[0]] == 0 and server.allocator.refs[g_blocks[1]] == 1:
        fail(
            f"{server.scenario}, after {after}",
            f"G's last full block (block {g_blocks[1]}) evicted, its first (block {g_blocks[0]}) kept",
            f"block {g_blocks[0]}, G's first block, evicted: block {g_blocks[1]} stays cached but is now "
            "unreachable (attach stops at G's first block)",
            STRANDED_HINT,
        )
    server.expect_refcount(
        g_blocks[1],
        0,
        "G's last full block, the least recently used entry: evicted",
        after,
        "a count below 0 means a block was released more often than it was shared",
        "evict the least recently used entry first: G's (F was hit after G was cached), and of G's "
        "entries its tail (G's second block), since a prompt's entries are touched tail first",
    )
    server.attach("f3", f, "F", reused=8, short_hint="F's blocks were used after G's and must still be cached")
    server.finish()


def _evict_under_pressure(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(PrefixCache, PagedKVCache, 12, "H cached and still running, I cached and finished, evict all")
    h, i = _tokens(rng, 9), _tokens(rng, 9)
    h_blocks = server.serve("h1", h, "H", reused=0)  # h1 keeps running: its blocks are in use
    server.serve("i1", i, "I", reused=0)
    server.free("i1")
    server.evict(12)
    after = "evict(12) with H's cached blocks still in use by 'h1'"
    for block in h_blocks[:2]:
        server.expect_refcount(
            block,
            2,
            "h1's table + the prefix cache: in use, so not evictable",
            after,
            "evict must skip blocks that someone else uses (refcount above 1): dropping them "
            "frees no memory and throws away a prefix that is still hot",
            EXTRA_REFERENCE_HINT,
        )
    server.expect_free(
        12 - 3,
        after,
        "every cached block nobody else uses (I's two) goes back to the pool; H's three blocks stay in use",
    )
    server.attach("h2", h, "H", reused=8, short_hint="H's entries are in use and must survive evict")
    server.finish()


def _long_prompt_evicted_in_steps(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(
        PrefixCache, PagedKVCache, 16, "a 13-token prompt A (three full blocks) cached, then evicted in steps"
    )
    prompt = _tokens(rng, 13)
    server.serve("a1", prompt, "A", reused=0)
    server.free("a1")
    after = server.evict_blocks(1, " after A was served and freed")
    server.expect_reachable(after, {"A": (prompt, 8)})
    # An engine attaches, finds no room for the rest, and undoes the admission before any prefill.
    server.attach("a2", prompt, "A", reused=8, short_hint="A's first two blocks must still be cached")
    server.free("a2")
    after = server.evict_blocks(1, " after A was attached and freed again without prefill")
    server.expect_reachable(after, {"A": (prompt, 4)})
    # Served again: attach reuses block 0, remember publishes blocks 1 and 2 anew.
    server.serve("a3", prompt, "A", reused=4, short_hint="A's first block must still be cached")
    server.free("a3")
    after = server.evict_blocks(2, " after A was served again from its first block")
    server.expect_reachable(after, {"A": (prompt, 4)})
    server.finish()


def _shared_root(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(
        PrefixCache, PagedKVCache, 16, "prompts A and B sharing their first block, cached, then evicted in steps"
    )
    root = _tokens(rng, 4)
    a, b = root + _tokens(rng, 9), root + _tokens(rng, 9)
    server.serve("a", a, "A", reused=0)
    server.free("a")
    server.serve("b", b, "B", reused=4, short_hint="B starts with A's first block, which is cached")
    server.free("b")
    after = server.evict_blocks(1, " after A, then B, were served and freed")
    server.expect_reachable(after, {"A": (a, 8), "B": (b, 12)})
    after = server.evict_blocks(2, " after A, then B, were attached again")
    server.expect_reachable(after, {"A": (a, 4), "B": (b, 8)})
    server.finish()


def _gap_before_a_cached_block(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(
        PrefixCache,
        PagedKVCache,
        16,
        "P[:5] and P[:9] admitted together, P[:5] finished and its block evicted, then P attached",
    )
    prompt = _tokens(rng, 14)
    server.attach("s1", prompt[:5], "P[:5]", reused=0)
    server.attach("s2", prompt[:9], "P[:9]", reused=0)  # admitted before s1 published anything
    first = server.prefill("s1")
    second = server.prefill("s2")
    after = "remember('s2', P[:9]) with P[:4] already cached by 's1'"
    server.expect_refcount(
        first[0], 2, "s1's table + the prefix cache", after, OWN_REFERENCE_HINT, EXTRA_REFERENCE_HINT
    )
    server.expect_refcount(
        second[0],
        1,
        "s2's table only: P[:4] is already cached under s1's block",
        after,
        "a count below 1 means s2's block was released while s2 still uses it",
        LEAK_HINT,
    )
    server.expect_refcount(
        second[1], 2, "s2's table + the prefix cache (P[:8] is new)", after, OWN_REFERENCE_HINT, EXTRA_REFERENCE_HINT
    )
    server.free("s1")
    # P[:8]'s block is in use by s2, so only P[:4]'s entry can go: a gap before a cached block.
    server.evict_blocks(1, " with s2 still running")
    server.attach(
        "s3",
        prompt,
        "P",
        reused=0,
        short_hint="P[:4] was evicted: nothing after it can be reused",
    )
    server.finish()


def _hit_without_prefill(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    server = _Server(
        PrefixCache, PagedKVCache, 12, "F then G cached, F attached and undone before prefill, then evict 2"
    )
    f, g = _tokens(rng, 9), _tokens(rng, 9)
    f_blocks = server.serve("f1", f, "F", reused=0)[:2]
    server.free("f1")
    server.serve("g1", g, "G", reused=0)
    server.free("g1")
    # An engine attaches F, finds no room for the rest and frees it again: attach alone was the hit.
    server.attach("f2", f, "F", reused=8)
    server.free("f2")
    after = server.evict_blocks(2, " after F's hit")
    for block in f_blocks:
        server.expect_refcount(
            block,
            1,
            "F's block, hit after G's were cached: still cached",
            after,
            Hint(
                "a hit makes an entry recently used the moment attach finds it, whether or not the request "
                "goes on to prefill and remember: G's entries were the least recently used",
                "in attach, entries.move_to_end(key) for every key it hits (tail first, after the walk)",
            ),
            EXTRA_REFERENCE_HINT,
        )
    server.finish()


# --------------------------------------------------------------------------- hidden scenarios


def _expected_reuse(cached: set[tuple[int, ...]], prompt: list[int]) -> int:
    """Tokens attach must reuse: whole cached blocks from the start, leaving one token to prefill."""
    reused = 0
    while reused + BLOCK <= len(prompt) - 1 and tuple(prompt[: reused + BLOCK]) in cached:
        reused += BLOCK
    return reused


def _hidden_prefix_tree(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    """Nine prompts, all but one branching off an earlier prompt at a random point, some still
    running, none evicted."""
    server = _Server(PrefixCache, PagedKVCache, 96, "a hidden scenario")
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
        prompt = prompt + _tokens(rng, rng.randint(1, 12))
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
    server = _Server(PrefixCache, PagedKVCache, 64, "a hidden scenario")
    for k, blocks in enumerate(rng.sample((1, 2, 3, 4), 4)):
        prompt = _tokens(rng, BLOCK * blocks)
        server.serve(f"m{k}", prompt, f"prompt {k}", reused=0)
        server.free(f"m{k}")
        server.serve(f"n{k}", prompt, f"prompt {k} again", reused=len(prompt) - BLOCK, short_hint=LAST_TOKEN_HINT)
        server.free(f"n{k}")
        longer = prompt + _tokens(rng, 1)
        server.serve(f"o{k}", longer, f"prompt {k} plus one token", reused=len(prompt))
        server.free(f"o{k}")
    server.finish()


VISIBLE_SCENARIOS = (
    _served_twice,
    _entirely_cached,
    _same_text_other_history,
    _lru_after_hit,
    _hit_without_prefill,
    _evict_under_pressure,
    _long_prompt_evicted_in_steps,
    _shared_root,
    _gap_before_a_cached_block,
)


def _hidden_visible_scenarios(PrefixCache: Any, PagedKVCache: Any, rng: random.Random) -> None:
    for scenario in VISIBLE_SCENARIOS:
        scenario(PrefixCache, PagedKVCache, rng)


HIDDEN_KINDS = {
    "prompts branching off earlier prompts at random points, some still running": _hidden_prefix_tree,
    "prompts of a whole number of blocks, served again and extended by one token": _hidden_exact_multiples,
    "the visible scenarios again, their tokens drawn from the grader's seed": _hidden_visible_scenarios,
}


STORY = Story(visible=VISIBLE_SCENARIOS, hidden=HIDDEN_KINDS)


@check(notebook="05_prefix_caching", builds="PrefixCache", partners=(("04_fork_and_copy_on_write", "PagedKVCache"),))
def check_prefix_cache(PrefixCache: Any, PagedKVCache: Any, seed: int = 0, hidden: bool = False) -> str | None:
    """Reuse, references, history-aware keys, the token left to prefill, LRU and eviction rules.

    ``hidden=True`` (the hidden tests) runs every one of ``HIDDEN_KINDS`` instead, sized by ``seed``.
    """
    return STORY.tell(PrefixCache, PagedKVCache, seed=seed, hidden=hidden)
