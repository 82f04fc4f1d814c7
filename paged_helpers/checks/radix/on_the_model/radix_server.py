"""The driver of ``check_radix_logits``: the learner's radix cache on the learner's paged cache, under
the tiny Qwen3, served one request at a time (``RadixModelServer``, on ``RequestServer``'s steps).

Every request: ``match`` all but the last prompt token, ``lock`` the node; the request created with
the matched blocks shared into its table, ``reserve`` the rest (``evict`` first when the pool is
short); prefill only the tokens after the match, ``insert``, move the lock; decode; unlock and
``free`` at the end. Every prefilled and decoded row of logits must equal a from-scratch run. Before
a forward pass the server compares what it knows with what the learner's code handed out: each
matched block holds the keys written for exactly that prefix and is unchanged since, and no freshly
reserved block is still in the tree or in another running request's table.
"""

from __future__ import annotations

from typing import Any

import torch

from ...reading.calls import call_learner
from ...reading.strict import learner_tensor, strict_equal
from ...speaking.failure import fail
from .diagnosis import BLOCKS_KEPT_HINT, MATCHED_WRONG_HINT, OVERWRITTEN_HINT, REUSE_HINT
from .request_server import BLOCK, RequestServer, longest_cached, tree_blocks

__all__ = ["RadixModelServer"]


class RadixModelServer(RequestServer):
    """The learner's radix cache on the learner's paged cache, under the tiny Qwen3, one request at a time.

    The check keeps its own record of every full block it prefilled: the prefix whose keys it
    holds (``written``) and a copy of its layer-0 keys (``keys``). Only the check writes these
    records; the learner's code is judged against them.
    """

    def __init__(self, RadixCache: Any, PagedKVCache: Any, num_blocks: int, scenario: str, seed: int) -> None:  # noqa: N803
        super().__init__(PagedKVCache, num_blocks, scenario, seed)
        self.tree = self.radix = call_learner(
            f"RadixCache(cache.allocator, block_size={BLOCK})",
            RadixCache,
            self.cache.allocator,
            BLOCK,
            scenario=scenario,
        )
        self.written: dict[int, tuple[int, ...]] = {}
        self.keys: dict[int, torch.Tensor] = {}

    # --- one request --------------------------------------------------------------------------
    def serve(self, seq: str, prompt: list[int], name: str, expect_reuse: bool) -> None:
        """match, lock, table, prefill (checked), insert, decode (checked). The request keeps running."""
        where = f"{self.scenario}: {name} ({len(prompt)} tokens)"
        node, blocks = self.match(prompt, name, where)
        reused = len(blocks) * BLOCK
        if expect_reuse:
            wanted = longest_cached(self.served, prompt[:-1])
            if reused != wanted:
                fail(where, f"{wanted} tokens reused from the cache", f"{reused} ({len(blocks)} blocks)", REUSE_HINT)
        self._expect_matched_blocks(blocks, prompt, where)
        self.lock(node, f"node of {name}'s match", where)
        # create, then the matched blocks shared into the new table (the request's own references)
        self.create_holding(seq, blocks, prompt[:reused], "match's blocks", where)
        self.locks[seq] = node
        self.prefill(seq, prompt, reused, where)
        for index, block in enumerate(self._table(seq)[len(blocks) : len(prompt) // BLOCK], start=len(blocks)):
            self.written[block] = tuple(prompt[: (index + 1) * BLOCK])
            self.keys[block] = self._layer0_keys(block).clone()
        self.publish(seq, prompt, name, node, self._table(seq), where)
        self.decode(seq, where)

    def drain(self) -> None:
        for seq in list(self.locks):
            self.finish(seq)
        call_learner(f"evict({self.num_blocks})", self.radix.evict, self.num_blocks, scenario=self.scenario)
        self._expect_tree_held(f"{self.scenario}, after every request finished and evict({self.num_blocks})")
        free = self._num_free()
        if free != self.num_blocks:
            fail(
                f"{self.scenario}, after every request finished and evict({self.num_blocks})",
                f"all {self.num_blocks} blocks free",
                f"{free} free",
                BLOCKS_KEPT_HINT,
            )

    # --- the engine's steps --------------------------------------------------------------------
    def _reserve(self, seq: str, tokens: int, where: str) -> None:
        """Every block reserve adds must be free: in no table and not in the tree."""
        before = len(self._table(seq))
        super()._reserve(seq, tokens, where)
        self._expect_fresh(seq, self._table(seq)[before:], where)

    def expect_after_evict(self, where: str) -> None:
        self._expect_tree_held(where)

    # --- what the check knows -----------------------------------------------------------------

    # Read strictly (reading.cache_reads): a learner's int or tensor subclass cannot answer for itself.
    def _refs(self, where: str) -> list[int]:
        return self.reads.refs(where)

    def _table(self, seq: str) -> list[int]:
        return self.reads.table(seq, self.scenario)

    def _num_free(self) -> int:
        return self.reads.num_free(self.scenario)

    def _layer0_keys(self, block: int) -> torch.Tensor:
        return learner_tensor(self.cache.k_pool[0], "cache.k_pool[0]", self.scenario)[block]

    def _expect_matched_blocks(self, blocks: list[int], prompt: list[int], where: str) -> None:
        refs = self._refs(where)
        for index, block in enumerate(blocks):
            wanted = tuple(prompt[: (index + 1) * BLOCK])
            written = self.written.get(block)
            if written != wanted:
                what = "nothing this check prefilled" if written is None else self._describe(written)
                fail(
                    where,
                    f"match's block {index} holding the keys of this prompt's tokens 0..{len(wanted) - 1}",
                    f"block {block}, which holds {what}",
                    MATCHED_WRONG_HINT,
                )
            if not refs[block]:
                fail(
                    where,
                    f"block {block} (match's block {index}) held by the tree: refcount at least 1",
                    "refcount 0: the block is on the free list, though match still hands it out",
                    OVERWRITTEN_HINT,
                )
            if not strict_equal(self._layer0_keys(block), self.keys[block]):
                fail(
                    where,
                    f"block {block} (match's block {index}) unchanged since its prefill wrote it",
                    "its keys were overwritten: the block went back to the free list while the tree held it",
                    OVERWRITTEN_HINT,
                )

    def _expect_tree_held(self, where: str) -> None:
        refs = self._refs(where)
        for block, prefix in tree_blocks(self.radix, where).items():
            if not refs[block]:
                fail(
                    where,
                    f"block {block}, which the tree still holds for tokens 0..{len(prefix) - 1} of a cached prefix, "
                    "kept out of the free list",
                    "refcount 0: the next reserve may hand it out and overwrite its keys",
                    OVERWRITTEN_HINT + "; a leaf whose blocks evict releases leaves the tree",
                )

    def _expect_fresh(self, seq: str, added: list[int], where: str) -> None:
        in_tree = tree_blocks(self.radix, where)
        for block in added:
            if block in in_tree:
                fail(
                    where,
                    f"reserve for {seq!r} given free blocks only",
                    f"block {block}, which the tree still holds "
                    f"for tokens 0..{len(in_tree[block]) - 1} of a cached prefix",
                    OVERWRITTEN_HINT,
                )
            others = [other for other in list(self.cache.tables) if other != seq and block in self._table(other)]
            if others:
                fail(
                    where,
                    f"reserve for {seq!r} given free blocks only",
                    f"block {block}, which running request {others[0]!r} still uses",
                    OVERWRITTEN_HINT,
                )

    def _describe(self, written: tuple[int, ...]) -> str:
        for number, sequence in enumerate(self.served):
            if sequence[: len(written)] == written:
                return f"the keys of tokens 0..{len(written) - 1} of request {number + 1} served"
        return f"the keys of another prefix of {len(written)} tokens"
