"""The driver of ``check_radix_cache``: the learner's RadixCache over the learner's allocator, used
the way an engine uses it.

An engine's request: ``match`` the prompt, ``lock`` the node, share the matched blocks into the
request's table and allocate the rest (``evict`` when the pool is empty), ``insert`` after prefill,
lock the new node and unlock the old one; at the end unlock and release the table. ``TreeEngine``
owns the learner's two objects and the order of these calls; after each it hands what came back to
``tree_expectations`` and, once a step is done, the whole tree to ``TreeAccount.verify``.

This module also keeps the tests' old import path of ``check_cache_aware_order``'s visible queues
and story (``ORDER_CASES``, ``ORDER_STORY``: the module once held both checks without the model).
"""

from __future__ import annotations

from typing import Any

from ..reading.calls import call_learner, call_learner_allowing
from ..reading.ledger import ceil_div
from ..reading.strict import learner_int
from ..speaking.failure import fail
from .diagnosis import ALLOCATE_HINT, LOCK_HINT, MATCH_WALK_HINT
from .order.scenarios import ORDER_CASES, ORDER_STORY
from .tree_account import TreeAccount
from .tree_expectations import expect_evicted, expect_inserted, expect_match
from .tree_reads import BLOCK, TreeReads

__all__ = ["ORDER_CASES", "ORDER_STORY", "TreeEngine"]


class TreeEngine:
    """The learner's ``RadixCache`` over the learner's ``BlockAllocator`` of ``num_blocks`` blocks.

    ``reads`` reads the learner's tree, ``account`` is the check's record of it (its ``ledger`` and
    ``locked`` are what a scenario may write directly, as an engine doing something unusual would).
    """

    def __init__(self, RadixCache: Any, BlockAllocator: Any, num_blocks: int, scenario: str) -> None:  # noqa: N803
        self.scenario, self.num_blocks = scenario, num_blocks
        self.allocator = call_learner(f"BlockAllocator({num_blocks})", BlockAllocator, num_blocks, scenario=scenario)
        self.radix = call_learner(
            f"RadixCache(allocator, block_size={BLOCK})", RadixCache, self.allocator, BLOCK, scenario=scenario
        )
        self.reads = TreeReads(self.radix, self.allocator, scenario)
        self.account = TreeAccount(self.reads, num_blocks)

    # --- the learner's calls -----------------------------------------------------------------
    def match(self, tokens: list[int], what: str) -> tuple[Any, list[int]]:
        cached = self.reads.tree_blocks()
        got = call_learner(f"match({what})", self.radix.match, list(tokens), scenario=self.scenario)
        return expect_match(self.account, tokens, got, cached, what)

    def lock(self, node: Any, what: str) -> None:
        call_learner(f"lock({what})", self.radix.lock, node, scenario=self.scenario)

    def unlock(self, node: Any, what: str) -> None:
        call_learner(f"unlock({what})", self.radix.unlock, node, scenario=self.scenario)

    def evict(self, wanted: int) -> None:
        before = {id(node): (node, path, self.reads.lock_count(node)) for node, path in self.reads.nodes()}
        refs = self.reads.refs()
        call_learner(f"evict({wanted})", self.radix.evict, wanted, scenario=self.scenario)
        expect_evicted(self.account, before, refs, f"{self.scenario}, evict({wanted})")

    # --- an engine's request -----------------------------------------------------------------
    def serve(self, request: str, prompt: list[int], name: str, reused: int | None = None) -> list[int]:
        """match + lock, a table of matched blocks + fresh ones, prefill, insert, move the lock."""
        node, blocks = self.match(prompt, name)
        if reused is not None and len(blocks) * BLOCK != reused:
            fail(
                f"{self.scenario}, match({name})",
                f"{reused} cached tokens ({reused // BLOCK} blocks)",
                f"{len(blocks) * BLOCK} tokens, blocks {blocks}",
                MATCH_WALK_HINT,
            )
        self.lock(node, name)
        table = []
        for block in blocks:
            call_learner(f"allocator.share({block})", self.allocator.share, block, scenario=self.scenario)
            table.append(block)
        for index in range(len(blocks), ceil_div(len(prompt), BLOCK)):
            table.append(self.allocate(name))
            self.account.ledger.wrote(table[-1], tuple(prompt[: (index + 1) * BLOCK]))  # the prefill writes it
        self.account.ledger.tables[request] = table
        new = call_learner(
            f"insert({name}, table)", self.radix.insert, list(prompt), list(table), scenario=self.scenario
        )
        full = tuple(prompt[: len(prompt) // BLOCK * BLOCK])
        self.account.names.setdefault(full, name)
        where = f"{self.scenario}, insert({name}, table)"
        expect_inserted(self.account, new, full, name, where)
        self.lock(new, name)
        self.unlock(node, f"{name}'s matched node, after insert")
        self.account.locked[request] = (new, full)
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
            fail(where, "evict to free a block: some cached leaf is unlocked", "no free block after evict", LOCK_HINT)
            raise  # fail always raises; this keeps type checkers content

    def _in_pool(self, block: Any, where: str) -> int:
        """A block id the allocator handed out: an int of the pool, or a failure naming it."""
        block = learner_int(block, "the block allocator.allocate() returned", where)
        if not 0 <= block < self.num_blocks:
            fail(
                where,
                f"allocator.allocate() returning a block id in 0..{self.num_blocks - 1}",
                repr(block),
                ALLOCATE_HINT,
            )
        return block

    def finish(self, request: str) -> None:
        node, _ = self.account.locked.pop(request)
        self.unlock(node, f"{request}'s node")
        for block in self.account.ledger.tables.pop(request):
            call_learner(f"allocator.release({block})", self.allocator.release, block, scenario=self.scenario)
        self.verify(f"{self.scenario}, after request {request!r} finished (unlock, release its table)")

    def drain(self) -> None:
        """Finish every request, evict everything: no block may stay in use."""
        for request in list(self.account.ledger.tables):
            self.finish(request)
        self.evict(self.num_blocks)
        self.account.expect_empty(f"{self.scenario}, after every request finished and evict({self.num_blocks})")

    # --- what the scenarios read ---------------------------------------------------------------
    def verify(self, where: str) -> None:
        self.account.verify(where)

    def num_free(self) -> int:
        return self.reads.num_free()
