"""The scene of check_copy_on_write: the learner's cache, driven one step at a time.

A ``Scene`` owns one learner's ``PagedKVCache`` (2 layers, blocks of 4) and the check's account of
it (``cow_account.Account``). Each step calls the learner's method, records in the account what the
step must have done, and checks what must hold after it against the account (``cow_expectations``).
It writes each token's keys and values straight into the pools, standing in for the forward pass.
A ``reserve`` that cannot get every copy and new block raises MemoryError and changes nothing
(``refused_write``).
"""

from __future__ import annotations

from typing import Any

from ..reading.cache_reads import CacheReads, new_paged_cache
from ..reading.calls import call_learner
from ..reading.learner_code import assign
from ..reading.ledger import expect_all_free
from ..reading.snapshot import expect_refused
from .cow_account import BLOCK, HEAD_DIM, KV_HEADS, LAYERS, Account, key_of, value_of
from .cow_expectations import expect_forked, expect_histories, expect_refcounts, expect_reserved, plan_reserve
from .diagnosis import ALL_OR_NOTHING_HINT


class Scene:
    """One scenario: the learner's cache, plus the check's own account of what each sequence holds."""

    def __init__(self, PagedKVCache: Any, num_blocks: int, scenario: str) -> None:
        self.scenario = scenario
        self.num_blocks = num_blocks
        self.cache = new_paged_cache(PagedKVCache, (LAYERS, num_blocks, BLOCK, KV_HEADS, HEAD_DIM), scenario=scenario)
        self.reads = CacheReads(self.cache)
        self.account = Account(num_blocks)

    # -- what the cache says ------------------------------------------------------------------

    @property
    def allocator(self) -> Any:
        return self.cache.allocator

    def holders(self, block: int, besides: str | None = None) -> list[str]:
        """The sequences whose table names ``block`` (other than ``besides``)."""
        return [seq for seq in self.account.ledger.holders(self.tables())[block] if seq != besides]

    # Plain copies of the learner's bookkeeping (reading.cache_reads): never compared as the learner's objects.
    def tables(self) -> dict:
        return self.reads.tables(self.scenario)

    def length(self, seq: str) -> int:
        return self.reads.length(seq, self.scenario)

    def refs(self) -> list[int]:
        return self.reads.refs(self.scenario)

    def num_free(self) -> int:
        return self.reads.num_free(self.scenario)

    # -- steps ----------------------------------------------------------------------------------

    def create(self, seq: str) -> None:
        call_learner(f"create({seq!r})", self.cache.create, seq, scenario=self.scenario)
        self.account.created(seq)

    def start(self, seq: str, prompt: int) -> None:
        """create(seq), then write its ``prompt`` tokens."""
        self.create(seq)
        self.write(seq, prompt)

    def fork(self, parent: str, child: str) -> None:
        free_before = self.num_free()
        call_learner(f"fork({parent!r}, {child!r})", self.cache.fork, parent, child, scenario=self.scenario)
        expect_forked(self, parent, child, free_before=free_before)
        self.account.forked(parent, child)
        expect_refcounts(
            self,
            f"fork({parent!r}, {child!r})",
            too_low="fork must share() every block of the new table: the child points at it too, so "
            "its count grows by one",
            too_high="fork takes exactly one more reference per block of the parent's table",
        )

    def write(self, seq: str, count: int) -> None:
        """reserve(seq, count) checked block by block, then the stand-in forward pass writes."""
        self.reserve(seq, count)
        self._store(seq, count)

    def reserve(self, seq: str, count: int) -> None:
        """reserve(seq, count), checked block by block; nothing is written (the room stays empty)."""
        plan = plan_reserve(self, seq, count)
        call_learner(plan.what, self.cache.reserve, seq, count, scenario=self.scenario)
        expect_reserved(self, plan)

    def refused_write(self, seq: str, count: int, free_blocks: int, needed: int) -> None:
        """reserve(seq, count) must raise MemoryError and leave everything as it was."""
        what = f"reserve({seq!r}, {count})"
        expect_refused(
            MemoryError,
            what,
            self.cache.reserve,
            seq,
            count,
            cache=self.cache,
            scenario=f"{self.scenario}, {what} with {free_blocks} free block(s) for {needed} needed",
            hint="a reserve that needs more blocks (copies included) than are free must raise MemoryError",
            changed_hint=ALL_OR_NOTHING_HINT,
        )

    def free(self, seq: str) -> None:
        call_learner(f"free({seq!r})", self.cache.free, seq, scenario=self.scenario)
        self.account.freed(seq)
        expect_refcounts(
            self,
            f"free({seq!r})",
            too_high="free releases each block of the table once",
            too_low="free releases each block of the table once",
        )
        expect_histories(self, after=f"free({seq!r})")

    def finish(self) -> None:
        """Free every live sequence: every block must be back in the pool."""
        for seq in self.account.live():
            self.free(seq)
        expect_all_free(
            self.allocator,
            self.num_blocks,
            f"{self.scenario}, after every sequence was freed",
            "a block copied away from must be released once, or it leaks for the life of the server",
        )

    def _store(self, seq: str, count: int) -> None:
        """The stand-in forward pass: write keys and values of ``count`` new tokens of ``seq``."""
        self.account.writer(seq)
        table, length = self.tables()[seq], self.length(seq)
        for position in range(length, length + count):
            base = self.account.base_of(seq, position)
            block, offset = table[position // BLOCK], position % BLOCK
            for layer in range(LAYERS):
                assign(self.cache, ("k_pool", layer, (block, slice(None), offset)), key_of(base, layer))
                assign(self.cache, ("v_pool", layer, (block, slice(None), offset)), value_of(base, layer))
            self.account.stored(seq, position, base)
        self.cache.lengths[seq] = length + count
        expect_histories(self, after=f"{seq!r} wrote {count} token(s)")
