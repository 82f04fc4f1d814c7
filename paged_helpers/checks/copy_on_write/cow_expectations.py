"""What must hold after each step of a copy-on-write scene, checked against the check's account.

Invariants, after every step. Who owns a reference: each entry of a block table owns one
reference to its block, and nothing else does. ``fork`` gives the child a new list naming the
parent's blocks and takes one more reference on each (it allocates nothing). Before a sequence
writes into a block another table also names, ``reserve`` gives it a fresh copy (keys and values,
every layer) and releases its reference on the shared block once; a block only one table names is
written in place. ``free`` releases each entry of the table once. So each block's count is the
number of table entries naming it, and the free list is exactly the blocks no table names, each
once (``Ledger.expect_pool``, through the pool's one invariant, ``paged_helpers.pool_invariant``).
Every live sequence reads back exactly the keys and values it wrote.

Each function reads the learner's cache through the scene (``cow_scene.Scene``) and fails with a
message naming the step; none calls the learner's methods.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..reading.cache_reads import read_cache_ahead
from ..reading.ledger import ceil_div
from ..reading.strict import learner_tensor, torch_unhooked
from ..speaking.failure import fail
from .cow_account import BLOCK, LAYERS, Account, key_of, value_of
from .diagnosis import history_change, still_shared_hint


class Scene(Protocol):
    """What the expectations read of a scene (``cow_scene.Scene``): its name, the learner's cache, the
    check's account, and plain copies of the cache's bookkeeping."""

    scenario: str
    cache: Any
    account: Account

    @property
    def allocator(self) -> Any: ...

    def tables(self) -> dict: ...

    def length(self, seq: str) -> int: ...

    def refs(self) -> list[int]: ...

    def num_free(self) -> int: ...

    def holders(self, block: int, besides: str | None = None) -> list[str]: ...


def expect_forked(scene: Scene, parent: str, child: str, *, free_before: int) -> None:
    """After ``fork(parent, child)``: a new table naming the parent's blocks, the same length, no block taken."""
    where = f"{scene.scenario}, fork({parent!r}, {child!r})"
    read_cache_ahead(scene.cache)
    tables = scene.cache.tables
    if child not in tables or child not in scene.cache.lengths:
        fail(
            where,
            f"tables[{child!r}] and lengths[{child!r}] exist",
            "no entry for the child",
            "fork creates the child (create(child)) before filling in its table and length",
        )
    if tables[child] is tables[parent]:
        fail(
            where,
            "the child's table is a new list naming the same blocks",
            "tables[child] is the parent's own list object",
            "copy the list (list(tables[parent])): when the child later copies a block, replacing "
            "an entry of a shared list object would rewrite the parent's table too",
        )
    tables = scene.tables()
    if tables[child] != tables[parent]:
        fail(
            where,
            f"the child's table names the parent's blocks {tables[parent]}",
            f"{tables[child]}",
            "a fork shares data: the child's table lists exactly the parent's blocks, in order",
        )
    if scene.length(child) != scene.length(parent):
        fail(
            where,
            f"lengths[{child!r}] == {scene.cache.lengths[parent]} (the parent's)",
            f"{scene.cache.lengths[child]}",
            "the child starts with every token the parent has",
        )
    if scene.num_free() != free_before:
        fail(
            where,
            f"{free_before} free blocks (a fork allocates nothing)",
            f"{scene.allocator.num_free} free",
            "a fork copies the table, not the blocks",
        )


@dataclass(frozen=True)
class ReservePlan:
    """What ``reserve(seq, count)`` must do, worked out from the cache before the call.

    ``written`` are the table indices the write touches; ``shared`` those among them that another
    table also names (each needs a copy); ``wanted_new`` the blocks to append.
    """

    seq: str
    count: int
    length: int
    before: list[int]
    refs_before: list[int]
    written: range
    shared: list[int]
    wanted_new: int
    free_before: int

    @property
    def what(self) -> str:
        return f"reserve({self.seq!r}, {self.count})"


def plan_reserve(scene: Scene, seq: str, count: int) -> ReservePlan:
    """Read the cache before ``reserve(seq, count)`` (in this order: every read is a request when grading)."""
    length, before = scene.length(seq), scene.tables()[seq]
    refs_before = scene.refs()
    written = range(length // BLOCK, ceil_div(length + count, BLOCK))  # table indices written
    shared = [i for i in written if i < len(before) and scene.holders(before[i], besides=seq)]
    wanted_new = max(0, ceil_div(length + count, BLOCK) - len(before))
    free_before = scene.num_free()
    return ReservePlan(seq, count, length, before, refs_before, written, shared, wanted_new, free_before)


def expect_reserved(scene: Scene, plan: ReservePlan) -> None:
    """After the reserve: room for the write, copies of exactly the shared blocks, every history intact."""
    where = f"{scene.scenario}, {plan.what}"
    table = scene.tables()[plan.seq]
    _expect_moved_only_shared(where, plan, table)
    _expect_nothing_shared(scene, where, plan, table)
    used = plan.free_before - scene.num_free()
    if used != len(plan.shared) + plan.wanted_new:
        fail(
            where,
            f"{len(plan.shared)} copied block(s) + {plan.wanted_new} new block(s) taken from the pool",
            f"{used} block(s) taken",
            "copy exactly the shared blocks about to be written, and append exactly the blocks that are missing",
        )
    copied = {plan.before[i]: table[i] for i in plan.shared}
    expect_histories(scene, after=plan.what, copied=copied)
    expect_refcounts(
        scene,
        plan.what,
        too_high="after copying a shared block, release it once: this sequence no longer points at it",
        too_low="each copy is a fresh block with count 1, and the shared block loses only this sequence's reference",
    )


def _expect_moved_only_shared(where: str, plan: ReservePlan, table: list[int]) -> None:
    """The table reaches past the write, and only shared blocks about to be written were replaced."""
    seq, before, written = plan.seq, plan.before, plan.written
    if len(table) < written.stop:
        fail(
            where,
            f"at least {written.stop} blocks in {seq}'s table",
            f"{len(table)}: {table}",
            "reserve makes blocks exist for positions [length, length + new_tokens)",
        )
    for index in range(len(before)):
        if table[index] == before[index]:
            continue
        if index not in written:
            fail(
                where,
                f"{seq}'s block {index} (block {before[index]}) left alone",
                f"it was replaced by block {table[index]}",
                "only the blocks about to be written may change: full blocks of a shared prompt are "
                "never written again, so they stay shared",
            )
        if index not in plan.shared:
            fail(
                where,
                f"{seq!r} writes into its own block {before[index]} in place",
                f"reserve moved it to block {table[index]}",
                f"block {before[index]} had refcount {plan.refs_before[before[index]]} and no other table: "
                f"{seq!r} is its only owner, so it needs no copy",
            )


def _expect_nothing_shared(scene: Scene, where: str, plan: ReservePlan, table: list[int]) -> None:
    """Every block the write lands in is named by this sequence's table alone."""
    seq, length, count = plan.seq, plan.length, plan.count
    for index in plan.written:
        block = table[index]
        others = scene.holders(block, besides=seq)
        if others:
            fail(
                where,
                f"position(s) {length}..{length + count - 1} of {seq!r} in blocks only {seq!r} uses",
                f"block {block} (table index {index}) is still shared with {others}, refcount {scene.refs()[block]}",
                still_shared_hint(
                    index=index, written=plan.written, table_before=len(plan.before), block=block, length=length
                ),
            )


def expect_refcounts(scene: Scene, after: str, too_high: str, too_low: str) -> None:
    """Each block's count is the number of table entries naming it; the free list is the rest."""
    scene.account.ledger.expect_pool(
        scene.allocator,
        f"{scene.scenario}, after {after}",
        lambda block, holders, count: too_high if count > len(holders) else too_low,
        tables=scene.tables(),
    )


def expect_histories(scene: Scene, after: str, copied: dict[int, int] | None = None) -> None:
    """Every live sequence reads back, in every layer, exactly the keys and values the account says it holds.

    ``copied`` maps each block this step copied from to its copy (for the message).
    """
    copied = copied or {}
    # Each read made once, when first needed (in the order the comparisons need them): nothing of
    # the learner's runs in between, so a second read would answer the same (and, across the
    # wire, cost a round trip and the pool's bytes each time).
    tables = functools.cache(scene.tables)
    pools = functools.cache(lambda: {"k_pool": scene.cache.k_pool, "v_pool": scene.cache.v_pool})
    layer_pools: dict[tuple[str, int], torch.Tensor] = {}

    def layer_pool(attribute: str, pool_name: str, layer: int) -> torch.Tensor:
        if (attribute, layer) not in layer_pools:
            layer_pools[attribute, layer] = learner_tensor(
                pools()[attribute][layer], f"cache.{pool_name[0]}_pool[{layer}]", scene.scenario
            )
        return layer_pools[attribute, layer]

    for seq, bases in scene.account.history.items():
        table = tables()[seq]
        for position, base in enumerate(bases):
            block, offset = table[position // BLOCK], position % BLOCK
            for layer in range(LAYERS):
                for pool_name, attribute, want in (
                    ("keys", "k_pool", key_of(base, layer)),
                    ("values", "v_pool", value_of(base, layer)),
                ):
                    pool = layer_pool(attribute, pool_name, layer)
                    with torch_unhooked():
                        found = pool[block, :, offset]
                        same = bool((found == want).all())
                    if not same:
                        _history_changed(scene, after, seq, position, layer, pool_name, block, found, copied)


def _history_changed(scene, after, seq, position, layer, pool_name, block, found, copied) -> None:
    got, hint = history_change(
        writers=scene.account.ledger.writers,
        seq=seq,
        layer=layer,
        pool_name=pool_name,
        block=block,
        got_value=float(found.flatten()[0]),
        copied=copied,
    )
    fail(
        f"{scene.scenario}, after {after}",
        f"{seq}'s {pool_name} at position {position}, layer {layer} (block {block}, offset "
        f"{position % BLOCK}) unchanged",
        got,
        hint,
    )
