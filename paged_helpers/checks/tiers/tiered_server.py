"""The driver of ``check_tiered_cache``: the learner's tiered cache on the learner's paged cache, under
the tiny Qwen3, serving requests the way an engine with a host tier serves them.

1. ``match`` all but the last prompt token, ``lock`` the node; ``match_host`` the whole blocks after
   the GPU match (it pins their host slots); ``load_back`` copies them into fresh GPU blocks;
2. create the request holding the matched and the loaded blocks, ``reserve`` the rest (``evict``
   first when the pool is short: each evicted block is offloaded to the host first);
3. prefill only the tokens after the GPU and host matches, ``insert``, move the lock; decode a
   token; at the end unlock and free.

``TieredServer`` owns the order of these calls (``RequestServer``'s steps, notebook 10's model check
takes them too, with the host tier between match and the table); after each call that moves blocks it
hands the tiers to the check's account (``TierAccount``) and what came back to ``tier_expectations``.
"""

from __future__ import annotations

from typing import Any

from ..radix.on_the_model.request_server import BLOCK, RequestServer, longest_cached
from ..reading.calls import call_learner
from ..reading.strict import learner_int_list, learner_key, learner_list
from ..speaking.failure import fail
from .diagnosis import FRESH_HINT, GPU_COUNT_HINT, KEYS_HINT, LOGITS_HINT, REUSE_HINT
from .scenarios import DECODE_STEPS
from .tier_account import TierAccount
from .tier_expectations import expect_fresh_loads, expect_holds

__all__ = ["TieredServer"]


class TieredServer(RequestServer):
    """The learner's ``TieredRadixCache`` (of ``host_slots`` host slots, write ``policy``) on the learner's
    ``PagedKVCache`` of ``num_blocks`` blocks. ``account`` is the check's record of both tiers;
    ``host_hits`` counts the blocks loaded back (the tests make sure the scenarios use the tier)."""

    LOGITS_HINT = LOGITS_HINT
    DECODE_STEPS = DECODE_STEPS

    def __init__(
        self, classes: tuple[Any, Any], num_blocks: int, host_slots: int, policy: str, scenario: str, seed: int
    ) -> None:
        TieredRadixCache, PagedKVCache = classes  # noqa: N806
        super().__init__(PagedKVCache, num_blocks, scenario, seed)
        self.host_slots, self.policy = host_slots, policy
        self.tree = self.tiered = call_learner(
            f"TieredRadixCache(cache, host_slots={host_slots}, write_policy={policy!r})",
            TieredRadixCache,
            self.cache,
            host_slots,
            policy,
            scenario=scenario,
        )
        self.account = TierAccount(self.tiered, self.cache, self.reads, num_blocks, host_slots, policy)
        self.host_hits = 0

    # --- one request ------------------------------------------------------------------------------
    def serve(self, seq: str, prompt: list[int], name: str, expect_reuse: bool) -> None:
        where = f"{self.scenario}: {name} ({len(prompt)} tokens)"
        if not self.account.record:
            self._expect_given_keys(prompt, where)
        node, blocks = self.match(prompt, name, where)
        expect_holds(self.account, blocks, prompt, "match's block", where)
        self.lock(node, f"node of {name}'s match", where)
        slots = self._match_host(prompt, name, blocks, expect_reuse, where)
        reused = (len(blocks) + len(slots)) * BLOCK
        loaded = self._load_back(slots, prompt, len(blocks), where)
        self.create_holding(seq, blocks + loaded, prompt[:reused], "match's and load_back's blocks", where)
        for block in loaded:  # hand load_back's reference over to the table
            call_learner(f"allocator.release({block})", self.cache.allocator.release, block, scenario=where)
        self.locks[seq] = node
        self.account.expect_tiers(f"{where}, after load_back")
        self.prefill(seq, prompt, reused, where)
        table = self._record_prefill(seq, prompt, reused, where)
        self.publish(seq, prompt, name, node, table, where)
        self.account.expect_tiers(f"{where}, after insert", inserted=prompt)
        self.decode(seq, where)

    def _match_host(self, prompt: list[int], name: str, blocks: list[int], expect_reuse: bool, where: str) -> list[int]:
        """``match_host`` after the GPU's ``blocks``: the host slots it pinned, the reuse of both tiers checked."""
        slots = learner_int_list(
            call_learner(
                f"match_host({name} without its last token, {len(blocks)})",
                self.tiered.match_host,
                prompt[:-1],
                len(blocks),
                scenario=where,
            ),
            "the slots match_host returned",
            where,
        )
        self.account.pins += slots
        reused = (len(blocks) + len(slots)) * BLOCK
        if expect_reuse:
            wanted = longest_cached(self.served, prompt[:-1])
            if reused != wanted:
                fail(
                    where,
                    f"{wanted} tokens reused from the two tiers",
                    f"{reused} ({len(blocks)} blocks on the GPU, {len(slots)} on the host)",
                    REUSE_HINT,
                )
        self.account.expect_tiers(f"{where}, after match_host", gpu=False)
        return slots

    def _load_back(self, slots: list[int], prompt: list[int], first: int, where: str) -> list[int]:
        """``load_back`` of the pinned ``slots``: the fresh GPU blocks it returned, each holding its prefix."""
        loaded = learner_int_list(
            call_learner(f"load_back({slots})", self.tiered.load_back, slots, scenario=where),
            "the blocks load_back returned",
            where,
        )
        for slot in slots:
            self.account.pins.remove(slot)
        if len(loaded) != len(slots):
            fail(where, f"load_back({slots}) returning {len(slots)} blocks", f"{len(loaded)}: {loaded}", FRESH_HINT)
        expect_fresh_loads(self.account, loaded, prompt, first, slots, list(self.locks), where)
        self.host_hits += len(slots)
        return loaded

    def _record_prefill(self, seq: str, prompt: list[int], reused: int, where: str) -> list[int]:
        """The check's copy of every whole block the prefill wrote, by key; returns the request's table."""
        table, pools, keys = self.account.table(seq, where), self.account.gpu_pools(where), self.account.keys_of(prompt)
        for index in range(reused // BLOCK, len(prompt) // BLOCK):
            self.account.record[keys[index]] = pools[:, table[index]].clone()
        return table

    def _expect_given_keys(self, prompt: list[int], where: str) -> None:
        """The learner's block_keys (given code) gives the chain keys: the check compares its host
        entries with those."""
        got = learner_list(
            call_learner(
                f"block_keys(prompt of {len(prompt)} tokens)", self.tiered.block_keys, list(prompt), scenario=where
            ),
            "the keys block_keys returned",
            where,
            learner_key,
        )
        if got != self.account.keys_of(prompt):
            fail(
                where,
                f"block_keys giving notebook 05's chain of {len(prompt) // BLOCK} hashes, as hex",
                "other keys",
                KEYS_HINT,
            )

    # --- the end of a scenario ----------------------------------------------------------------------
    def evict_all(self) -> None:
        where = f"{self.scenario}, evict({self.num_blocks}) with no request running"
        call_learner(f"evict({self.num_blocks})", self.tiered.evict, self.num_blocks, scenario=where)
        self.account.expect_tiers(where)

    def drain(self) -> None:
        for seq in list(self.locks):
            self.finish(seq)
        self.evict_all()
        free = self.reads.num_free(self.scenario)
        if free != self.num_blocks:
            fail(
                f"{self.scenario}, after every request finished and evict({self.num_blocks})",
                f"all {self.num_blocks} GPU blocks free",
                f"{free} free",
                GPU_COUNT_HINT,
            )

    def expect_after_evict(self, where: str) -> None:
        self.account.expect_tiers(where)
