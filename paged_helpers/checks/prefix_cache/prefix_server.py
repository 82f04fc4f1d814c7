"""The driver of check_prefix_cache: the learner's PrefixCache over the learner's PagedKVCache,
driven the way an engine drives them.

A ``Server`` owns the learner's two objects and the check's account of what it served:
``prompts`` (the running requests' prompts), ``names`` (each request's prompt as messages name it)
and the ledger (``ledger.writers``: each stored code -> (prompt name, position)). Each step calls
the learner's methods, then the expectations that hold after it (``prefix_expectations``); the scenarios
add the counts only they know.
"""

from __future__ import annotations

from typing import Any

from ..reading.cache_reads import CacheReads, new_paged_cache
from ..reading.calls import call_learner
from ..reading.learner_code import assign
from ..reading.ledger import Ledger
from ..reading.snapshot import CacheSnapshot
from ..speaking.failure import CheckFailed, Hint, NotImplementedYet
from .prefix_codes import BLOCK, prefix_code
from .prefix_expectations import expect_attached, expect_evicted, expect_nothing_held, expect_refusal_allowed


class Server:
    """The learner's PrefixCache over the learner's PagedKVCache, driven like an engine would."""

    def __init__(self, PrefixCache: Any, PagedKVCache: Any, num_blocks: int, scenario: str) -> None:
        self.scenario, self.num_blocks = scenario, num_blocks
        self.cache = new_paged_cache(PagedKVCache, (1, num_blocks, BLOCK, 1, 1), scenario=scenario)
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
        """attach(seq, prompt): exactly ``reused`` tokens reused, each holding this prompt's history."""
        what = f"attach({seq!r}, {name}) of a {len(prompt)}-token prompt"
        got = call_learner(what, self.prefixes.attach, seq, list(prompt), scenario=self.scenario)
        self.prompts[seq], self.names[seq] = list(prompt), name
        expect_attached(self, f"{self.scenario}, {what}", seq, got, reused=reused, short_hint=short_hint)

    def probe(self, probe: str, name: str, prompt: list[int]) -> tuple[Any, list[int]]:
        """attach(probe, prompt) and free it again: (what attach returned, the blocks it reached)."""
        got = call_learner(
            f"attach({probe!r}, {name})", self.prefixes.attach, probe, list(prompt), scenario=self.scenario
        )
        reached = self.reads.table(probe, self.scenario)
        call_learner(f"free({probe!r})", self.cache.free, probe, scenario=self.scenario)
        return got, reached

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
            expect_refusal_allowed(self, error, blocks_wanted, possible=possible, before=before)
            call_learner(f"evict({possible})", self.prefixes.evict, possible, scenario=self.scenario)

    def evict_blocks(self, count: int, why: str) -> str:
        """evict(num_free + count): exactly ``count`` cached blocks must go back. Returns the step's name."""
        wanted = self.reads.num_free(self.scenario) + count
        self.evict(wanted)
        after = f"evict({wanted}) ({count} more block(s) wanted{why})"
        expect_evicted(self, wanted, count, after)
        return after

    def finish(self) -> None:
        """Free every request and evict everything: no block may stay in use."""
        for seq in list(self.prompts):
            self.free(seq)
        self.evict(self.num_blocks)
        expect_nothing_held(self)
