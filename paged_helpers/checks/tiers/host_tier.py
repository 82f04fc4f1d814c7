"""check_tiered_cache: a host tier under the radix cache, on the model (notebook 11).

The course's tiny Qwen3 runs on the learner's ``PagedKVCache`` (notebook 04) with the learner's
``TieredRadixCache`` (notebook 11: notebook 10's ``RadixCache`` plus a host pool) on that cache's
allocator, and every request is served the way an engine with a host tier serves it:

1. ``match`` all but the last prompt token, ``lock`` the node; ``match_host`` the whole blocks after
   the GPU match (it pins their host slots); ``load_back`` copies them into fresh GPU blocks;
2. create the request holding the matched and the loaded blocks, ``reserve`` the rest (``evict``
   first when the pool is short: each evicted block is offloaded to the host first);
3. prefill only the tokens after the GPU and host matches, ``insert``, move the lock; decode a
   token; at the end unlock and free.

Every prefilled and decoded row of logits must equal a from-scratch run. Before that, after every
call that moves blocks, the check compares what it knows (its own copy of the keys and values of
every block it prefilled, by the block's key: notebook 05's chained hash of the tokens from the start
of the prompt to the block's end, as hex, ``keys.chain_keys``; the learner's ``block_keys`` is given
code and must give the same) with both tiers, so that a wrong logit comes with the rule it broke:

- both pools' counts: a GPU block's count is 1 for the tree plus 1 per table; a host slot's count is
  1 for its entry plus 1 per pin not yet undone; the free lists hold exactly the unused ones;
- every host entry's slot holds its key's keys; every block ``load_back`` returns is fresh (count
  1, in no table and not in the tree) and holds the keys of the prefix it was loaded for (a pinned
  slot was not given away meanwhile);
- no block is lost between the tiers: every key the check prefilled is in the tree or on the host,
  unless the host is full (then its LRU may drop entries); with write-through, every block is on
  the host as soon as it is inserted.

Scenarios: for both write policies, chats served one at a time through a GPU pool that holds about
one chat, over a host that holds them all (every evicted prefix must come back from the host:
reuse equals a brute-force longest match); for write-back, a load-back that has to evict from the
GPU while every host slot is pinned; for write-through, chats two at a time in a small pool over a
host half its size (every insert writes, so the host's LRU churns).
"""

from __future__ import annotations

import functools
import random
from typing import Any, NamedTuple

import torch

from ...model import tiny_config
from ...workloads import multi_turn_chats, random_tokens
from ..radix.on_the_model import BLOCK, RequestServer, longest_cached, tree_blocks
from ..reading.calls import call_learner
from ..reading.ledger import Ledger, ceil_div
from ..reading.strict import (
    learner_dict,
    learner_int,
    learner_int_list,
    learner_key,
    learner_list,
    learner_tensor,
    strict_equal,
)
from ..registry import check
from ..speaking.failure import fail
from ..story import Story
from .keys import chain_keys

__all__ = ["check_tiered_cache"]

DECODE_STEPS = 1
VOCAB = tiny_config().vocab_size
WRITE_BACK, WRITE_THROUGH = "write-back", "write-through"

PIN_HINT = (
    "a slot that match_host pinned (count above 1) belongs to the request loading it until load_back "
    "unpins it: when the host is full, _host_slot may drop only an entry whose slot has count 1, and "
    "returns None when every slot is pinned"
)
FRESH_HINT = (
    "load_back copies into blocks it just allocated from the GPU allocator (after evict, if too few were "
    "free), never into a block the tree or a running request still holds"
)
LOST_HINT = (
    "a block may leave the GPU tree only with a copy on the host: evict offloads every block of the leaf "
    "(offload copies a dirty block, one with no host entry, and finds a clean one already there) before "
    "it releases them"
)
THROUGH_HINT = "with write-through, insert offloads every whole block of the prompt as soon as it is cached"
KEYS_HINT = (
    "block_keys is given code: it must return notebook 05's block_hashes of the tokens' whole blocks, each "
    "digest as hex (restore it from the notebook, and notebook 05's block_hashes, chain_step and root_hash)"
)
HOST_DATA_HINT = (
    "offload copies every layer's keys and values of the GPU block into the host slot it gives the key, "
    "and the entry names that slot"
)
HOST_COUNT_HINT = (
    "a host slot's count is 1 for its entry (allocate), plus 1 per pin (match_host shares it) until "
    "load_back releases the pin; dropping an entry releases its slot"
)
GPU_COUNT_HINT = (
    "a GPU block's count is 1 for the tree plus 1 per request table: load_back hands each block over "
    "with count 1 (allocate), and evict releases the tree's reference of every block of the leaf"
)
REUSE_HINT = (
    "match finds the GPU's part of the prefix; match_host continues from there with the next whole "
    "blocks' keys, as long as each has a host entry; a prefix evicted from the GPU to a host with room "
    "must come back from the host"
)
LOGITS_HINT = (
    "the tiers' contents were right, so look at the request's table: the matched blocks, then the loaded "
    "ones in order, then the reserved ones; the prefill starts after the GPU and host matches"
)


class _Server(RequestServer):
    """The learner's tiered cache on the learner's paged cache, under the tiny Qwen3 (``RequestServer``:
    the steps notebook 10's model check takes too, with a host tier between match and the table).

    The check's own records: ``record[key]``, a copy of the keys and values (every layer) it prefilled for each
    block key; ``pins``, the host slots match_host pinned and load_back has not yet unpinned.
    """

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
        self.record: dict[str, torch.Tensor] = {}
        self.ends: dict[str, int] = {}  # each recorded key -> the tokens its block ends after
        self.pins: list[int] = []
        self.verified: dict[str, int] = {}  # host entries whose data the check compared
        self.host_hits = 0  # blocks loaded back: the tests make sure the scenarios use the tier
        self._keys: dict[tuple[int, ...], list[str]] = {}

    def keys_of(self, tokens: Any) -> list[str]:
        """The chain key of each whole block of ``tokens`` (``keys.chain_keys``), remembered per prefix."""
        whole = tuple(tokens[: len(tokens) // BLOCK * BLOCK])
        if whole not in self._keys:
            self._keys[whole] = chain_keys(whole, BLOCK)
            for index, key in enumerate(self._keys[whole]):
                self.ends[key] = (index + 1) * BLOCK
        return self._keys[whole]

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
        if got != self.keys_of(prompt):
            fail(
                where,
                f"block_keys giving notebook 05's chain of {len(prompt) // BLOCK} hashes, as hex",
                "other keys",
                KEYS_HINT,
            )

    # --- one request ------------------------------------------------------------------------------
    def serve(self, seq: str, prompt: list[int], name: str, expect_reuse: bool) -> None:
        where = f"{self.scenario}: {name} ({len(prompt)} tokens)"
        if not self.record:
            self._expect_given_keys(prompt, where)
        node, blocks = self.match(prompt, name, where)
        self._expect_holds(blocks, prompt, "match's block", where)
        self.lock(node, f"node of {name}'s match", where)
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
        self.pins += slots
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
        self._expect_tiers(f"{where}, after match_host", gpu=False)
        loaded = learner_int_list(
            call_learner(f"load_back({slots})", self.tiered.load_back, slots, scenario=where),
            "the blocks load_back returned",
            where,
        )
        for slot in slots:
            self.pins.remove(slot)
        if len(loaded) != len(slots):
            fail(where, f"load_back({slots}) returning {len(slots)} blocks", f"{len(loaded)}: {loaded}", FRESH_HINT)
        self._expect_fresh_loads(loaded, prompt, len(blocks), slots, where)
        self.host_hits += len(slots)
        self.create_holding(seq, blocks + loaded, prompt[:reused], "match's and load_back's blocks", where)
        for block in loaded:  # hand load_back's reference over to the table
            call_learner(f"allocator.release({block})", self.cache.allocator.release, block, scenario=where)
        self.locks[seq] = node
        self._expect_tiers(f"{where}, after load_back")
        self.prefill(seq, prompt, reused, where)
        table, pools, keys = self._table(seq, where), self._gpu_pools(where), self.keys_of(prompt)
        for index in range(reused // BLOCK, len(prompt) // BLOCK):
            self.record[keys[index]] = pools[:, table[index]].clone()
        self.publish(seq, prompt, name, node, table, where)
        self._expect_tiers(f"{where}, after insert", inserted=prompt)
        self.decode(seq, where)

    def evict_all(self) -> None:
        where = f"{self.scenario}, evict({self.num_blocks}) with no request running"
        call_learner(f"evict({self.num_blocks})", self.tiered.evict, self.num_blocks, scenario=where)
        self._expect_tiers(where)

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
        self._expect_tiers(where)

    # --- what the check knows -------------------------------------------------------------------
    def _table(self, seq: str, where: str) -> list[int]:
        return self.reads.table(seq, where)

    def _gpu_pools(self, where: str) -> torch.Tensor:
        return _pools(self.cache, "cache", where)

    def _host_entries(self, where: str) -> dict:
        return learner_dict(self.tiered.host_entries, "host_entries", where, learner_int)

    def _expect_holds(self, blocks: list[int], prompt: list[int], what: str, where: str) -> None:
        """GPU ``blocks`` are the first blocks of ``prompt``: each holds the keys of its prefix."""
        pools = self._gpu_pools(where) if blocks else None
        keys = self.keys_of(prompt)
        for index, block in enumerate(blocks):
            key = keys[index] if index < len(keys) else None
            if key not in self.record or not strict_equal(pools[:, block], self.record[key]):
                fail(
                    where,
                    f"{what} {index} (block {block}) holding the keys of this prompt's tokens "
                    f"0..{(index + 1) * BLOCK - 1}",
                    "other keys",
                    LOST_HINT if what == "match's block" else FRESH_HINT,
                )

    def _expect_fresh_loads(
        self, loaded: list[int], prompt: list[int], first: int, slots: list[int], where: str
    ) -> None:
        refs = self.reads.refs(where)
        in_tree = tree_blocks(self.tiered, where)
        tables = {seq: self._table(seq, where) for seq in list(self.locks)}
        for block in loaded:
            holders = ["the tree"] if block in in_tree else []
            holders += [f"running request {seq!r}" for seq, table in tables.items() if block in table]
            if holders or not 0 <= block < len(refs) or refs[block] != 1:
                got = (
                    f"load-back into block {block}, which {holders[0]} still holds"
                    if holders
                    else (f"block {block} with count {refs[block] if 0 <= block < len(refs) else 'none (not a block)'}")
                )
                fail(where, "load_back's blocks fresh: count 1, in no table and not in the tree", got, FRESH_HINT)
        entries = self._host_entries(where)
        pools = self._gpu_pools(where) if loaded else None
        keys = self.keys_of(prompt)
        for index, (block, slot) in enumerate(zip(loaded, slots, strict=True), start=first):
            key = keys[index] if index < len(keys) else None
            if key in self.record and strict_equal(pools[:, block], self.record[key]):
                continue
            if entries.get(key) != slot:
                fail(
                    where,
                    f"block {block}, loaded from host slot {slot} (pinned by match_host for tokens "
                    f"0..{(index + 1) * BLOCK - 1}), holding those tokens' keys",
                    f"other keys: the host dropped that entry while the slot was pinned"
                    f" (host_entries now gives the key {'no slot' if key not in entries else f'slot {entries[key]}'})",
                    PIN_HINT,
                )
            fail(where, f"block {block} holding the keys of host slot {slot}", "other keys", HOST_DATA_HINT)

    def _expect_tiers(self, where: str, inserted: list[int] | None = None, gpu: bool = True) -> None:
        """Both pools' counts, the host's contents, no block lost (``gpu=False``: the host's counts only,
        after a call that moves no data and no GPU block)."""
        entries = self._host_entries(where)
        host = Ledger(self.host_slots)  # the host pool's holders: its entries and the pins
        for key, slot in entries.items():
            if not 0 <= slot < self.host_slots:
                fail(where, f"host_entries naming slots 0..{self.host_slots - 1}", f"slot {slot}", HOST_COUNT_HINT)
            who = f"the entry of tokens 0..{self.ends[key] - 1}" if key in self.ends else "an entry of an unknown key"
            host.hold(who, [slot])
        for slot in self.pins:
            if not 0 <= slot < self.host_slots:
                fail(where, f"match_host pinning slots 0..{self.host_slots - 1}", f"slot {slot}", PIN_HINT)
            host.hold("a pin", [slot])
        host_holders = host.holders()
        host_refs = learner_int_list(self.tiered.host.refs, "host.refs", where)
        for slot, who in enumerate(host_holders):
            if slot < len(host_refs) and host_refs[slot] != len(who):
                fail(
                    f"{where}: the count of host slot {slot}",
                    f"{len(who)} ({' + '.join(who) if who else 'a free slot: no entry, no pin'})",
                    host_refs[slot],
                    HOST_COUNT_HINT,
                )
        host.expect_pool(self.tiered.host, f"{where}, host pool", lambda *_: HOST_COUNT_HINT)
        if not gpu:
            return
        tree = tree_blocks(self.tiered, where)
        tables = {seq: self._table(seq, where) for seq in list(self.cache.tables)}
        gpu_pool = Ledger(self.num_blocks)
        for block in tree:
            if 0 <= block < self.num_blocks:
                gpu_pool.hold("the tree", [block])
        gpu_pool.expect_pool(self.cache.allocator, f"{where}, GPU pool", lambda *_: GPU_COUNT_HINT, tables=tables)
        # An entry's data is compared once per (key, slot): a slot's data changes only when another key
        # takes it, and a load-back of a slot is compared with the record when it happens.
        fresh = {key: slot for key, slot in entries.items() if key in self.record and self.verified.get(key) != slot}
        host = _pools(_host_view(self.tiered), "tiered.host", where) if fresh else None
        for key, slot in fresh.items():
            self.verified[key] = slot
            if not strict_equal(host[:, slot], self.record[key]):
                fail(
                    where,
                    f"host slot {slot} (the entry of tokens 0..{self.ends[key] - 1}) holding those tokens' keys",
                    "other keys",
                    HOST_DATA_HINT if not self.pins or slot not in self.pins else PIN_HINT,
                )
        on_gpu = {self.keys_of(path)[-1] for path in tree.values() if len(path) >= BLOCK}
        host_full = learner_int(self.tiered.host.num_free, "host.num_free", where) == 0
        if not host_full:
            for key in self.record:
                if key not in on_gpu and key not in entries:
                    fail(
                        where,
                        f"the block of tokens 0..{self.ends[key] - 1} in the GPU tree or on the host "
                        f"(the host has free slots, so its LRU dropped nothing)",
                        "in neither: the block was lost between the tiers",
                        LOST_HINT,
                    )
            if inserted is not None and self.policy == WRITE_THROUGH:
                for index, key in enumerate(self.keys_of(inserted)):
                    end = (index + 1) * BLOCK
                    if key not in entries:
                        fail(
                            where,
                            f"with write-through, the block of tokens 0..{end - 1} on the host once inserted",
                            "no host entry for it",
                            THROUGH_HINT,
                        )


class _HostPools(NamedTuple):
    """The host pools under the names a paged cache's pools have, for ``_pools``."""

    k_pool: Any
    v_pool: Any


def _host_view(tiered: Any) -> _HostPools:
    return _HostPools(tiered.host_k_pool, tiered.host_v_pool)


def _pools(owner: Any, name: str, where: str) -> torch.Tensor:
    """Every layer's ``k_pool`` and ``v_pool`` of ``owner`` (read strictly), stacked: [2 x layers, blocks, ...].
    Block b's keys and values are ``[:, b]``."""
    layers = len(owner.k_pool)
    parts = [
        learner_tensor(pools[layer], f"{name}.{label}_pool[{layer}]", where)
        for label, pools in (("k", owner.k_pool), ("v", owner.v_pool))
        for layer in range(layers)
    ]
    with torch._C.DisableTorchFunction():
        return torch.stack([part.detach().cpu() for part in parts])


# --- scenarios --------------------------------------------------------------------------------------
# A plan: ("serve", seq, prompt, name, expect_reuse), ("finish", seq) and ("evict_all",) steps.

Plan = list[tuple]


class _Scenario(NamedTuple):
    name: str
    pool: int
    host: int
    policy: str
    plan: Plan


def _request_blocks(prompt: list[int]) -> int:
    """The most GPU blocks one running request holds: its table, plus the tree's duplicate of a last
    prompt block that match (which leaves out the last token) could not hand over."""
    return ceil_div(len(prompt) + DECODE_STEPS, BLOCK) + (len(prompt) % BLOCK == 0)


def _one_at_a_time(rng: random.Random, policy: str) -> _Scenario:
    """Three chats of three turns, one request at a time, chats taking turns; a GPU pool of one request
    plus a block, a host with room for every block (so every evicted prefix must come back)."""
    chats = multi_turn_chats(3, 3, 4, (2, 5), (3, 6), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    for turn in range(3):
        for chat in range(3):
            seq = f"chat{chat}-turn{turn}"
            plan += [("serve", seq, chats[chat][turn], f"chat {chat}, turn {turn}", True), ("finish", seq)]
    pool = max(_request_blocks(prompt) for chat in chats for prompt in chat) + 1
    host = sum(len(chat[-1]) // BLOCK for chat in chats) + 4
    return _Scenario(
        f"{policy}: three chats taking turns, one at a time (GPU pool {pool}, host {host})", pool, host, policy, plan
    )


def _load_back_while_pinned(rng: random.Random, policy: str) -> _Scenario:
    """Write-back, a host of 2 slots, a GPU pool of 3. Prompt X (two whole blocks) is served and
    evicted to the host; prompt Y fills the GPU tree; X comes back: match_host pins both host slots
    and load_back must evict Y from the GPU while nothing on the host may be dropped."""
    x, y = random_tokens(9, VOCAB, rng), random_tokens(9, VOCAB, rng)
    plan: Plan = [
        ("serve", "x", x, "prompt X", True),
        ("finish", "x"),
        ("evict_all",),
        ("serve", "y", y, "prompt Y", True),
        ("finish", "y"),
        ("serve", "x-again", x, "prompt X again (its blocks on the host)", True),
        ("finish", "x-again"),
    ]
    return _Scenario(
        f"{policy}: a load-back that evicts while every host slot is pinned (GPU pool 3, host 2)", 3, 2, policy, plan
    )


def _two_at_a_time_churning(rng: random.Random, policy: str) -> _Scenario:
    """Three chats of four turns, two requests at once, in a GPU pool that forces evictions over a host
    of half its size: the host fills and its LRU drops entries (reuse is not compared: any LRU order
    a correct tier keeps is fine)."""
    chats = multi_turn_chats(3, 4, 4, (2, 5), (3, 6), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    running: list[str] = []
    held: dict[str, int] = {}
    most = 0
    for turn in range(4):
        for chat in rng.sample(range(3), 3):
            seq = f"chat{chat}-turn{turn}"
            plan.append(("serve", seq, chats[chat][turn], f"chat {chat}, turn {turn}", False))
            running.append(seq)
            held[seq] = _request_blocks(chats[chat][turn])
            most = max(most, sum(held[s] for s in running))
            if len(running) > 1:
                done = running.pop(0)
                plan.append(("finish", done))
    pool = max(most, 14)
    host = max(2, pool // 2)
    return _Scenario(
        f"{policy}: three chats, two at a time (GPU pool {pool}, host {host}: the host churns)",
        pool,
        host,
        policy,
        plan,
    )


# The churning host is write-through's regime (every insert writes); write-back's eviction path is
# under pressure in the pinned scenario.
SCENARIOS = (
    (_one_at_a_time, (WRITE_BACK, WRITE_THROUGH)),
    (_load_back_while_pinned, (WRITE_BACK,)),
    (_two_at_a_time_churning, (WRITE_THROUGH,)),
)


def _run(classes: tuple[Any, Any], scenario: _Scenario, seed: int) -> _Server:
    server = _Server(classes, scenario.pool, scenario.host, scenario.policy, scenario.name, seed)
    for step in scenario.plan:
        if step[0] == "serve":
            _, seq, prompt, name, expect_reuse = step
            server.serve(seq, prompt, name, expect_reuse)
        elif step[0] == "finish":
            server.finish(step[1])
        else:
            server.evict_all()
    server.drain()
    return server


def scenarios(seed: int) -> list[_Scenario]:
    """The scenarios of one check call, drawn from ``seed`` (before any model runs)."""
    rng = random.Random(seed)
    return [make(rng, policy) for make, policies in SCENARIOS for policy in policies]


@check(
    notebook="11_cache_tiers_and_routing",
    builds="TieredRadixCache",
    partners=(("04_fork_and_copy_on_write", "PagedKVCache"),),
)
def check_tiered_cache(TieredRadixCache: Any, PagedKVCache: Any, *, seed: int = 0) -> str:  # noqa: N803
    """Blocks go to the host and come back with their from-scratch logits; counts hold in both pools, none is lost."""
    return Story(visible=(functools.partial(_planned_scenarios, seed=seed),)).tell(
        TieredRadixCache, PagedKVCache, seed=seed
    )


def _planned_scenarios(TieredRadixCache: Any, PagedKVCache: Any, _rng: random.Random, *, seed: int) -> str:  # noqa: N803
    """Every scenario planned from ``seed`` (each pool sized for what its plan asks), then served."""
    planned = scenarios(seed)
    loaded = 0
    for scenario in planned:
        loaded += _run((TieredRadixCache, PagedKVCache), scenario, seed).host_hits
    return (
        f"{len(planned)} scenarios, {loaded} blocks loaded back from the host, "
        "every row of logits equal to a from-scratch run"
    )
