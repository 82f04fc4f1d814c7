"""Checks for notebook 04: forks share blocks, and copy-on-write keeps their histories apart.

check_copy_on_write(PagedKVCache, seed=0)
    Drives ``create``, ``fork``, ``reserve`` and ``free`` of the learner's cache (2 layers, blocks
    of 4) in the orders where sharing bugs show: a fork of a fork, children writing in turn, the
    parent freed first, a prompt filling whole blocks, a pool too small for a copy plus a new
    block. It writes each token's keys and values straight into the pools (standing in for the
    forward pass); every value encodes who wrote it, where, and in which layer. After each step
    it compares every block's reference count with the number of tables that hold it, and reads
    every live sequence's keys and values back through its table.

check_fork_logits(PagedKVCache, seed=0)
    The milestone: the tiny Qwen3 prefills a prompt on the learner's cache, the sequence is
    forked (and the child forked again), and the sequences continue with different tokens, in
    one batch and one after the other. Every step's logits must equal a from-scratch run of
    that sequence's tokens. Runs on ``paged_helpers.DEVICE`` and prints which device it used.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from ..device import DEVICE
from ..model import tiny_qwen3
from ..pool_invariant import PoolReading
from ..workloads import fork_prompt
from .report import (
    CacheSnapshot,
    Hint,
    call_learner,
    ceil_div,
    check,
    expect_raise,
    fail,
    learner_dict,
    learner_int,
    learner_int_list,
    learner_tensor,
    torch_unhooked,
)
from .scratch import logit_gap, logits_match

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

    ``history[seq][p]`` is the token id (``base``) that ``seq`` has at position p; ``author``
    maps a base back to the sequence that wrote it, for messages.
    """

    def __init__(self, PagedKVCache: Any, num_blocks: int, scenario: str) -> None:
        self.scenario = scenario
        self.num_blocks = num_blocks
        self.cache = call_learner(
            f"PagedKVCache(layers={LAYERS}, num_blocks={num_blocks}, block_size={BLOCK}, "
            f"kv_heads={KV_HEADS}, head_dim={HEAD_DIM})",
            PagedKVCache,
            LAYERS,
            num_blocks,
            BLOCK,
            KV_HEADS,
            HEAD_DIM,
            scenario=scenario,
        )
        self.history: dict[str, list[int]] = {}
        self.author: dict[int, tuple[str, int]] = {}
        self.writers: dict[str, int] = {}

    # -- what the cache says ------------------------------------------------------------------

    @property
    def allocator(self) -> Any:
        return self.cache.allocator

    def holders(self, block: int, besides: str | None = None) -> list[str]:
        return [seq for seq, table in self._tables().items() if block in table and seq != besides]

    # Plain copies of the learner's bookkeeping (report.learner_*): never compared as the learner's objects.
    def _tables(self) -> dict:
        return learner_dict(self.cache.tables, "cache.tables", self.scenario, learner_int_list)

    def _length(self, seq: str) -> int:
        return learner_int(self.cache.lengths[seq], f"lengths[{seq!r}]", self.scenario)

    def _refs(self) -> list[int]:
        return learner_int_list(self.allocator.refs, "allocator.refs", self.scenario)

    def _num_free(self) -> int:
        return learner_int(self.allocator.num_free, "allocator.num_free", self.scenario)

    # -- operations ---------------------------------------------------------------------------

    def create(self, seq: str) -> None:
        call_learner(f"create({seq!r})", self.cache.create, seq, scenario=self.scenario)
        self.history[seq] = []

    def fork(self, parent: str, child: str) -> None:
        where = f"{self.scenario}, fork({parent!r}, {child!r})"
        free_before = self._num_free()
        call_learner(f"fork({parent!r}, {child!r})", self.cache.fork, parent, child, scenario=self.scenario)
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
                fail(
                    where,
                    f"position(s) {length}..{length + count - 1} of {seq!r} in blocks only {seq!r} uses",
                    f"block {block} (table index {index}) is still shared with {others}, refcount "
                    f"{self._refs()[block]}",
                    COPY_HINT,
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
        self._store(seq, count)

    def refused_write(self, seq: str, count: int, free_blocks: int, needed: int) -> None:
        """reserve(seq, count) must raise MemoryError and leave everything as it was."""
        what = f"reserve({seq!r}, {count})"
        where = f"{self.scenario}, {what} with {free_blocks} free block(s) for {needed} needed"
        before = CacheSnapshot.of(self.cache)
        expect_raise(
            MemoryError,
            what,
            self.cache.reserve,
            seq,
            count,
            scenario=where,
            hint="a reserve that needs more blocks (copies included) than are free must raise MemoryError",
        )
        changed = before.changes(CacheSnapshot.of(self.cache))
        if changed:
            fail(
                where,
                "MemoryError, with the cache exactly as before",
                "MemoryError, but the cache changed first: " + "; ".join(changed),
                ALL_OR_NOTHING_HINT,
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
        if self._num_free() != self.num_blocks:
            stuck = [b for b, refs in enumerate(self._refs()) if refs]
            fail(
                f"{self.scenario}, after every sequence was freed",
                f"all {self.num_blocks} blocks free",
                f"{self.allocator.num_free} free; block(s) {stuck} still counted as used",
                "a block copied away from must be released once, or it leaks for the life of the server",
            )

    def _store(self, seq: str, count: int) -> None:
        """The stand-in forward pass: write keys and values of ``count`` new tokens of ``seq``."""
        self.writers.setdefault(seq, len(self.writers) + 1)
        table, length = self._tables()[seq], self._length(seq)
        for position in range(length, length + count):
            base = 1000 * self.writers[seq] + position
            block, offset = table[position // BLOCK], position % BLOCK
            for layer in range(LAYERS):
                self.cache.k_pool[layer][block, :, offset] = _key(base, layer)
                self.cache.v_pool[layer][block, :, offset] = _value(base, layer)
            self.history[seq].append(base)
            self.author[base] = (seq, position)
        self.cache.lengths[seq] = length + count
        self.expect_histories(after=f"{seq!r} wrote {count} token(s)")

    # -- what must hold after every step ------------------------------------------------------

    def expect_refcounts(self, after: str, too_high: str, too_low: str) -> None:
        all_refs = self._refs()
        for block in range(self.num_blocks):
            holders = self.holders(block)
            refs = all_refs[block]
            if refs != len(holders):
                hint = too_high if refs > len(holders) else too_low
                fail(
                    f"{self.scenario}, after {after}",
                    f"block {block}: refcount {len(holders)} (the tables holding it: {holders or 'none'})",
                    f"refcount {refs}",
                    hint,
                )
        # The counts match the tables here, so the pool's own invariant says what the free list must be.
        reading = PoolReading.of(self.allocator, self.scenario)
        unused = [block for block in range(self.num_blocks) if not self.holders(block)]
        if sorted(reading.free) != unused:
            fail(
                f"{self.scenario}, after {after}",
                f"the free list holds exactly the unused blocks {unused}",
                f"{sorted(reading.free)}",
                f"block(s) {reading.lost()} have count 0 but are not on the free list: the release that brings "
                "a count to 0 must put the block back on the free list"
                if reading.lost()
                else "a block returns to the free list when its last reference is released, not before",
            )

    def expect_histories(self, after: str, copied: dict[int, int] | None = None) -> None:
        copied = copied or {}
        for seq, bases in self.history.items():
            table = self._tables()[seq]
            for position, base in enumerate(bases):
                block, offset = table[position // BLOCK], position % BLOCK
                for layer in range(LAYERS):
                    for pool_name, pool, want in (
                        ("keys", self.cache.k_pool, _key(base, layer)),
                        ("values", self.cache.v_pool, _value(base, layer)),
                    ):
                        layer_pool = learner_tensor(pool[layer], f"cache.{pool_name[0]}_pool[{layer}]", self.scenario)
                        with torch_unhooked():
                            found = layer_pool[block, :, offset]
                            same = bool((found == want).all())
                        if same:
                            continue
                        self._report_history(after, seq, position, layer, pool_name, block, found, copied)

    def _report_history(self, after, seq, position, layer, pool_name, block, found, copied) -> None:
        got_value = float(found.flatten()[0])
        base = round(abs(got_value) - 0.25 * layer)
        if base in self.author:
            writer, at = self.author[base]
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
        elif base in self.author and self.author[base][0] != seq:
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


def _scenarios(PagedKVCache: Any, rng: random.Random) -> None:
    prompt = rng.choice(PARTIAL_PROMPTS)

    scene = _Scene(PagedKVCache, 16, f"a {prompt}-token parent forked once")
    scene.create("parent")
    scene.write("parent", prompt)
    scene.fork("parent", "child")
    scene.write("child", 1)  # copies the shared partial block
    scene.write("parent", 1)  # now the only owner: in place
    scene.write("child", BLOCK)  # crosses into a new block
    scene.finish()

    scene = _Scene(PagedKVCache, 16, f"a {prompt}-token parent, a fork of a fork, children writing in turn")
    scene.create("parent")
    scene.write("parent", prompt)
    scene.fork("parent", "a")
    scene.fork("a", "b")
    scene.fork("parent", "c")
    order = ["a", "b", "c"]
    rng.shuffle(order)
    for child in order:  # the last child still copies: the parent holds the block
        scene.write(child, 1)
    scene.write("parent", 1)
    scene.finish()

    scene = _Scene(PagedKVCache, 16, f"a {prompt}-token parent freed before its two children")
    scene.create("parent")
    scene.write("parent", prompt)
    scene.fork("parent", "x")
    scene.fork("parent", "y")
    scene.free("parent")
    scene.write("x", 1)
    scene.write("y", 1)
    scene.finish()

    full = BLOCK * rng.choice((2, 3))
    scene = _Scene(PagedKVCache, 16, f"a {full}-token parent (whole blocks) forked once")
    scene.create("parent")
    scene.write("parent", full)
    scene.fork("parent", "child")
    scene.write("child", 1)  # nothing to copy: a fresh block
    scene.write("parent", 1)
    scene.finish()

    prompt_blocks = ceil_div(prompt, BLOCK)
    scene = _Scene(
        PagedKVCache, prompt_blocks + 1, f"a {prompt}-token parent forked in a pool with 1 spare block"
    )
    scene.create("parent")
    scene.write("parent", prompt)
    scene.fork("parent", "child")
    to_fill = BLOCK - prompt % BLOCK
    scene.refused_write("child", to_fill + 1, free_blocks=1, needed=2)
    scene.write("child", to_fill)  # the copy alone fits
    scene.finish()


@check(notebook="04_fork_and_copy_on_write", builds="PagedKVCache")
def check_copy_on_write(PagedKVCache: Any, seed: int = 0) -> None:
    """Fork, copy-on-write and freeing, with exact reference counts and every key and value read back."""
    _scenarios(PagedKVCache, random.Random(seed))


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


class _ForkRun:
    """The learner's cache under the tiny Qwen3: sequences, their tokens, and one step at a time."""

    def __init__(self, PagedKVCache: Any, seed: int, device: torch.device) -> None:
        self.model = tiny_qwen3(seed, device=device)
        config = self.model.config
        self.num_blocks = 24
        self.cache = call_learner(
            f"PagedKVCache(layers={config.num_hidden_layers}, num_blocks={self.num_blocks}, "
            f"block_size={FORK_BLOCK}, kv_heads={config.num_key_value_heads}, head_dim={config.head_dim}, "
            f"device={str(device)!r})",
            PagedKVCache,
            config.num_hidden_layers,
            self.num_blocks,
            FORK_BLOCK,
            config.num_key_value_heads,
            config.head_dim,
            device=device,
        )
        self.device = device
        self.tokens: dict[str, list[int]] = {}

    def step(self, new_tokens: dict[str, list[int]], scenario: str) -> dict[str, torch.Tensor]:
        """One forward pass of ``new_tokens`` (same count per sequence) -> each sequence's last logits."""
        seqs = list(new_tokens)
        for seq in seqs:
            call_learner(
                f"reserve({seq!r}, {len(new_tokens[seq])})",
                self.cache.reserve,
                seq,
                len(new_tokens[seq]),
                scenario=scenario,
            )
        call_learner(f"set_batch({seqs})", self.cache.set_batch, seqs, scenario=scenario)
        steps = len(new_tokens[seqs[0]])
        starts = [len(self.tokens[seq]) for seq in seqs]
        positions = torch.tensor(
            [[start + t for t in range(steps)] for start in starts], device=self.device
        )  # [B, T]
        tokens = torch.tensor([new_tokens[seq] for seq in seqs], device=self.device)  # [B, T]
        with torch.no_grad():
            logits = call_learner(
                "the model's forward pass through your cache",
                self.model,
                tokens,
                positions,
                cache=self.cache,
                scenario=scenario,
            )  # [B, T, vocab]
        for seq in seqs:
            self.tokens[seq] += new_tokens[seq]
        return {seq: logits[row, -1] for row, seq in enumerate(seqs)}

    def expect_scratch(
        self, logits: dict[str, torch.Tensor], scenario: str, parent: str, child: str, fork_length: int
    ) -> None:
        for seq, row in logits.items():
            expected = self.model.logits_from_scratch([self.tokens[seq]])[0][-1]
            gap = logit_gap(row, expected)
            if not logits_match(gap, self.device, row.dtype):
                fail(
                    scenario,
                    f"{seq}'s logits equal to running its {len(self.tokens[seq])} tokens from scratch",
                    f"max |difference| {gap:.3g}",
                    _diagnose(self.cache, parent, child, fork_length),
                )


@check(notebook="04_fork_and_copy_on_write", builds="PagedKVCache")
def check_fork_logits(PagedKVCache: Any, seed: int = 0) -> None:
    """After a fork, diverging sequences each give exactly their from-scratch logits (on DEVICE)."""
    device = DEVICE
    print(f"check_fork_logits: running on {_device_name(device)}")
    rng = random.Random(seed)
    run = _ForkRun(PagedKVCache, seed, device)
    vocab = run.model.config.vocab_size
    prompt_length = rng.choice((9, 10, 11, 13, 14))
    prompt = fork_prompt(prompt_length, vocab, seed)

    scenario = f"prefill of a {prompt_length}-token prompt, blocks of {FORK_BLOCK}"
    call_learner("create('parent')", run.cache.create, "parent", scenario=scenario)
    run.tokens["parent"] = []
    logits = run.step({"parent": prompt}, scenario)
    run.expect_scratch(logits, scenario, "parent", "child", prompt_length)

    call_learner("fork('parent', 'child')", run.cache.fork, "parent", "child", scenario="the fork")
    run.tokens["child"] = list(prompt)
    # Two different continuations: the parent's most likely token and the child's second choice.
    best = logits["parent"].topk(2).indices.tolist()
    steps = [
        ("one batch [parent, child]", [{"parent": [best[0]], "child": [best[1]]}]),
        (
            "the child alone, then the parent alone",
            [{"child": [rng.randrange(vocab)]}, {"parent": [rng.randrange(vocab)]}],
        ),
        (
            "the parent alone, then the child alone",
            [{"parent": [rng.randrange(vocab)]}, {"child": [rng.randrange(vocab)]}],
        ),
        (
            "one batch [child, parent], 3 tokens each",
            [
                {
                    "child": [rng.randrange(vocab) for _ in range(3)],
                    "parent": [rng.randrange(vocab) for _ in range(3)],
                }
            ],
        ),
    ]
    for label, batches in steps:
        for batch in batches:
            scenario = f"after forking a {prompt_length}-token prompt, {label}"
            run.expect_scratch(run.step(batch, scenario), scenario, "parent", "child", prompt_length)

    fork_length = len(run.tokens["child"])
    scenario = (
        f"a fork of the fork (child -> grandchild at {fork_length} tokens), then one batch of all three"
    )
    call_learner("fork('child', 'grandchild')", run.cache.fork, "child", "grandchild", scenario=scenario)
    run.tokens["grandchild"] = list(run.tokens["child"])
    batch = {seq: [rng.randrange(vocab)] for seq in ("grandchild", "child", "parent")}
    run.expect_scratch(run.step(batch, scenario), scenario, "child", "grandchild", fork_length)

    for seq in ("parent", "child", "grandchild"):
        call_learner(f"free({seq!r})", run.cache.free, seq, scenario="freeing every sequence")
    if run.cache.allocator.num_free != run.num_blocks:
        fail(
            "after freeing parent, child and grandchild",
            f"all {run.num_blocks} blocks free",
            f"{run.cache.allocator.num_free} free",
            "the logits were right but blocks leaked: after copy-on-write, release the shared block once "
            "(the sequence no longer points at it)",
        )
