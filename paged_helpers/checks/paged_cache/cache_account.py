"""The learner's cache and the check's account of it, with what must hold after every step.

``CacheAccount`` owns the learner's ``PagedKVCache`` (built here, on the setup's sizes), the plain
copies read of its bookkeeping (``reading.cache_reads``: never compared as the learner's objects), and
the check's own account, ``ledger.tables``: the table each sequence must have, learned block by block
as ``reserve`` hands blocks out. ``step`` names the story's current step; messages start with ``where``.

Who owns a reference: each entry of a block table owns one reference to its block, and nothing else
does (nothing is shared before notebook 04), so a block in a table has count 1 and appears in no other
table; a block in no table has count 0 and is on the free list exactly once (``expect_accounting``,
held against the pool's one invariant through ``reading.ledger``).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import torch

from ..reading.cache_reads import CacheReads, new_paged_cache
from ..reading.ledger import Ledger, ceil_div, expect_pool_matches
from ..speaking.failure import fail
from .diagnosis import blocks_needed_hint, call_naming_cause, count_hint

__all__ = ["CacheAccount", "CacheSetup"]


@dataclass(frozen=True)
class CacheSetup:
    """The sizes a cache is built with, in ``PagedKVCache``'s argument order."""

    layers: int
    num_blocks: int
    block_size: int
    kv_heads: int
    head_dim: int


class CacheAccount:
    """The learner's cache, the check's own account of its block tables, and the scenario's name."""

    def __init__(self, PagedKVCache: type, setup: CacheSetup, device: torch.device, scenario: str) -> None:  # noqa: N803
        self.setup, self.scenario, self.step = setup, scenario, ""
        self.num_blocks = setup.num_blocks
        self.ledger = Ledger(setup.num_blocks)
        sizes = astuple(setup)  # layers, num_blocks, block_size, kv_heads, head_dim
        self.cache = new_paged_cache(PagedKVCache, sizes, scenario=scenario, device=device, dtype=torch.float32)
        self.reads = CacheReads(self.cache)
        self.expect_a_new_cache()

    @property
    def where(self) -> str:
        return f"{self.scenario}, {self.step}" if self.step else self.scenario

    # Plain copies of the learner's bookkeeping (reading.cache_reads): never compared as the learner's objects.
    def learner_tables(self) -> dict:
        return self.reads.tables(self.where)

    def learner_length(self, seq) -> int:
        return self.reads.length(seq, self.where)

    def learner_num_free(self) -> int:
        return self.reads.num_free(self.where)

    def learner_refs(self) -> list[int]:
        return self.reads.refs(self.where)

    # -- expectations that hold after every step ---------------------------------------------------

    def expect_a_new_cache(self) -> None:
        cache, setup, where = self.cache, self.setup, self.scenario
        for name in ("k_pool", "v_pool", "block_size", "allocator", "tables", "lengths"):
            if not hasattr(cache, name):
                fail(
                    f"{where}: the attribute `{name}`",
                    "present",
                    "missing",
                    "keep the chapter's attribute names: the model, widgets and later notebooks use them.",
                )
        shape = (setup.num_blocks, setup.kv_heads, setup.block_size, setup.head_dim)
        for name in ("k_pool", "v_pool"):
            pools = getattr(cache, name)
            if len(pools) != setup.layers:
                fail(f"{where}: len({name})", setup.layers, len(pools), "one pool tensor per layer.")
            if tuple(pools[0].shape) != shape:
                fail(
                    f"{where}: {name}[0].shape",
                    shape,
                    tuple(pools[0].shape),
                    "each layer's pool is [num_blocks, kv_heads, block_size, head_dim].",
                )
        if cache.tables or cache.lengths:
            fail(
                f"{where}: a new cache",
                "no sequences",
                f"tables {cache.tables}, lengths {cache.lengths}",
                "tables and lengths start empty.",
            )
        self.expect_accounting("a new cache")

    def expect_accounting(self, after: str) -> None:
        """The tables are the check's account; each of their blocks has count 1; the rest are free, once."""
        where = f"{self.where}: after {after}"
        got = self.learner_tables()
        for seq in sorted(set(got) | set(self.ledger.tables), key=str):
            if got.get(seq) != self.ledger.tables.get(seq):
                fail(
                    f"{where}: the table of {seq!r}",
                    self.ledger.tables.get(seq, "no table"),
                    got.get(seq, "no table"),
                    "only reserve (appending blocks), truncate (dropping the last ones) and free (dropping "
                    "the table) change a table, and only the table of the sequence they are called for.",
                )
        holders = self.ledger.holders()
        twice = {block: who for block, who in enumerate(holders) if len(who) > 1}
        if twice:
            fail(
                f"{where}: block ownership",
                "each block in at most one table (nothing is shared yet)",
                f"tables {self.ledger.tables}",
                f"block(s) {twice} appear more than once: a block was handed out twice. "
                "Blocks must come from allocator.allocate(), which takes them off the free list.",
            )
        expect_pool_matches(self.cache.allocator, holders, where, count_hint)

    def expect_table_length(self, seq, expected: int, where: str, hint: str) -> None:
        tables = self.learner_tables()
        got = len(tables[seq]) if seq in tables else "no table"
        if got != expected:
            fail(f"{where}: blocks in the table of {seq!r}", expected, got, hint)

    def expect_blocks_needed(self) -> None:
        # Partial blocks first, then exact boundaries, then zero: each slip fails where its hint fits best.
        block_size = self.cache.block_size
        counts = [1, block_size + 1, 2 * block_size + 1, 3 * block_size - 1, block_size, 2 * block_size, 0]
        for tokens in counts:
            scenario = f"blocks_needed({tokens}) with block_size {block_size}"
            got = call_naming_cause(f"blocks_needed({tokens})", self.cache.blocks_needed, tokens, scenario=scenario)
            expected = ceil_div(tokens, block_size)
            if got != expected:
                fail(scenario, expected, got, blocks_needed_hint(tokens, block_size, got))
