"""The check's own account of both tiers in ``check_tiered_cache``, and the invariants they must keep with it.

``TierAccount`` owns what the check knows, never what the learner's code decides: ``record[key]``, a
copy of the keys and values (every layer) it prefilled for each block key (notebook 05's chained hash
of the tokens up to the block's end, as hex: ``keys.chain_keys``); ``ends[key]``, the tokens that
block ends after; ``pins``, the host slots match_host pinned and load_back has not yet unpinned;
``verified``, the host entries whose data it compared. After every call that moves blocks,
``expect_tiers`` holds the learner's tiers to it:

- both pools' counts: a GPU block's count is 1 for the tree plus 1 per table; a host slot's count is
  1 for its entry plus 1 per pin not yet undone; the free lists hold exactly the unused ones;
- every host entry's slot holds its key's keys;
- no block is lost between the tiers: every key the check prefilled is in the tree or on the host,
  unless the host is full (then its LRU may drop entries); with write-through, every block is on
  the host as soon as it is inserted.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from ..radix.on_the_model.request_server import BLOCK, tree_blocks
from ..reading.ledger import Ledger
from ..reading.strict import learner_dict, learner_int, learner_int_list, learner_tensor, strict_equal
from ..speaking.failure import fail
from .diagnosis import GPU_COUNT_HINT, HOST_COUNT_HINT, HOST_DATA_HINT, LOST_HINT, PIN_HINT, THROUGH_HINT
from .keys import chain_keys
from .scenarios import WRITE_THROUGH

__all__ = ["TierAccount", "pool_tensors"]


class TierAccount:
    """What the check knows of the learner's ``tiered`` cache over the learner's paged ``cache`` (read
    through ``reads``, the model run's ``CacheReads``), by its own account (see the module)."""

    def __init__(self, tiered: Any, cache: Any, reads: Any, num_blocks: int, host_slots: int, policy: str) -> None:
        self.tiered, self.cache, self.reads = tiered, cache, reads
        self.num_blocks, self.host_slots, self.policy = num_blocks, host_slots, policy
        self.record: dict[str, torch.Tensor] = {}
        self.ends: dict[str, int] = {}  # each recorded key -> the tokens its block ends after
        self.pins: list[int] = []
        self.verified: dict[str, int] = {}  # host entries whose data the check compared
        self._keys: dict[tuple[int, ...], list[str]] = {}

    def keys_of(self, tokens: Any) -> list[str]:
        """The chain key of each whole block of ``tokens`` (``keys.chain_keys``), remembered per prefix."""
        whole = tuple(tokens[: len(tokens) // BLOCK * BLOCK])
        if whole not in self._keys:
            self._keys[whole] = chain_keys(whole, BLOCK)
            for index, key in enumerate(self._keys[whole]):
                self.ends[key] = (index + 1) * BLOCK
        return self._keys[whole]

    # --- reading the learner's tiers ------------------------------------------------------------
    def table(self, seq: str, where: str) -> list[int]:
        return self.reads.table(seq, where)

    def gpu_pools(self, where: str) -> torch.Tensor:
        return pool_tensors(self.cache, "cache", where)

    def host_entries(self, where: str) -> dict:
        return learner_dict(self.tiered.host_entries, "host_entries", where, learner_int)

    # --- the invariants ---------------------------------------------------------------------------
    def expect_tiers(self, where: str, inserted: list[int] | None = None, gpu: bool = True) -> None:
        """Both pools' counts, the host's contents, no block lost (``gpu=False``: the host's counts only,
        after a call that moves no data and no GPU block)."""
        entries = self.host_entries(where)
        self._expect_host_counts(entries, where)
        if not gpu:
            return
        tree = tree_blocks(self.tiered, where)
        self._expect_gpu_counts(tree, where)
        self._expect_host_data(entries, where)
        self._expect_nothing_lost(tree, entries, inserted, where)

    def _expect_host_counts(self, entries: dict, where: str) -> None:
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

    def _expect_gpu_counts(self, tree: dict[int, tuple[int, ...]], where: str) -> None:
        tables = {seq: self.table(seq, where) for seq in list(self.cache.tables)}
        gpu_pool = Ledger(self.num_blocks)
        for block in tree:
            if 0 <= block < self.num_blocks:
                gpu_pool.hold("the tree", [block])
        gpu_pool.expect_pool(self.cache.allocator, f"{where}, GPU pool", lambda *_: GPU_COUNT_HINT, tables=tables)

    def _expect_host_data(self, entries: dict, where: str) -> None:
        # An entry's data is compared once per (key, slot): a slot's data changes only when another key
        # takes it, and a load-back of a slot is compared with the record when it happens.
        fresh = {key: slot for key, slot in entries.items() if key in self.record and self.verified.get(key) != slot}
        host = pool_tensors(_host_view(self.tiered), "tiered.host", where) if fresh else None
        for key, slot in fresh.items():
            self.verified[key] = slot
            if not strict_equal(host[:, slot], self.record[key]):
                fail(
                    where,
                    f"host slot {slot} (the entry of tokens 0..{self.ends[key] - 1}) holding those tokens' keys "
                    "and values",
                    "other keys and values",
                    HOST_DATA_HINT if not self.pins or slot not in self.pins else PIN_HINT,
                )

    def _expect_nothing_lost(
        self, tree: dict[int, tuple[int, ...]], entries: dict, inserted: list[int] | None, where: str
    ) -> None:
        on_gpu = {self.keys_of(path)[-1] for path in tree.values() if len(path) >= BLOCK}
        host_full = learner_int(self.tiered.host.num_free, "host.num_free", where) == 0
        if host_full:
            return
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
    """The host pools under the names a paged cache's pools have, for ``pool_tensors``."""

    k_pool: Any
    v_pool: Any


def _host_view(tiered: Any) -> _HostPools:
    return _HostPools(tiered.host_k_pool, tiered.host_v_pool)


def pool_tensors(owner: Any, name: str, where: str) -> torch.Tensor:
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
