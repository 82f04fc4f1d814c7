"""check_paged_kv_cache: the paged KV cache, block by block and then on the real model (notebook 03).

The learner writes ``PagedKVCache(layers, num_blocks, block_size, kv_heads, head_dim, device,
dtype)`` with ``create``, ``blocks_needed``, ``reserve``, ``set_batch``, ``update``, ``free``
and ``truncate``, on top of their own ``BlockAllocator`` (``cache.allocator``).

What it covers. A ``_Harness`` holds the learner's cache, the check's own account of every
block table, what the check wrote into the pools, and the scenario's name; it has one method per
step an engine takes (each followed by its expectations). The check tells two stories with it,
one small scenario function per named step (``CACHE_STORY``, then ``MODEL_STORY``), seeded:

1. the pool's shapes and an empty cache (the harness's constructor);
2. ``blocks_needed`` on partial blocks and on exact block boundaries;
3. ``create`` of an existing sequence refused (ValueError);
4. a scrambled free list (one-block sequences freed in a seeded random order), so that
   tables are non-contiguous and out of order, and ``free`` returns every block;
5. ``reserve`` block counts, relative to what a table already holds;
6. ``set_batch``'s ``table_tensor`` (row order, padding with real block ids);
7. ``update`` called directly: where each key and value lands in the pool
   (``table[p // block_size]``, offset ``p % block_size``), what it returns, and the
   committed ``lengths``, for single sequences and a batch at different lengths;
8. exhaustion in the middle of a multi-block reserve: MemoryError with nothing changed
   (``report.expect_refused``), then a reserve that needs exactly the free blocks fits;
9. ``truncate`` back to a block boundary, then writing again;
10. the course's tiny Qwen3 on the cache: chunked prefills, decode steps of a batch of
    sequences at different lengths, a truncation across a block boundary, each step's logits
    compared with a from-scratch run (``scratch.expect_from_scratch``: one tolerance policy);
    then everything is freed and every block must be free again.

Invariants, after every step. Who owns a reference: each entry of a block table owns one
reference to its block, and nothing else does (nothing is shared before notebook 04), so a block
in a table has count 1 and appears in no other table; a block in no table has count 0 and is on
the free list exactly once (``Ledger``: the check's account, held against the pool's one invariant,
``paged_helpers.pool_invariant``). The learner's tables must equal the check's own account: only
``reserve`` (appending), ``truncate`` (cutting) and ``free`` change a table, and only the table
of the sequence they are called for.
"""

from __future__ import annotations

import functools
import random
from dataclasses import astuple, dataclass

import torch

from .reading.cache_reads import CacheReads, new_paged_cache, read_cache_ahead
from .reading.calls import call_learner, expect_raise
from .reading.learner_code import learner_type
from .reading.ledger import Ledger, ceil_div, expect_all_free, expect_pool_matches
from .reading.model_run import ModelRun
from .reading.scratch import forward_through_cache
from .reading.snapshot import expect_refused
from .reading.strict import learner_dict, learner_int, torch_unhooked
from .registry import check
from .speaking.failure import CheckFailed, Hint, NotImplementedYet, fail, hint_text
from .story import Story

__all__ = ["check_paged_kv_cache"]


@dataclass(frozen=True)
class _Setup:
    layers: int
    num_blocks: int
    block_size: int
    kv_heads: int
    head_dim: int


def _call(what: str, function, *args, scenario: str, likely: str = "", **kwargs):
    """call_learner, plus a sentence on the likely cause when the learner's code raised."""
    try:
        return call_learner(what, function, *args, scenario=scenario, **kwargs)
    except NotImplementedYet:
        raise
    except CheckFailed as error:
        if likely and error.__cause__ is not None:
            raise error.reworded(f"{error}\n  likely cause: {likely}", hint=likely) from error.__cause__
        raise


RESERVE_COUNTS_HELD_BLOCKS = Hint(
    "reserve compares with the free pool only the blocks the table is still missing: the blocks it "
    "already holds do not come from the pool again",
    "missing = blocks_needed(lengths[seq] + new_tokens) - len(table); raise only if missing > num_free",
)
RESERVE_REFUSES_EXACT_FIT = Hint(
    "a reserve that needs exactly the free blocks fits: only needing more than are free is a MemoryError",
    "raise MemoryError when missing > allocator.num_free (not >=)",
)
RESERVE_IGNORES_PARTIAL_ROOM = Hint(
    "the new tokens first fill the room left in the table's partial last block; only the rest needs "
    "fresh blocks, so count from the sequence's length, not from zero",
    "missing = blocks_needed(lengths[seq] + new_tokens) - len(table), not blocks_needed(new_tokens)",
)


TRUNCATE_RELEASES_TOO_FEW = Hint(
    "every block truncate drops from the table must go back to the allocator: release exactly the blocks it "
    "deletes, no fewer, or each truncate leaks a block for the life of the server",
    "keep = blocks_needed(length); for block in table[keep:]: allocator.release(block); then del table[keep:]",
)


def _why_a_fit_was_refused(cache_class: type, block_size: int) -> Hint:
    """Which miscount made reserve raise MemoryError although the pool had room, found by probing.

    Two small probes on fresh caches of the learner's class tell the usual causes apart:
    counting the blocks the table already holds as if they came from the pool; refusing an
    exact fit (>= instead of >); otherwise, ignoring the room left in a partial last block.
    """

    def refuses(held_tokens: int, free_after: int, new_tokens: int) -> bool | None:
        held = ceil_div(held_tokens, block_size)
        try:
            probe = cache_class(1, held + free_after, block_size, 1, 1)
            probe.create("probe")
            probe.reserve("probe", held_tokens)
            probe.lengths["probe"] = held_tokens  # as if the forward pass had written them
            probe.reserve("probe", new_tokens)
        except MemoryError:
            return True
        except Exception:  # the probe itself broke: no diagnosis from it
            return None
        return False

    # 2 full blocks held, 2 free, 1 more block needed: only a count of the whole table refuses.
    if refuses(2 * block_size, 2, block_size):
        return RESERVE_COUNTS_HELD_BLOCKS
    # 1 full block held, exactly the 2 free blocks needed (no partial block): an exact fit.
    if refuses(block_size, 2, 2 * block_size):
        return RESERVE_REFUSES_EXACT_FIT
    return RESERVE_IGNORES_PARTIAL_ROOM


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal with every __torch_function__ override off (learner tensors may carry one)."""
    with torch_unhooked():
        return bool(torch.equal(a, b))


def _close_plain(got: torch.Tensor, want: torch.Tensor) -> bool:
    with torch_unhooked():
        return bool(torch.allclose(got.float().cpu(), want.float().cpu(), atol=1e-6, rtol=0))


# --------------------------------------------------------------------------- the harness


class _Harness:
    """The learner's cache, the check's own account of its block tables, and the scenario's name.

    ``ledger.tables[seq]`` is the table the check expects ``seq`` to have (learned block by block as
    ``reserve`` hands blocks out); ``written[seq]`` is [2 (k, v), layers, kv_heads, positions,
    head_dim], every key and value the check wrote for ``seq`` through ``update``. ``step`` names
    the story's current step; messages start with ``where``.
    """

    def __init__(self, PagedKVCache: type, setup: _Setup, device: torch.device, scenario: str) -> None:  # noqa: N803
        self.setup, self.scenario, self.step = setup, scenario, ""
        self.num_blocks = setup.num_blocks
        self.ledger = Ledger(setup.num_blocks)
        self.written: dict = {}
        self.generator = torch.Generator().manual_seed(0)
        sizes = astuple(setup)  # layers, num_blocks, block_size, kv_heads, head_dim
        self.cache = new_paged_cache(PagedKVCache, sizes, scenario=scenario, device=device, dtype=torch.float32)
        self.reads = CacheReads(self.cache)
        self.expect_a_new_cache()

    @property
    def where(self) -> str:
        return f"{self.scenario}, {self.step}" if self.step else self.scenario

    # Plain copies of the learner's bookkeeping (reading.cache_reads): never compared as the learner's objects.
    def learner_tables(self) -> dict:
        return self.reads.tables(self.where)

    def learner_length(self, seq) -> int:
        return self.reads.length(seq, self.where)

    def learner_num_free(self) -> int:
        return self.reads.num_free(self.where)

    def learner_refs(self) -> list[int]:
        return self.reads.refs(self.where)

    # -- expectations that hold after every step ---------------------------------------------------

    def expect_a_new_cache(self) -> None:
        cache, setup, where = self.cache, self.setup, self.scenario
        for name in ("k_pool", "v_pool", "block_size", "allocator", "tables", "lengths"):
            if not hasattr(cache, name):
                fail(
                    f"{where}: the attribute `{name}`",
                    "present",
                    "missing",
                    "keep the chapter's attribute names: the model, widgets and later notebooks use them.",
                )
        shape = (setup.num_blocks, setup.kv_heads, setup.block_size, setup.head_dim)
        for name in ("k_pool", "v_pool"):
            pools = getattr(cache, name)
            if len(pools) != setup.layers:
                fail(f"{where}: len({name})", setup.layers, len(pools), "one pool tensor per layer.")
            if tuple(pools[0].shape) != shape:
                fail(
                    f"{where}: {name}[0].shape",
                    shape,
                    tuple(pools[0].shape),
                    "each layer's pool is [num_blocks, kv_heads, block_size, head_dim].",
                )
        if cache.tables or cache.lengths:
            fail(
                f"{where}: a new cache",
                "no sequences",
                f"tables {cache.tables}, lengths {cache.lengths}",
                "tables and lengths start empty.",
            )
        self.expect_accounting("a new cache")

    def expect_accounting(self, after: str) -> None:
        """The tables are the check's account; each of their blocks has count 1; the rest are free, once."""
        where = f"{self.where}: after {after}"
        got = self.learner_tables()
        for seq in sorted(set(got) | set(self.ledger.tables), key=str):
            if got.get(seq) != self.ledger.tables.get(seq):
                fail(
                    f"{where}: the table of {seq!r}",
                    self.ledger.tables.get(seq, "no table"),
                    got.get(seq, "no table"),
                    "only reserve (appending blocks), truncate (dropping the last ones) and free (dropping "
                    "the table) change a table, and only the table of the sequence they are called for.",
                )
        holders = self.ledger.holders()
        twice = {block: who for block, who in enumerate(holders) if len(who) > 1}
        if twice:
            fail(
                f"{where}: block ownership",
                "each block in at most one table (nothing is shared yet)",
                f"tables {self.ledger.tables}",
                f"block(s) {twice} appear more than once: a block was handed out twice. "
                "Blocks must come from allocator.allocate(), which takes them off the free list.",
            )
        expect_pool_matches(self.cache.allocator, holders, where, _count_hint)

    def expect_table_length(self, seq, expected: int, where: str, hint: str) -> None:
        tables = self.learner_tables()
        got = len(tables[seq]) if seq in tables else "no table"
        if got != expected:
            fail(f"{where}: blocks in the table of {seq!r}", expected, got, hint)

    def expect_blocks_needed(self) -> None:
        # Partial blocks first, then exact boundaries, then zero: each slip fails where its hint fits best.
        block_size = self.cache.block_size
        counts = [1, block_size + 1, 2 * block_size + 1, 3 * block_size - 1, block_size, 2 * block_size, 0]
        for tokens in counts:
            scenario = f"blocks_needed({tokens}) with block_size {block_size}"
            got = _call(f"blocks_needed({tokens})", self.cache.blocks_needed, tokens, scenario=scenario)
            expected = ceil_div(tokens, block_size)
            if got != expected:
                fail(scenario, expected, got, _blocks_needed_hint(tokens, block_size, got))

    # -- the steps an engine takes -------------------------------------------------------------

    def create(self, seq) -> None:
        _call(f"create({seq!r})", self.cache.create, seq, scenario=self.where)
        lengths = learner_dict(self.cache.lengths, "cache.lengths", self.where, learner_int)
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
        _call(f"free({seq!r})", self.cache.free, seq, scenario=self.where)
        read_cache_ahead(self.cache)
        if seq in self.cache.tables or seq in self.cache.lengths:
            fail(
                f"{self.where}: after free({seq!r})",
                f"{seq!r} gone from tables and lengths",
                f"still in {'tables' if seq in self.cache.tables else 'lengths'}",
                "free must forget the sequence: remove it from tables and lengths after releasing its blocks.",
            )
        del self.ledger.tables[seq]
        self.written.pop(seq, None)
        self.expect_accounting(f"free({seq!r})")

    def reserve(self, seq, new_tokens: int, why: str = "") -> None:
        """reserve; the table then holds exactly blocks_needed(length + new_tokens) blocks (never fewer)."""
        cache, block_size = self.cache, self.cache.block_size
        before, length = list(self.ledger.tables[seq]), self.learner_length(seq)
        expected = max(len(before), ceil_div(length + new_tokens, block_size))
        where = f"{self.where}{why}: reserve({seq!r}, {new_tokens}) at length {length} with {len(before)} block(s)"
        if hasattr(cache, "blocks_to_add"):
            to_add = _call(
                f"blocks_to_add({seq!r}, {new_tokens})", cache.blocks_to_add, seq, new_tokens, scenario=self.where
            )
            if learner_int(to_add, f"blocks_to_add({seq!r}, {new_tokens})", self.where) != expected - len(before):
                fail(
                    f"{self.where}: blocks_to_add({seq!r}, {new_tokens}) with length {length} and "
                    f"{len(before)} block(s)",
                    expected - len(before),
                    to_add,
                    "the table needs blocks_needed(length + new_tokens) blocks in total; the blocks it "
                    "already has count, and it never needs a negative number.",
                )
        free = self.learner_num_free()
        try:
            _call(f"reserve({seq!r}, {new_tokens})", cache.reserve, seq, new_tokens, scenario=self.where + why)
        except NotImplementedYet:
            raise
        except CheckFailed as error:
            if not isinstance(error.__cause__, MemoryError):
                raise
            refused_hint = _why_a_fit_was_refused(learner_type(cache), block_size)
            cause = hint_text(self.where + why, refused_hint)
            raise error.reworded(
                f"{error}\n  likely cause: the table needed {expected - len(before)} more block(s) and {free} "
                f"were free, so it fits: {cause}",
                hint=refused_hint.concept,
                concept=refused_hint.concept,
            ) from error.__cause__
        table = self.learner_tables()[seq]
        if len(table) != expected:
            fail(
                where,
                f"{expected} block(s)",
                f"{len(table)} block(s): {table}",
                _reserve_hint(len(before), length, new_tokens, block_size, len(table)),
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
            changed_hint=lambda before, after: _kept_hint(len(after.tables.get(seq, [])) - len(before.tables[seq])),
        )
        self.expect_accounting(f"reserve({seq!r}, {new_tokens}) raised MemoryError")

    def truncate(self, seq, length: int) -> None:
        before, old_length = list(self.ledger.tables[seq]), self.learner_length(seq)
        _call(f"truncate({seq!r}, {length})", self.cache.truncate, seq, length, scenario=self.where)
        block_size = self.cache.block_size
        keep = ceil_div(length, block_size)
        where = f"{self.where}: truncate({seq!r}, {length}) from length {old_length} with table {before}"
        got = self.learner_tables()[seq]
        if got != before[:keep]:
            if len(got) == keep + 1:
                exactly = " exactly" if length % block_size == 0 else ""
                hint = (
                    f"{length} tokens fit in {keep} block(s) of {block_size}{exactly}: keep blocks_needed(length) "
                    "blocks, no more."
                )
            elif len(got) == len(before):
                hint = "truncate must drop the blocks past blocks_needed(length) from the table (and release them)."
            else:
                hint = "keep the first blocks_needed(length) blocks of the table, in order."
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
                TRUNCATE_RELEASES_TOO_FEW,
            )
        self.ledger.tables[seq] = got
        if seq in self.written:
            self.written[seq] = self.written[seq][:, :, :, :length]
        self.expect_accounting(f"truncate({seq!r}, {length})")

    def scramble(self, rng: random.Random) -> None:
        """Take every block with one-block sequences, then free them in a random order."""
        fillers = [f"filler-{index}" for index in range(self.num_blocks)]
        for filler in fillers:
            self.create(filler)
            self.reserve(filler, 1)
        for index in rng.sample(range(self.num_blocks), self.num_blocks):
            self.free(fillers[index])

    def set_batch(self, seqs: list) -> None:
        cache = self.cache
        _call(f"set_batch({seqs})", cache.set_batch, list(seqs), scenario=self.where)
        where = f"{self.where}: after set_batch({seqs})"
        if list(getattr(cache, "batch", [])) != list(seqs):
            fail(
                f"{where}: cache.batch",
                list(seqs),
                getattr(cache, "batch", "missing"),
                "set_batch keeps the sequences in the order given: row i of the batch is seqs[i].",
            )
        tensor = getattr(cache, "table_tensor", None)
        tables = [self.ledger.tables[seq] for seq in seqs]
        width = max(len(table) for table in tables)
        if not isinstance(tensor, torch.Tensor) or tensor.ndim != 2 or tensor.shape[0] != len(seqs):
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            fail(
                f"{where}: table_tensor",
                f"a tensor [{len(seqs)}, >= {width}]",
                got,
                "table_tensor has one row per sequence of the batch, in batch order.",
            )
        if tensor.dtype not in (torch.int64, torch.int32):
            fail(
                f"{where}: table_tensor.dtype",
                "torch.long (integer block ids)",
                tensor.dtype,
                "block ids index the pool: build the tensor with dtype=torch.long.",
            )
        if tensor.shape[1] < width:
            fail(
                f"{where}: table_tensor's width",
                f"at least {width} (the longest table)",
                tensor.shape[1],
                "pad every row to the longest table in the batch, not to the first one's length.",
            )
        rows = tensor.tolist()
        for row, (seq, table) in enumerate(zip(seqs, tables, strict=True)):
            if rows[row][: len(table)] != table:
                other = [s for s, t in zip(seqs, tables, strict=True) if t and rows[row][: len(t)] == t]
                hint = (
                    f"row {row} holds the table of {other[0]!r}: rows must follow the order of seqs as given."
                    if other
                    else "row i starts with the block table of seqs[i], unchanged."
                )
                fail(f"{where}: row {row} of table_tensor (sequence {seq!r})", f"starts with {table}", rows[row], hint)
            padding = rows[row][len(table) :]
            if any(not 0 <= block < self.num_blocks for block in padding):
                fail(
                    f"{where}: the padding of row {row} (sequence {seq!r})",
                    f"real block ids in 0..{self.num_blocks - 1}",
                    padding,
                    "pad shorter rows with a real block id such as 0. Padded entries are only read at "
                    "positions the causal mask hides, but a kernel (notebook 07) must never see an id like -1.",
                )

    def update(self, batch: list, new_tokens: int) -> None:
        """reserve, set_batch, then update for every layer with known k/v: placement, reply, lengths."""
        setup, cache = self.setup, self.cache
        device = cache.k_pool[0].device
        starts = [self.learner_length(seq) for seq in batch]
        for seq in batch:
            self.reserve(seq, new_tokens)
        self.set_batch(batch)
        tables = self.ledger.tables
        write = _Write(batch, starts, new_tokens, {seq: tables[seq] for seq in batch}, dict(tables))
        shape = (len(batch), setup.kv_heads, new_tokens, setup.head_dim)
        new_k = [torch.randn(shape, generator=self.generator).to(device) for _ in range(setup.layers)]
        new_v = [torch.randn(shape, generator=self.generator).to(device) for _ in range(setup.layers)]
        empty = torch.zeros(2, setup.layers, setup.kv_heads, 0, setup.head_dim, device=device)
        for row, seq in enumerate(batch):
            fresh = torch.stack([torch.stack([k[row] for k in new_k]), torch.stack([v[row] for v in new_v])])
            self.written[seq] = torch.cat([self.written.get(seq, empty)[:, :, :, : starts[row]], fresh], dim=3)
        at = ", ".join(f"{seq!r} at {_positions(s, new_tokens)}" for seq, s in zip(batch, starts, strict=True))
        where = f"{self.where}: update(layer, k, v, positions) writing {at}"
        positions = torch.tensor([[s + t for t in range(new_tokens)] for s in starts], device=device)  # [B, T]
        for layer in range(setup.layers):
            reply = _call(
                f"update({layer}, k, v, positions)",
                cache.update,
                layer,
                new_k[layer],
                new_v[layer],
                positions,
                scenario=where,
                likely="positions index the table as table_tensor[row, p // block_size] and the block as "
                "offset p % block_size; an IndexError usually means one of these is computed differently.",
            )
            self.expect_placement(write, layer, "k_pool", new_k[layer], where)
            self.expect_placement(write, layer, "v_pool", new_v[layer], where)
            self.expect_history_returned(reply, batch, layer, where)
        self.expect_lengths(write, where)
        self.expect_accounting(f"update writing {at}")

    def finish(self, where: str) -> None:
        """Free every sequence: every block must be free again."""
        for seq in list(self.ledger.tables):
            self.free(seq)
        expect_all_free(
            self.cache.allocator, self.num_blocks, where, "every block must be back on the free list: nothing may leak."
        )

    # -- what update must have done --------------------------------------------------------------

    def expect_placement(self, write: _Write, layer: int, which: str, new: torch.Tensor, where: str) -> None:
        """Every new vector of ``new`` [B, kv_heads, T, head_dim] sits at its position's home in the pool."""
        pools = getattr(self.cache, which)
        size = self.cache.block_size
        for row, seq in enumerate(write.batch):
            for t in range(write.new_tokens):
                p = write.starts[row] + t
                block, offset = write.home(seq, p, size)
                if _same(pools[layer][block, :, offset], new[row, :, t]):
                    continue
                found = _locate(pools, new[row, :, t])
                got = f"found at (layer, block, offset) {found[:3]}" if found else "not in the pool"
                hint = _placement_hint(size, write.tables[seq], seq, layer, p, which, found, write.owners)
                occupant = [
                    (write.batch[r], write.starts[r] + u)
                    for r in range(len(write.batch))
                    for u in range(write.new_tokens)
                    if _same(pools[layer][block, :, offset], new[r, :, u])
                ]
                if not found and occupant:
                    got, hint = _overwritten(write, occupant[0], which, block, offset, size)
                fail(
                    f"{where}: where the {which[0]} of {seq!r} at position {p} (layer {layer}) was stored, "
                    f"table {write.tables[seq]}, block_size {size}",
                    f"{which}[{layer}][{block}, :, {offset}]",
                    got,
                    hint,
                )

    def expect_lengths(self, write: _Write, where: str) -> None:
        """After every layer has written, lengths[seq] is one past the highest position written for seq."""
        for row, seq in enumerate(write.batch):
            start = write.starts[row]
            expected, got = start + write.new_tokens, self.learner_length(seq)
            if got == expected:
                continue
            if got == start:
                hint = (
                    "lengths were not updated: when the last layer has written, lengths[seq] becomes the "
                    "highest position written for seq + 1."
                )
            elif got == start + write.new_tokens * self.setup.layers:
                hint = "the new tokens were counted once per layer: commit lengths only at the last layer."
            elif got == max(s + write.new_tokens for s in write.starts):
                hint = (
                    "every sequence got the batch's highest position: each row has its own positions, so "
                    "lengths[seq] = positions[row].max() + 1 for that sequence's row."
                )
            else:
                hint = "lengths[seq] counts the tokens written: the highest position written + 1."
            fail(f"{where}: lengths[{seq!r}] after every layer has written", expected, got, hint)

    def expect_history_returned(self, reply, batch: list, layer: int, where: str) -> None:
        """update's reply holds, for each row, every position written so far with the right key and value."""
        if not isinstance(reply, tuple) or len(reply) != 3:
            fail(
                f"{where}: what update returned (layer {layer})",
                "(keys, values, key_positions)",
                type(reply).__name__,
                "update returns the history to attend to: keys, values and their positions.",
            )
        keys, values, key_positions = reply
        kv_heads, head_dim = self.setup.kv_heads, self.setup.head_dim
        for name, tensor in (("keys", keys), ("values", values)):
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            if (
                not isinstance(tensor, torch.Tensor)
                or tensor.ndim != 4
                or (tensor.shape[0], tensor.shape[1], tensor.shape[3]) != (len(batch), kv_heads, head_dim)
                or tensor.shape != keys.shape
            ):
                fail(
                    f"{where}: the {name} update returned (layer {layer})",
                    f"a tensor [batch={len(batch)}, kv_heads={kv_heads}, span, head_dim={head_dim}]",
                    shape,
                    Hint(
                        "return one row of history per sequence in the batch, with heads before positions, "
                        "the layout attention expects",
                        "pool[blocks, :, offsets] is [B, span, kv_heads, head_dim]: return it .transpose(1, 2)",
                    ),
                )
        span = keys.shape[2]
        if not isinstance(key_positions, torch.Tensor) or key_positions.shape not in ((span,), (len(batch), span)):
            fail(
                f"{where}: the key positions update returned (layer {layer})",
                f"a tensor [{span}] (or [{len(batch)}, {span}]): the position of each returned key",
                tuple(key_positions.shape) if isinstance(key_positions, torch.Tensor) else repr(key_positions),
                "return torch.arange(span): the history is positions 0..span-1 of every sequence.",
            )
        if key_positions.ndim == 1:
            key_positions = key_positions.expand(len(batch), -1)
        for row, seq in enumerate(batch):
            history = self.written[seq]  # [2, layers, kv_heads, length, head_dim]
            returned = {int(p): j for j, p in enumerate(key_positions[row].tolist())}
            for p in range(history.shape[3]):
                if p not in returned:
                    fail(
                        f"{where}: the history returned for {seq!r} (row {row}, layer {layer})",
                        f"a key for every position 0..{history.shape[3] - 1}",
                        f"no key for position {p} (span {span})",
                        Hint(
                            "update returns the whole history, every position up to the highest one in the "
                            "batch, not only the tokens just written",
                            "span = int(positions.max()) + 1; gather positions torch.arange(span)",
                        ),
                    )
                j = returned[p]
                for name, got, want in (
                    ("key", keys[row, :, j], history[0, layer, :, p]),
                    ("value", values[row, :, j], history[1, layer, :, p]),
                ):
                    if not _close_plain(got, want):
                        fail(
                            f"{where}: the {name} update returned for {seq!r} at position {p} "
                            f"(row {row}, layer {layer})",
                            "the one written there",
                            "a different vector",
                            Hint(
                                "the write checked out, so the read side differs: each row must read its "
                                "positions through its own sequence's block table",
                                "gather pool[table_tensor[row, p // block_size], :, p % block_size] for each row",
                            ),
                        )


# --------------------------------------------------------------------------- hints the harness gives


def _count_hint(block: int, holders: list, count: int) -> str:
    if not holders:
        return (
            f"block {block} is in no table but still has count {count}: it leaked. Every block a table lets "
            "go of (free, truncate, a failed reserve) must be released to the allocator."
        )
    return (
        f"block {block} is in the table of {holders} and should have count 1. Take blocks only with "
        "allocator.allocate() and give them back only with allocator.release()."
    )


def _blocks_needed_hint(tokens: int, block_size: int, got) -> Hint:
    round_up = "blocks_needed returns -(-tokens // block_size): tokens / block_size rounded up"
    if tokens % block_size and got == tokens // block_size:
        return Hint(
            f"{tokens} token(s) leave a partial last block ({tokens % block_size} token(s)), which still "
            "needs a block of its own",
            round_up,
        )
    if tokens % block_size == 0 and got == tokens // block_size + 1:
        return Hint(
            f"{tokens} = {tokens // block_size} x {block_size} lies exactly on a block boundary: the "
            "blocks are all full and no extra one is needed",
            round_up,
        )
    if tokens == 0:
        return Hint("an empty sequence needs no block at all", round_up)
    return Hint("the number of blocks is tokens / block_size, rounded up", round_up)


def _reserve_hint(before: int, length: int, new_tokens: int, block_size: int, got: int) -> str:
    end = length + new_tokens
    expected = max(before, ceil_div(end, block_size))
    if got == before + ceil_div(new_tokens, block_size):
        return (
            f"reserve appended blocks_needed({new_tokens}) blocks on top of the {before} already there. "
            f"It must make positions [{length}, {end}) exist: {expected} block(s) in total, "
            "counting those the table already has."
        )
    if end % block_size == 0 and got == expected + 1:
        return (
            f"length + new_tokens = {end} = {end // block_size} x {block_size} ends exactly on a block "
            "boundary: the last block is full, no extra block is needed."
        )
    if end % block_size and got == expected - 1:
        return f"{end} tokens leave a partial last block, which needs a block too: round up."
    return (
        f"after reserve the table must cover positions [0, {end}): blocks_needed({end}) = {expected} "
        "block(s) (reserve never removes blocks)."
    )


def _kept_hint(grew: int) -> str:
    if grew > 0:
        return (
            f"reserve took {grew} block(s) before running out and kept them: half-reserved blocks nobody "
            "accounts for. Count the blocks needed and compare with allocator.num_free BEFORE allocating any."
        )
    return "a failed reserve must leave tables, lengths, counts and the free list unchanged."


@dataclass(frozen=True)
class _Write:
    """One update call the check makes: which sequences, from which positions, with which k/v."""

    batch: list
    starts: list[int]
    new_tokens: int
    tables: dict  # seq -> its block table at the time of the write
    owners: dict  # every sequence's table, to name the owner of a wrongly written block

    def home(self, seq, position: int, block_size: int) -> tuple[int, int]:
        """Where position lives: (table[p // block_size], p % block_size)."""
        return self.tables[seq][position // block_size], position % block_size


def _locate(pools: list[torch.Tensor], vector: torch.Tensor) -> list[tuple[int, int, int]]:
    """Every (layer, block, offset) whose [kv_heads, head_dim] slice equals ``vector``."""
    found = []
    for layer, pool in enumerate(pools):
        match = (pool.permute(0, 2, 1, 3) == vector).all(dim=-1).all(dim=-1)  # [N, block_size]
        found += [(layer, int(b), int(o)) for b, o in match.nonzero().tolist()]
    return found


def _placement_hint(
    block_size: int,
    row_table: list[int],
    seq,
    layer: int,
    position: int,
    which: str,
    found: list[tuple[int, int, int]],
    batch_tables: dict,
) -> str:
    logical, offset = divmod(position, block_size)
    right_block = row_table[logical]
    if not found:
        other = "v_pool" if which == "k_pool" else "k_pool"
        return (
            f"the vector is nowhere in {which}: update must store k (and v) of each new token in "
            f"{which}[layer][table[p // block_size], :, p % block_size] (all heads at once; check it "
            f"didn't go to {other} or get transposed)."
        )
    layers_found = {f[0] for f in found}
    if layer not in layers_found:
        return f"it was written to the pool of layer {sorted(layers_found)} instead of layer {layer}."
    spots = [(b, o) for (lay, b, o) in found if lay == layer]
    block, got_offset = spots[0]
    if block != right_block:
        if block == logical:
            return (
                f"it went to block {logical} = position // block_size, as if the cache were contiguous: "
                f"the data lives in the block the table maps it to, table[{logical}] = {right_block}."
            )
        if position < len(row_table) and block == row_table[position]:
            return (
                f"the table was indexed by the position (table[{position}]); it has one entry per block: "
                f"use table[position // block_size] = table[{logical}]."
            )
        owners = [s for s, t in batch_tables.items() if block in t and s != seq]
        if owners:
            return (
                f"block {block} belongs to {owners[0]!r}: the write used another sequence's row of "
                "table_tensor. Row i of the batch is the i-th sequence given to set_batch."
            )
        if block in row_table:
            return (
                f"block {block} is logical block {row_table.index(block)} of this sequence, not "
                f"{logical} = {position} // {block_size}: check the division (position // block_size)."
            )
        return f"the block must be table[position // block_size] = table[{logical}] = {right_block}."
    if got_offset == logical:
        return "the offset was position // block_size; the offset inside the block is position % block_size."
    return (
        f"right block, wrong offset: the slot inside the block is position % block_size = {offset} "
        f"(a different divisor gave {got_offset})."
    )


def _overwritten(write: _Write, occupant: tuple, which: str, block: int, offset: int, size: int):
    """(got, hint) when another new vector of the same write took this slot."""
    other_seq, other_p = occupant
    got = f"overwritten by the {which[0]} of {other_seq!r} at position {other_p}"
    home_block, home_offset = write.home(other_seq, other_p, size)
    if home_block == block:
        return got, (
            f"right block, wrong offset: two positions landed in the same slot. Position {other_p} "
            f"belongs at offset {other_p} % {size} = {home_offset}, not {offset}: the offset inside a "
            "block is position % block_size."
        )
    return got, (
        f"position {other_p} of {other_seq!r} belongs in block {home_block}, not {block}: two positions "
        "landed in the same slot. Each position p goes to table[p // block_size] at offset "
        "p % block_size of its own sequence's row."
    )


def _positions(start: int, count: int) -> str:
    return f"position {start}" if count == 1 else f"positions {start}..{start + count - 1}"


# --------------------------------------------------------------------------- the cache story


def _blocks_needed(h: _Harness, rng: random.Random) -> None:
    h.expect_blocks_needed()


def _create_twice(h: _Harness, rng: random.Random) -> None:
    h.create("a")
    h.refused_create("a")
    h.free("a")


def _scrambled_free_list(h: _Harness, rng: random.Random) -> None:
    h.scramble(rng)


def _two_interleaved_tables(h: _Harness, rng: random.Random) -> None:
    b = h.cache.block_size
    h.create("a")
    h.create("b")
    for seq, new_tokens in (("a", b), ("b", 1), ("a", b + 1), ("a", 2 * b), ("b", 2 * b + 1), ("a", 0)):
        h.reserve(seq, new_tokens)


def _a_batch_of_two_tables(h: _Harness, rng: random.Random) -> None:
    h.set_batch(["b", "a"])


def _prefill_of_a(h: _Harness, rng: random.Random) -> None:
    h.update(["a"], 2 * h.cache.block_size - 1)


def _prefill_of_b(h: _Harness, rng: random.Random) -> None:
    h.update(["b"], h.cache.block_size + 1)


def _decode_at_different_lengths(h: _Harness, rng: random.Random) -> None:
    h.update(["b", "a"], 1)


def _decode_in_swapped_order(h: _Harness, rng: random.Random) -> None:
    h.update(["a", "b"], 1)


def _exhaustion(h: _Harness, rng: random.Random) -> None:
    """Leave exactly 2 free blocks: a reserve needing 4 more changes nothing, one needing 2 fits."""
    b = h.cache.block_size
    h.create("hog")
    h.reserve("hog", (h.cache.allocator.num_free - 2) * b)
    length, held = h.cache.lengths["a"], len(h.ledger.tables["a"])
    h.refused_reserve("a", (held + 4) * b - length, free=2, needed=4)
    h.reserve("a", (held + 2) * b - length, why=" (a reserve that needs exactly the 2 free blocks fits)")
    h.free("hog")


def _truncate_to_one_full_block(h: _Harness, rng: random.Random) -> None:
    h.truncate("a", h.cache.block_size)


def _write_after_truncate(h: _Harness, rng: random.Random) -> None:
    h.update(["a", "b"], 2)


def _free_everything(h: _Harness, rng: random.Random) -> None:
    h.finish(f"{h.where}: after freeing every sequence")


# Named steps of one story on one cache, in order: each starts where the one before left off.
CACHE_STORY = (
    ("blocks_needed", _blocks_needed),
    ("create of an existing sequence", _create_twice),
    ("scrambling the free list", _scrambled_free_list),
    ("growing two interleaved tables", _two_interleaved_tables),
    ("two sequences with tables of 3 and 2 blocks", _a_batch_of_two_tables),
    ("prefill of 'a'", _prefill_of_a),
    ("prefill of 'b'", _prefill_of_b),
    ("one decode step of a batch at different lengths", _decode_at_different_lengths),
    ("a second decode step, batch order swapped", _decode_in_swapped_order),
    ("exhaustion in the middle of a multi-block reserve", _exhaustion),
    ("rolling 'a' back to exactly one full block", _truncate_to_one_full_block),
    ("writing again after truncate", _write_after_truncate),
    ("freeing everything", _free_everything),
)


# --------------------------------------------------------------------------- the model story


class _ModelRun(_Harness):
    """The harness under the tiny Qwen3: each sequence's tokens so far (``model_run.tokens``, kept by
    the driver every model check shares: ``reading.model_run``), for from-scratch runs."""

    def __init__(self, PagedKVCache: type, block_size: int) -> None:  # noqa: N803
        from ..checkpoint import tiny_qwen3

        model = tiny_qwen3(seed=0)
        config = model.config
        setup = _Setup(config.num_hidden_layers, 40, block_size, config.num_key_value_heads, config.head_dim)
        super().__init__(PagedKVCache, setup, model.device, "the tiny Qwen3 on your cache")
        self.model_run = ModelRun(model, self.cache, setup.num_blocks)
        self.prompts: dict = {}

    @property
    def vocab(self) -> int:
        return self.model_run.vocab

    def forward(self, new: dict) -> None:
        """One forward pass of the sequences in ``new`` (same count each), compared with from scratch."""
        seqs, b, story_step = list(new), self.cache.block_size, self.step
        lengths_before = [self.learner_length(seq) for seq in seqs]
        count = len(new[seqs[0]])
        self.step = f"{story_step}: batch {seqs} at lengths {lengths_before}, {count} new token(s) each"
        for seq in seqs:
            self.reserve(seq, count)
        self.set_batch(seqs)
        # The model starts each row where the learner's cache says the sequence ends (a wrong length
        # is named below, after the logits); the check's record of its tokens is cut there to match.
        for seq, length in zip(seqs, lengths_before, strict=True):
            self.model_run.keep_first(seq, length)
        logits = forward_through_cache(self.model_run.model, self.cache, new, lengths_before, scenario=self.where)
        self.model_run.expect_rows(
            new,
            logits,
            self.where,
            hint="the history update returned for this sequence is not its own. Check: the "
            "table_tensor row of each sequence (set_batch order), table[p // block_size] and "
            "p % block_size for every position of every row, span = highest position in the "
            "batch + 1, and lengths per sequence.",
        )
        for seq in seqs:
            full = self.model_run.tokens[seq]
            if self.learner_length(seq) != len(full):
                fail(
                    f"{self.where}: lengths[{seq!r}]",
                    len(full),
                    self.cache.lengths[seq],
                    "after a forward pass, lengths[seq] counts every token written for seq.",
                )
            self.expect_table_length(
                seq, ceil_div(len(full), b), self.where, "a sequence holds blocks_needed(length) blocks after a step."
            )
        self.expect_accounting("the forward pass")
        self.step = story_step

    def truncate(self, seq, length: int) -> None:
        super().truncate(seq, length)
        self.model_run.keep_first(seq, length)


def _four_prompts(run: _ModelRun, rng: random.Random) -> None:
    b, vocab = run.cache.block_size, run.vocab
    lengths = {"s0": 2 * b + 1, "s1": b, "s2": 3 * b - 1, "s3": 1}
    run.prompts = {seq: [rng.randrange(vocab) for _ in range(n)] for seq, n in lengths.items()}
    for seq in run.prompts:
        run.create(seq)
        run.model_run.keep_first(seq, 0)


def _chunked_prefills(run: _ModelRun, rng: random.Random) -> None:
    """Interleaved and in chunks, so that tables are non-contiguous and chunks end mid-block."""
    b, prompts = run.cache.block_size, run.prompts
    for label, new in (
        ("prefill of s2, first chunk", {"s2": prompts["s2"][: b + 2]}),
        ("prefill of s0", {"s0": prompts["s0"]}),
        ("prefill of s1 (exactly one full block)", {"s1": prompts["s1"]}),
        ("prefill of s2, second chunk (starts mid-block)", {"s2": prompts["s2"][b + 2 :]}),
        ("prefill of s3 (one token)", {"s3": prompts["s3"]}),
    ):
        run.step = label
        run.forward(new)


def _decode_steps(run: _ModelRun, rng: random.Random) -> None:
    vocab = run.vocab
    order = [["s2", "s0", "s3", "s1"], ["s3", "s2", "s0"], ["s1", "s0", "s2", "s3"], ["s0", "s1", "s2", "s3"]]
    for index, batch in enumerate(order):
        run.step = f"decode step {index + 1}"
        run.forward({seq: [rng.randrange(vocab)] for seq in batch})


def _truncate_across_a_boundary(run: _ModelRun, rng: random.Random) -> None:
    run.truncate("s2", 2 * run.cache.block_size - 1)


def _decode_after_truncate(run: _ModelRun, rng: random.Random) -> None:
    vocab = run.vocab
    for index in range(2):
        run.step = f"decode step {index + 1} after truncate"
        run.forward({seq: [rng.randrange(vocab)] for seq in ["s0", "s2"]})


MODEL_STORY = (
    ("scrambling the free list", _scrambled_free_list),
    ("four prompts created", _four_prompts),
    ("chunked prefills", _chunked_prefills),
    ("decode steps", _decode_steps),
    ("rolling s2 back across a block boundary", _truncate_across_a_boundary),
    ("decode steps after truncate", _decode_after_truncate),
    ("freeing every sequence at the end", _free_everything),
)


def _model_run(PagedKVCache: type, rng: random.Random, block_size: int) -> None:  # noqa: N803
    """The model story on a fresh cache of 40 blocks (a check of its own: wrong gathers show as logits)."""
    run = _ModelRun(PagedKVCache, block_size)
    for step, scenario in MODEL_STORY:
        run.step = step
        scenario(run, rng)


# --------------------------------------------------------------------------- the check


# --------------------------------------------------------------------------- hidden scenarios
#
# Run only by the hidden tests (``hidden=True``), every kind each time, sized by the grader's secret seed; a
# failure names the kind and its hint, never its numbers (``Story``: every kind, in full).


def _hidden_harness(PagedKVCache: type, rng: random.Random, block_size: int) -> _Harness:  # noqa: N803
    from ..device import DEVICE

    setup = _Setup(layers=1, num_blocks=rng.randint(10, 30), block_size=block_size, kv_heads=1, head_dim=2)
    return _Harness(PagedKVCache, setup, DEVICE, "a hidden scenario")


def _grown(h: _Harness, seq, new_tokens: int) -> None:
    """reserve, then count the tokens as written (as a forward pass would), without writing them."""
    length = h.learner_length(seq)
    h.reserve(seq, new_tokens)
    h.cache.lengths[seq] = length + new_tokens


# Every kind runs in full in every draw: the seed picks pool sizes, names, orders and amounts,
# never which block sizes, which moves or how many of them (a bug one draw catches, every draw does).
_CHURN_MOVES = ("create",) * 10 + ("grow",) * 30 + ("truncate",) * 10 + ("free",) * 10


def _hidden_churn(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """Sequences created, grown, truncated and freed in a secret order, at blocks of 1, 3 and 8 tokens."""
    for block_size in rng.sample((1, 3, 8), 3):
        h = _hidden_harness(PagedKVCache, rng, block_size)
        names = [f"s{k}" for k in range(rng.randint(3, 7))]
        live: list[str] = []
        for move in rng.sample(_CHURN_MOVES, len(_CHURN_MOVES)):
            if move == "create" or not live:
                fresh = [name for name in names if name not in live]
                if fresh:
                    live.append(rng.choice(fresh))
                    h.create(live[-1])
                continue
            seq = rng.choice(live)
            length, held = h.learner_length(seq), len(h.ledger.tables[seq])
            if move == "grow":
                room = (held + h.learner_num_free()) * block_size - length
                if room > 0:
                    _grown(h, seq, rng.randint(1, min(room, 3 * block_size)))
            elif move == "truncate":
                h.truncate(seq, rng.randint(0, length))
            else:
                h.free(seq)
                live.remove(seq)
        for seq in list(live):
            h.free(seq)


def _hidden_token_by_token(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """One sequence grown a token at a time across three block boundaries, rolled back to half and to
    nothing, grown again: at every block size from 1 to 7 tokens."""
    for block_size in rng.sample((1, 2, 3, 4, 7), 5):
        h = _hidden_harness(PagedKVCache, rng, block_size)
        h.create("t")
        for back_to_half in rng.sample((True, False), 2):
            for _ in range(min(3 * block_size + 1, h.num_blocks * block_size)):
                _grown(h, "t", 1)
            h.truncate("t", h.learner_length("t") // 2 if back_to_half else 0)
        h.free("t")


def _hidden_full_pool(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """The whole pool handed out to several sequences, then a refused reserve, then everything freed."""
    for block_size in rng.sample((2, 3, 4), 3):
        h = _hidden_harness(PagedKVCache, rng, block_size)
        seqs = [f"f{k}" for k in range(rng.randint(2, 4))]
        for seq in seqs:
            h.create(seq)
        while h.learner_num_free():
            _grown(h, rng.choice(seqs), rng.randint(1, h.learner_num_free()) * block_size)
        h.refused_reserve(rng.choice(seqs), block_size, free=0, needed=1)
        for seq in rng.sample(seqs, len(seqs)):
            h.free(seq)


def _hidden_story(PagedKVCache: type, rng: random.Random) -> None:  # noqa: N803
    """The visible call's whole story and model run again, at blocks of 2, 3 and 8 tokens (the visible
    call uses 4), its tensors drawn from the seed."""
    for block_size in rng.sample((2, 3, 8), 3):
        _story(PagedKVCache, rng, block_size, rng.getrandbits(31))


HIDDEN_KINDS = {
    "sequences created, grown, truncated and freed in a random order": _hidden_churn,
    "a sequence grown one token at a time, rolled back and grown again": _hidden_token_by_token,
    "the whole pool handed out, a refused reserve, then everything freed": _hidden_full_pool,
    "the visible scenarios and the model again, at block sizes other than 4": _hidden_story,
}


def _story(PagedKVCache: type, rng: random.Random, block_size: int, seed: int) -> None:  # noqa: N803
    """``CACHE_STORY`` then the model on a cache of 24 blocks of ``block_size`` tokens."""
    from ..device import DEVICE

    setup = _Setup(layers=2, num_blocks=24, block_size=block_size, kv_heads=2, head_dim=8)
    h = _Harness(PagedKVCache, setup, DEVICE, f"a cache of {setup.num_blocks} blocks of {block_size} tokens")
    h.generator.manual_seed(seed)
    for step, scenario in CACHE_STORY:
        h.step = step
        scenario(h, rng)
    _model_run(PagedKVCache, rng, block_size)


def _visible_story(PagedKVCache: type, rng: random.Random, *, seed: int) -> None:  # noqa: N803
    """The visible call's story: at blocks of 4 for the notebook's own seed, of a drawn size for another."""
    _story(PagedKVCache, rng, 4 if seed == 0 else rng.choice([2, 3, 4, 8]), seed)


@check(notebook="03_paged_kv_cache", builds="PagedKVCache")
def check_paged_kv_cache(PagedKVCache: type, *, seed: int = 0, hidden: bool = False) -> str | None:  # noqa: N803
    """Block accounting, placement through block tables, and the tiny Qwen3's logits on the cache.

    ``hidden=True`` (the hidden tests) runs every one of ``HIDDEN_KINDS`` instead, sized by ``seed``:
    the visible call in the same cell runs the visible story.
    """
    story = Story(visible=(functools.partial(_visible_story, seed=seed),), hidden=HIDDEN_KINDS)
    return story.tell(PagedKVCache, seed=seed, hidden=hidden)
