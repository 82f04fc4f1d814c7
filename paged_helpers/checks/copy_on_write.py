"""Checks for notebook 04: forks share blocks, and copy-on-write keeps their histories apart.

check_copy_on_write(PagedKVCache, seed=0)
    Drives ``create``, ``fork``, ``reserve`` and ``free`` of the learner's cache (2 layers, blocks
    of 4) through a ``_Scene``: the learner's cache, the check's own record of every token each
    sequence holds, and the scenario's name, with one method per step (fork, write, a refused
    write, free), each followed by its expectations. It writes each token's keys and values
    straight into the pools (standing in for the forward pass); every value encodes who wrote it,
    where, and in which layer. ``SCENARIOS`` is the table of small scenario functions the check
    runs, seeded, in the orders where sharing bugs show: a fork written by both sides, a fork of a
    fork with children writing in turn, the parent freed first, a prompt filling whole blocks, a
    child whose first write runs from the shared partial block into a new one, a pool too small
    for a copy plus a new block, a fork made after the parent reserved room it has not written yet
    (the child's write then lands in two shared blocks, not only the one holding its length).

check_fork_logits(PagedKVCache, seed=0)
    The milestone: the tiny Qwen3 prefills a prompt on the learner's cache, the sequence is
    forked (and the child forked again), and the sequences continue with different tokens, in
    one batch and one after the other (``FORK_STORY``). Every step's logits must equal a
    from-scratch run of that sequence's tokens (``scratch.expect_from_scratch``: one tolerance
    policy, by device and dtype). Runs on ``paged_helpers.DEVICE`` and prints which device it used.

Invariants, after every step. Who owns a reference: each entry of a block table owns one
reference to its block, and nothing else does. ``fork`` gives the child a new list naming the
parent's blocks and takes one more reference on each (it allocates nothing). Before a sequence
writes into a block another table also names, ``reserve`` gives it a fresh copy (keys and values,
every layer) and releases its reference on the shared block once; a block only one table names is
written in place. ``free`` releases each entry of the table once. So each block's count is the
number of table entries naming it, and the free list is exactly the blocks no table names, each
once (``Ledger.expect_pool``, through the pool's one invariant, ``paged_helpers.pool_invariant``). A
``reserve`` that cannot get every copy and new block raises MemoryError and changes nothing
(``report.expect_refused``). Every live sequence reads back exactly the keys and values it wrote.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import torch

from ..checkpoint import tiny_qwen3
from ..device import DEVICE
from ..workloads import fork_prompt
from .reading.cache_reads import CacheReads, new_paged_cache, read_cache_ahead
from .reading.calls import call_learner
from .reading.learner_code import assign
from .reading.ledger import Ledger, ceil_div, expect_all_free
from .reading.model_run import ModelRun
from .reading.snapshot import expect_refused
from .reading.strict import learner_tensor, torch_unhooked
from .registry import check
from .speaking.failure import Hint, fail
from .story import Story

__all__ = ["check_copy_on_write", "check_fork_logits"]

LAYERS, BLOCK, KV_HEADS, HEAD_DIM = 2, 4, 2, 2
# Lengths whose last block is partly filled: the block a fork shares and a writer must copy.
PARTIAL_PROMPTS = (5, 6, 7, 9, 10, 11)

# Two-tier hints (report.Hint): the idea first, the concrete change when the same failure repeats.
COPY_HINT = Hint(
    "before a sequence writes into a block that another table also points at (refcount above 1), it "
    "needs a block of its own holding a copy of that one (copy-on-write)",
    "in reserve, for a shared last block: allocate a fresh block, copy the shared block into it, point "
    "the table there and release the shared block once",
)
BOTH_POOLS_HINT = Hint(
    "the copy must hold everything the shared block holds: keys and values, in every layer",
    "for each layer: k_pool[layer][fresh].copy_(k_pool[layer][shared]) and the same for v_pool",
)
CROSSING_HINT = Hint(
    "a write that starts in a shared partial block and runs on into new blocks still writes into the shared "
    "one: look for shared blocks among every block the write touches, in the table as it was before any new "
    "block was appended (the table's last block is then a fresh one, never shared)",
    "in reserve, before appending: for i in range(lengths[seq] // block_size, len(table)), copy table[i] if "
    "its refcount is above 1; then append the missing blocks",
)
RESERVED_ROOM_HINT = Hint(
    "room reserved before a fork is shared like the rest of the table, so a write can land in several shared "
    "blocks: each one among positions [length, length + new_tokens) needs a copy (blocks_to_copy lists them all)",
    "in blocks_to_copy: for i in range(lengths[seq] // block_size, min(len(table), "
    "blocks_needed(lengths[seq] + new_tokens))), list i if allocator.refs[table[i]] > 1",
)
ALL_OR_NOTHING_HINT = Hint(
    "a reserve that cannot be completed must change nothing, so it has to know what it needs before it "
    "takes anything",
    "count the copies and the new blocks first, compare with allocator.num_free, and raise MemoryError "
    "before allocating or copying anything",
)


def _after(cause: str, hint: Hint) -> Hint:
    """``hint`` with this failure's cause in front of its concept."""
    return Hint(f"{cause}: {hint.concept}", hint.change)


def _key(base: int, layer: int) -> float:
    """The key every head and dimension holds for the token ``base``, in ``layer`` (exact in float32)."""
    return base + 0.25 * layer


def _value(base: int, layer: int) -> float:
    return -(base + 0.25 * layer)


class _Scene:
    """One scenario: the learner's cache, plus the check's own record of what each sequence holds.

    ``history[seq][p]`` is the token id (``base``) that ``seq`` has at position p; the ledger
    (``ledger.writers``) maps a base back to the sequence that wrote it and where, for messages, and
    holds the pool against the learner's own tables. ``writer_ids[seq]`` numbers the writers.
    """

    def __init__(self, PagedKVCache: Any, num_blocks: int, scenario: str) -> None:
        self.scenario = scenario
        self.num_blocks = num_blocks
        self.cache = new_paged_cache(PagedKVCache, (LAYERS, num_blocks, BLOCK, KV_HEADS, HEAD_DIM), scenario=scenario)
        self.reads = CacheReads(self.cache)
        self.history: dict[str, list[int]] = {}
        self.ledger = Ledger(num_blocks)
        self.writer_ids: dict[str, int] = {}

    # -- what the cache says ------------------------------------------------------------------

    @property
    def allocator(self) -> Any:
        return self.cache.allocator

    def holders(self, block: int, besides: str | None = None) -> list[str]:
        """The sequences whose table names ``block`` (other than ``besides``)."""
        return [seq for seq in self.ledger.holders(self._tables())[block] if seq != besides]

    # Plain copies of the learner's bookkeeping (reading.cache_reads): never compared as the learner's objects.
    def _tables(self) -> dict:
        return self.reads.tables(self.scenario)

    def _length(self, seq: str) -> int:
        return self.reads.length(seq, self.scenario)

    def _refs(self) -> list[int]:
        return self.reads.refs(self.scenario)

    def _num_free(self) -> int:
        return self.reads.num_free(self.scenario)

    # -- operations ---------------------------------------------------------------------------

    def create(self, seq: str) -> None:
        call_learner(f"create({seq!r})", self.cache.create, seq, scenario=self.scenario)
        self.history[seq] = []

    def start(self, seq: str, prompt: int) -> None:
        """create(seq), then write its ``prompt`` tokens."""
        self.create(seq)
        self.write(seq, prompt)

    def fork(self, parent: str, child: str) -> None:
        where = f"{self.scenario}, fork({parent!r}, {child!r})"
        free_before = self._num_free()
        call_learner(f"fork({parent!r}, {child!r})", self.cache.fork, parent, child, scenario=self.scenario)
        read_cache_ahead(self.cache)
        tables = self.cache.tables
        if child not in tables or child not in self.cache.lengths:
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
        tables = self._tables()
        if tables[child] != tables[parent]:
            fail(
                where,
                f"the child's table names the parent's blocks {tables[parent]}",
                f"{tables[child]}",
                "a fork shares data: the child's table lists exactly the parent's blocks, in order",
            )
        if self._length(child) != self._length(parent):
            fail(
                where,
                f"lengths[{child!r}] == {self.cache.lengths[parent]} (the parent's)",
                f"{self.cache.lengths[child]}",
                "the child starts with every token the parent has",
            )
        if self._num_free() != free_before:
            fail(
                where,
                f"{free_before} free blocks (a fork allocates nothing)",
                f"{self.allocator.num_free} free",
                "a fork copies the table, not the blocks",
            )
        self.history[child] = list(self.history[parent])
        self.expect_refcounts(
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
        cache, what = self.cache, f"reserve({seq!r}, {count})"
        where = f"{self.scenario}, {what}"
        length, before = self._length(seq), self._tables()[seq]
        refs_before = self._refs()
        written = range(length // BLOCK, ceil_div(length + count, BLOCK))  # table indices written
        shared = [i for i in written if i < len(before) and self.holders(before[i], besides=seq)]
        wanted_new = max(0, ceil_div(length + count, BLOCK) - len(before))
        free_before = self._num_free()

        call_learner(what, cache.reserve, seq, count, scenario=self.scenario)
        table = self._tables()[seq]
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
            if index not in shared:
                fail(
                    where,
                    f"{seq!r} writes into its own block {before[index]} in place",
                    f"reserve moved it to block {table[index]}",
                    f"block {before[index]} had refcount {refs_before[before[index]]} and no other table: "
                    f"{seq!r} is its only owner, so it needs no copy",
                )
        for index in written:
            block = table[index]
            others = self.holders(block, besides=seq)
            if others:
                crossed = index < len(before) < written.stop  # the write ran on into appended blocks
                if index > written.start:  # past the block holding position `length`: reserved earlier
                    hint = _after(
                        f"the write runs on from table index {written.start} into index {index}, room reserved "
                        f"before the fork and not yet written: reserve copied only the block holding position {length}",
                        RESERVED_ROOM_HINT,
                    )
                elif crossed:
                    hint = _after(
                        f"the write starts in shared block {block} and runs on into {written.stop - len(before)} "
                        "new block(s)",
                        CROSSING_HINT,
                    )
                else:
                    hint = COPY_HINT
                fail(
                    where,
                    f"position(s) {length}..{length + count - 1} of {seq!r} in blocks only {seq!r} uses",
                    f"block {block} (table index {index}) is still shared with {others}, refcount "
                    f"{self._refs()[block]}",
                    hint,
                )
        used = free_before - self._num_free()
        if used != len(shared) + wanted_new:
            fail(
                where,
                f"{len(shared)} copied block(s) + {wanted_new} new block(s) taken from the pool",
                f"{used} block(s) taken",
                "copy exactly the shared blocks about to be written, and append "
                "exactly the blocks that are missing",
            )
        copied = {before[i]: table[i] for i in shared}
        self.expect_histories(after=what, copied=copied)
        self.expect_refcounts(
            what,
            too_high="after copying a shared block, release it once: this sequence no longer points at it",
            too_low="each copy is a fresh block with count 1, and the shared block loses only this "
            "sequence's reference",
        )

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
        del self.history[seq]
        self.expect_refcounts(
            f"free({seq!r})",
            too_high="free releases each block of the table once",
            too_low="free releases each block of the table once",
        )
        self.expect_histories(after=f"free({seq!r})")

    def finish(self) -> None:
        for seq in list(self.history):
            self.free(seq)
        expect_all_free(
            self.allocator,
            self.num_blocks,
            f"{self.scenario}, after every sequence was freed",
            "a block copied away from must be released once, or it leaks for the life of the server",
        )

    def _store(self, seq: str, count: int) -> None:
        """The stand-in forward pass: write keys and values of ``count`` new tokens of ``seq``."""
        self.writer_ids.setdefault(seq, len(self.writer_ids) + 1)
        table, length = self._tables()[seq], self._length(seq)
        for position in range(length, length + count):
            base = 1000 * self.writer_ids[seq] + position
            block, offset = table[position // BLOCK], position % BLOCK
            for layer in range(LAYERS):
                assign(self.cache, ("k_pool", layer, (block, slice(None), offset)), _key(base, layer))
                assign(self.cache, ("v_pool", layer, (block, slice(None), offset)), _value(base, layer))
            self.history[seq].append(base)
            self.ledger.stored(base, seq, position)
        self.cache.lengths[seq] = length + count
        self.expect_histories(after=f"{seq!r} wrote {count} token(s)")

    # -- what must hold after every step ------------------------------------------------------

    def expect_refcounts(self, after: str, too_high: str, too_low: str) -> None:
        """Each block's count is the number of table entries naming it; the free list is the rest."""
        self.ledger.expect_pool(
            self.allocator,
            f"{self.scenario}, after {after}",
            lambda block, holders, count: too_high if count > len(holders) else too_low,
            tables=self._tables(),
        )

    def expect_histories(self, after: str, copied: dict[int, int] | None = None) -> None:
        copied = copied or {}
        # Each read made once, when first needed (in the order the comparisons need them): nothing of
        # the learner's runs in between, so a second read would answer the same (and, across the
        # wire, cost a round trip and the pool's bytes each time).
        tables = functools.cache(self._tables)
        pools = functools.cache(lambda: {"k_pool": self.cache.k_pool, "v_pool": self.cache.v_pool})
        layer_pools: dict[tuple[str, int], torch.Tensor] = {}
        for seq, bases in self.history.items():
            table = tables()[seq]
            for position, base in enumerate(bases):
                block, offset = table[position // BLOCK], position % BLOCK
                for layer in range(LAYERS):
                    for pool_name, attribute, want in (
                        ("keys", "k_pool", _key(base, layer)),
                        ("values", "v_pool", _value(base, layer)),
                    ):
                        if (attribute, layer) not in layer_pools:
                            layer_pools[attribute, layer] = learner_tensor(
                                pools()[attribute][layer], f"cache.{pool_name[0]}_pool[{layer}]", self.scenario
                            )
                        layer_pool = layer_pools[attribute, layer]
                        with torch_unhooked():
                            found = layer_pool[block, :, offset]
                            same = bool((found == want).all())
                        if same:
                            continue
                        self._report_history(after, seq, position, layer, pool_name, block, found, copied)

    def _report_history(self, after, seq, position, layer, pool_name, block, found, copied) -> None:
        got_value = float(found.flatten()[0])
        base = round(abs(got_value) - 0.25 * layer)
        if base in self.ledger.writers:
            writer, at = self.ledger.writers[base]
            got = f"the {pool_name} {writer!r} wrote at position {at}"
        else:
            got = f"{got_value:g}, a value nobody wrote there"
        source = [old for old, new in copied.items() if new == block]
        if source:
            hint = _after(
                f"block {block} is the copy of block {source[0]} made by this reserve, and its {pool_name} "
                f"in layer {layer} were not copied",
                BOTH_POOLS_HINT,
            )
        elif base in self.ledger.writers and self.ledger.writers[base][0] != seq:
            hint = _after(f"another sequence's write landed in a block {seq!r} reads", COPY_HINT)
        else:
            hint = "a sequence's history must not change when another sequence forks, writes or is freed"
        fail(
            f"{self.scenario}, after {after}",
            f"{seq}'s {pool_name} at position {position}, layer {layer} (block {block}, offset "
            f"{position % BLOCK}) unchanged",
            got,
            hint,
        )


# -- the scenarios: each a small story on a fresh cache ----------------------------------------------


def _forked_once(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = _Scene(PagedKVCache, 16, f"a {prompt}-token parent forked once")
    scene.start("parent", prompt)
    scene.fork("parent", "child")
    scene.write("child", 1)  # copies the shared partial block
    scene.write("parent", 1)  # now the only owner: in place
    scene.write("child", BLOCK)  # crosses into a new block
    scene.finish()


def _fork_of_a_fork(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = _Scene(PagedKVCache, 16, f"a {prompt}-token parent, a fork of a fork, children writing in turn")
    scene.start("parent", prompt)
    scene.fork("parent", "a")
    scene.fork("a", "b")
    scene.fork("parent", "c")
    order = ["a", "b", "c"]
    rng.shuffle(order)
    for child in order:  # the last child still copies: the parent holds the block
        scene.write(child, 1)
    scene.write("parent", 1)
    scene.finish()


def _parent_freed_first(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = _Scene(PagedKVCache, 16, f"a {prompt}-token parent freed before its two children")
    scene.start("parent", prompt)
    scene.fork("parent", "x")
    scene.fork("parent", "y")
    scene.free("parent")
    scene.write("x", 1)
    scene.write("y", 1)
    scene.finish()


def _whole_blocks_forked(PagedKVCache: Any, rng: random.Random) -> None:
    full = BLOCK * rng.choice((2, 3))
    scene = _Scene(PagedKVCache, 16, f"a {full}-token parent (whole blocks) forked once")
    scene.start("parent", full)
    scene.fork("parent", "child")
    scene.write("child", 1)  # nothing to copy: a fresh block
    scene.write("parent", 1)
    scene.finish()


def _first_write_runs_into_a_new_block(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = _Scene(PagedKVCache, 16, f"a {prompt}-token parent forked, the child's first write crossing a block")
    scene.start("parent", prompt)
    scene.fork("parent", "child")
    scene.write("child", BLOCK - prompt % BLOCK + 1)  # fills a copy of the shared block, then one token more
    scene.write("parent", 1)  # now the only owner: in place
    scene.finish()


def _no_room_for_copy_and_block(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    scene = _Scene(
        PagedKVCache, ceil_div(prompt, BLOCK) + 1, f"a {prompt}-token parent forked in a pool with 1 spare block"
    )
    scene.start("parent", prompt)
    scene.fork("parent", "child")
    to_fill = BLOCK - prompt % BLOCK
    scene.refused_write("child", to_fill + 1, free_blocks=1, needed=2)
    scene.write("child", to_fill)  # the copy alone fits
    scene.finish()


def _forked_after_room_was_reserved(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)
    room = BLOCK - prompt % BLOCK + 1 + rng.randrange(BLOCK - 1)  # the partial block and part of one more
    scene = _Scene(
        PagedKVCache, 16, f"a {prompt}-token parent that reserved room for {room} tokens, forked before writing them"
    )
    scene.start("parent", prompt)
    scene.reserve("parent", room)  # the engine's reserve, then (here) a fork before the forward pass
    scene.fork("parent", "child")
    scene.write("child", room)  # both blocks of the room are shared: two copies
    scene.write("parent", room)  # now the only owner of both: in place
    scene.finish()


# The scenarios check_copy_on_write runs, in order (a bug fails in the first one that shows it).
SCENARIOS = (
    _forked_once,
    _fork_of_a_fork,
    _parent_freed_first,
    _whole_blocks_forked,
    _first_write_runs_into_a_new_block,
    _no_room_for_copy_and_block,
    _forked_after_room_was_reserved,
)


@check(notebook="04_fork_and_copy_on_write", builds="PagedKVCache")
def check_copy_on_write(PagedKVCache: Any, seed: int = 0) -> str | None:
    """Fork, copy-on-write and freeing, with exact reference counts and every key and value read back."""
    return Story(visible=SCENARIOS).tell(PagedKVCache, seed=seed)


# -- the milestone ---------------------------------------------------------------------------------

FORK_BLOCK = 4


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return "cpu (no GPU found)"


def _diagnose(cache: Any, parent: str, child: str, fork_length: int) -> str | Hint:
    """Name the likely bug from the state of the cache after the logits went wrong."""
    tables = cache.tables
    if parent in tables and child in tables and tables[parent] is tables[child]:
        return (
            "the child's table is the parent's list object: fork must give the child a new list, or "
            "the child's copy-on-write rewrites the parent's table too"
        )
    index, prompt_slots = fork_length // FORK_BLOCK, fork_length % FORK_BLOCK
    if prompt_slots and parent in tables and child in tables:
        parent_block, child_block = tables[parent][index], tables[child][index]
        if parent_block == child_block:
            refs = cache.allocator.refs[parent_block]
            wrote = f"both sequences wrote their token {fork_length} into block {parent_block}"
            if refs == 1:
                return (
                    f"{wrote}, whose refcount is 1 although two tables point at it: fork must share() every "
                    "block of the child's table, so that reserve sees the block is shared and copies it"
                )
            return _after(f"{wrote} (refcount {refs})", COPY_HINT)
        for layer in range(len(cache.k_pool)):
            for name, pool in (("keys", cache.k_pool), ("values", cache.v_pool)):
                with torch._C.DisableTorchFunction():  # a learner's tensor subclass cannot answer
                    same = torch.equal(
                        pool[layer][parent_block, :, :prompt_slots], pool[layer][child_block, :, :prompt_slots]
                    )
                if not same:
                    return _after(
                        f"the child's copy (block {child_block}) of the shared block {parent_block} lacks "
                        f"the prompt's {name} in layer {layer}",
                        BOTH_POOLS_HINT,
                    )
    return "a sequence's history changed after the fork; check_copy_on_write names the step where it happens"


class _ForkRun(ModelRun):
    """The learner's cache under the tiny Qwen3 (``reading.model_run``), with the fork under test.

    ``forked`` is (parent, child, tokens at the fork) of the latest fork: a wrong logit is diagnosed
    from the state of those two tables.
    """

    def __init__(self, PagedKVCache: Any, seed: int, device: torch.device) -> None:  # noqa: N803
        model, num_blocks = tiny_qwen3(seed, device=device), 24
        config = model.config
        sizes = (config.num_hidden_layers, num_blocks, FORK_BLOCK, config.num_key_value_heads, config.head_dim)
        super().__init__(model, new_paged_cache(PagedKVCache, sizes, scenario="", device=device), num_blocks)
        self.seed = seed
        self.forked = ("parent", "child", 0)
        self.prompt_length = 0

    def fork(self, parent: str, child: str, scenario: str) -> None:
        super().fork(parent, child, scenario)
        self.forked = (parent, child, len(self.tokens[child]))

    def step(self, new_tokens: dict[str, list[int]], scenario: str) -> None:  # type: ignore[override]
        """One engine step of ``new_tokens``: every row must equal a from-scratch run of its sequence."""
        super().step(new_tokens, scenario, hint=lambda: _diagnose(self.cache, *self.forked))

    def finish(self) -> None:
        self.free_all(
            "the logits were right but blocks leaked: after copy-on-write, release the shared block once "
            "(the sequence no longer points at it)"
        )


def _prefill(run: _ForkRun, rng: random.Random) -> None:
    run.prompt_length = rng.choice((9, 10, 11, 13, 14))
    scenario = f"prefill of a {run.prompt_length}-token prompt, blocks of {FORK_BLOCK}"
    run.create("parent", scenario)
    run.step({"parent": fork_prompt(run.prompt_length, run.vocab, run.seed)}, scenario)


def _fork(run: _ForkRun, rng: random.Random) -> None:
    run.fork("parent", "child", "the fork")


def _diverging_continuations(run: _ForkRun, rng: random.Random) -> None:
    # Two different continuations: the parent's most likely token and the child's second choice.
    best = run.last["parent"].topk(2).indices.tolist()
    steps = [
        ("one batch [parent, child]", [{"parent": [best[0]], "child": [best[1]]}]),
        (
            "the child alone, then the parent alone",
            [{"child": [rng.randrange(run.vocab)]}, {"parent": [rng.randrange(run.vocab)]}],
        ),
        (
            "the parent alone, then the child alone",
            [{"parent": [rng.randrange(run.vocab)]}, {"child": [rng.randrange(run.vocab)]}],
        ),
        (
            "one batch [child, parent], 3 tokens each",
            [
                {
                    "child": [rng.randrange(run.vocab) for _ in range(3)],
                    "parent": [rng.randrange(run.vocab) for _ in range(3)],
                }
            ],
        ),
    ]
    for label, batches in steps:
        for batch in batches:
            run.step(batch, f"after forking a {run.prompt_length}-token prompt, {label}")


def _fork_of_the_fork(run: _ForkRun, rng: random.Random) -> None:
    fork_length = len(run.tokens["child"])
    scenario = f"a fork of the fork (child -> grandchild at {fork_length} tokens), then one batch of all three"
    run.fork("child", "grandchild", scenario)
    run.step({seq: [rng.randrange(run.vocab)] for seq in ("grandchild", "child", "parent")}, scenario)


def _free_every_sequence(run: _ForkRun, rng: random.Random) -> None:
    run.finish()


# The milestone's story, in order: each step starts where the one before left off.
FORK_STORY = (_prefill, _fork, _diverging_continuations, _fork_of_the_fork, _free_every_sequence)


@check(notebook="04_fork_and_copy_on_write", builds="PagedKVCache")
def check_fork_logits(PagedKVCache: Any, seed: int = 0) -> None:
    """After a fork, diverging sequences each give exactly their from-scratch logits (on DEVICE)."""
    device = DEVICE
    print(f"check_fork_logits: running on {_device_name(device)}")
    rng = random.Random(seed)
    run = _ForkRun(PagedKVCache, seed, device)
    for step in FORK_STORY:
        step(run, rng)
