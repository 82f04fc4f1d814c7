"""The steps an engine takes on the learner's cache, each followed by what must hold after it.

``CacheHarness`` calls the learner's ``create``, ``reserve``, ``truncate`` and ``free`` the way an
engine does and keeps the check's account in step (``CacheAccount``): only ``reserve`` (appending),
``truncate`` (cutting) and ``free`` change a table, and only the table of the sequence they are
called for. A refused call (``create`` of an existing sequence, a ``reserve`` the pool cannot
supply) must change nothing.
"""

from __future__ import annotations

import random

from ..reading.cache_reads import read_cache_ahead
from ..reading.calls import expect_raise
from ..reading.learner_code import learner_type
from ..reading.ledger import ceil_div, expect_all_free
from ..reading.snapshot import expect_refused
from ..reading.strict import learner_int
from ..speaking.failure import CheckFailed, NotImplementedYet, fail
from . import diagnosis
from .cache_account import CacheAccount
from .diagnosis import call_naming_cause

__all__ = ["CacheHarness"]


class CacheHarness(CacheAccount):
    """One method per bookkeeping step an engine takes, each checked against the account after it."""

    def create(self, seq) -> None:
        call_naming_cause(f"create({seq!r})", self.cache.create, seq, scenario=self.where)
        lengths = self.reads.lengths(self.where)
        if self.learner_tables().get(seq) != [] or lengths.get(seq) != 0:
            fail(
                f"{self.where}: after create({seq!r})",
                "tables[seq] == [] and lengths[seq] == 0",
                f"tables {self.cache.tables.get(seq, 'missing')}, lengths {self.cache.lengths.get(seq, 'missing')}",
                "create starts an empty sequence: no blocks until reserve asks for them.",
            )
        self.ledger.tables[seq] = []

    def refused_create(self, seq) -> None:
        expect_raise(
            ValueError,
            f"create({seq!r})",
            self.cache.create,
            seq,
            scenario=f"{self.where}: create({seq!r}) twice",
            hint="creating a sequence that exists would silently drop its table (and leak its blocks): "
            "raise ValueError.",
        )

    def free(self, seq) -> None:
        call_naming_cause(f"free({seq!r})", self.cache.free, seq, scenario=self.where)
        read_cache_ahead(self.cache)
        if seq in self.cache.tables or seq in self.cache.lengths:
            fail(
                f"{self.where}: after free({seq!r})",
                f"{seq!r} gone from tables and lengths",
                f"still in {'tables' if seq in self.cache.tables else 'lengths'}",
                "free must forget the sequence: remove it from tables and lengths after releasing its blocks.",
            )
        del self.ledger.tables[seq]
        self.forget_writes(seq)
        self.expect_accounting(f"free({seq!r})")

    def forget_writes(self, seq) -> None:
        """What the harness keeps of ``seq`` beside its table (``BatchHarness``: its keys and values)."""

    def reserve(self, seq, new_tokens: int, why: str = "") -> None:
        """reserve; the table then holds exactly blocks_needed(length + new_tokens) blocks (never fewer)."""
        cache, block_size = self.cache, self.cache.block_size
        before, length = list(self.ledger.tables[seq]), self.learner_length(seq)
        expected = max(len(before), ceil_div(length + new_tokens, block_size))
        where = f"{self.where}{why}: reserve({seq!r}, {new_tokens}) at length {length} with {len(before)} block(s)"
        if hasattr(cache, "blocks_to_add"):
            self._expect_blocks_to_add(seq, new_tokens, length, len(before), expected - len(before))
        free, what = self.learner_num_free(), f"reserve({seq!r}, {new_tokens})"
        try:
            call_naming_cause(what, cache.reserve, seq, new_tokens, scenario=self.where + why)
        except NotImplementedYet:
            raise
        except CheckFailed as error:
            if not isinstance(error.__cause__, MemoryError):
                raise
            missing, cache_class = expected - len(before), learner_type(cache)
            refused = diagnosis.refused_fit(error, cache_class, block_size, self.where + why, missing, free)
            raise refused from error.__cause__
        table = self.learner_tables()[seq]
        if len(table) != expected:
            fail(
                where,
                f"{expected} block(s)",
                f"{len(table)} block(s): {table}",
                diagnosis.reserve_hint(len(before), length, new_tokens, block_size, len(table)),
            )
        if table[: len(before)] != before:
            fail(
                f"{where}: the blocks it already held",
                before,
                table[: len(before)],
                "reserve only appends blocks: the blocks already in the table hold written keys and values.",
            )
        self.ledger.tables[seq] = table
        self.expect_accounting(f"reserve({seq!r}, {new_tokens})")

    def _expect_blocks_to_add(self, seq, new_tokens: int, length: int, held: int, missing: int) -> None:
        """The optional ``blocks_to_add(seq, new_tokens)``: the blocks the table is missing, never negative."""
        what = f"blocks_to_add({seq!r}, {new_tokens})"
        to_add = call_naming_cause(what, self.cache.blocks_to_add, seq, new_tokens, scenario=self.where)
        if learner_int(to_add, what, self.where) != missing:
            fail(
                f"{self.where}: {what} with length {length} and {held} block(s)",
                missing,
                to_add,
                "the table needs blocks_needed(length + new_tokens) blocks in total; the blocks it "
                "already has count, and it never needs a negative number.",
            )

    def refused_reserve(self, seq, new_tokens: int, free: int, needed: int) -> None:
        """A reserve needing more blocks than are free: MemoryError, and the cache exactly as before."""
        expect_refused(
            MemoryError,
            f"reserve({seq!r}, {new_tokens})",
            self.cache.reserve,
            seq,
            new_tokens,
            cache=self.cache,
            scenario=f"{self.where}: reserve({seq!r}, {new_tokens}) needs {needed} more blocks but only {free} "
            "are free",
            hint="when the pool cannot supply every block, reserve must raise MemoryError (a scheduler catches "
            "it to wait or preempt), before allocating anything.",
            changed_hint=lambda before, after: diagnosis.kept_hint(
                len(after.tables.get(seq, [])) - len(before.tables[seq])
            ),
        )
        self.expect_accounting(f"reserve({seq!r}, {new_tokens}) raised MemoryError")

    def truncate(self, seq, length: int) -> None:
        """truncate keeps the first blocks_needed(length) blocks and releases every block it drops."""
        before, old_length = list(self.ledger.tables[seq]), self.learner_length(seq)
        call_naming_cause(f"truncate({seq!r}, {length})", self.cache.truncate, seq, length, scenario=self.where)
        block_size = self.cache.block_size
        keep = ceil_div(length, block_size)
        where = f"{self.where}: truncate({seq!r}, {length}) from length {old_length} with table {before}"
        got = self.learner_tables()[seq]
        if got != before[:keep]:
            hint = diagnosis.truncate_table_hint(length, block_size, len(got), len(before))
            fail(f"{where}: the table", before[:keep], got, hint)
        if self.learner_length(seq) != length:
            fail(f"{where}: lengths[{seq!r}]", length, self.cache.lengths[seq], "truncate sets the sequence's length.")
        dropped = before[keep:]
        refs = self.learner_refs()
        still_used = [block for block in dropped if refs[block]]
        if still_used and len(still_used) < len(dropped):  # none released at all: the accounting says "leaked"
            fail(
                f"{where}: the {len(dropped)} block(s) it dropped, {dropped}",
                "every one released (count 0, back on the free list)",
                f"block(s) {still_used} still counted as used: they leaked",
                diagnosis.TRUNCATE_RELEASES_TOO_FEW,
            )
        self.ledger.tables[seq] = got
        self.cut_writes(seq, length)
        self.expect_accounting(f"truncate({seq!r}, {length})")

    def cut_writes(self, seq, length: int) -> None:
        """What the harness keeps of ``seq`` past ``length`` (``BatchHarness``: its keys and values)."""

    def scramble(self, rng: random.Random) -> None:
        """Take every block with one-block sequences, then free them in a random order."""
        fillers = [f"filler-{index}" for index in range(self.num_blocks)]
        for filler in fillers:
            self.create(filler)
            self.reserve(filler, 1)
        for index in rng.sample(range(self.num_blocks), self.num_blocks):
            self.free(fillers[index])

    def finish(self, where: str) -> None:
        """Free every sequence: every block must be free again."""
        for seq in list(self.ledger.tables):
            self.free(seq)
        expect_all_free(
            self.cache.allocator, self.num_blocks, where, "every block must be back on the free list: nothing may leak."
        )
