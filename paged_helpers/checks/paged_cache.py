"""check_paged_kv_cache: the paged KV cache, block by block and then on the real model (notebook 03).

The learner writes ``PagedKVCache(layers, num_blocks, block_size, kv_heads, head_dim, device,
dtype)`` with ``create``, ``blocks_needed``, ``reserve``, ``set_batch``, ``update``, ``free``
and ``truncate``, on top of their own ``BlockAllocator`` (``cache.allocator``).

The check drives it the way an engine does and keeps its own account of every block:

1. the pool's shapes and an empty cache;
2. ``blocks_needed`` on partial blocks and on exact block boundaries;
3. a scrambled free list (one-block sequences freed in a seeded random order), so that
   tables are non-contiguous and out of order, and ``free`` returns every block;
4. ``reserve`` block counts, relative to what a table already holds;
5. ``set_batch``'s ``table_tensor`` (row order, padding with real block ids);
6. ``update`` called directly: where each key and value lands in the pool
   (``table[p // block_size]``, offset ``p % block_size``), what it returns, and the
   committed ``lengths``, for single sequences and a batch at different lengths;
7. exhaustion in the middle of a multi-block reserve: MemoryError with nothing changed;
8. ``truncate`` back across a block boundary;
9. the course's tiny Qwen3 on the cache: chunked prefills, decode steps of a batch of
   sequences at different lengths, a truncation, each step's logits compared with a
   from-scratch run; then everything is freed and every block must be free again.

After every step the accounting is exact: each block in a table has count 1 (nothing is
shared before notebook 04), every other block is on the free list exactly once.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import torch

from ..pool_invariant import PoolReading
from .report import (
    CacheSnapshot,
    CheckFailed,
    Hint,
    NotImplementedYet,
    call_learner,
    ceil_div,
    check,
    fail,
    hint_text,
    learner_dict,
    learner_int,
    learner_int_list,
    run_hidden_scenarios,
    torch_unhooked,
)
from .scratch import logit_gap, logit_tolerance, logits_match

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
            raise CheckFailed(f"{error}\n  likely cause: {likely}") from error.__cause__
        raise


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal with every __torch_function__ override off (learner tensors may carry one)."""
    with torch_unhooked():
        return bool(torch.equal(a, b))


def _close_plain(got: torch.Tensor, want: torch.Tensor) -> bool:
    with torch_unhooked():
        return bool(torch.allclose(got.float().cpu(), want.float().cpu(), atol=1e-6, rtol=0))


# --------------------------------------------------------------------------- accounting


def _verify_accounting(cache, num_blocks: int, scenario: str) -> None:
    """Every block in a table has count 1; every other block is free, once; num_free agrees."""
    tables = learner_dict(cache.tables, "cache.tables", scenario, learner_int_list)
    held = Counter(block for table in tables.values() for block in table)
    reading = PoolReading.of(cache.allocator, scenario)
    refs, free = list(reading.refs), list(reading.free)
    twice = sorted(block for block, count in held.items() if count > 1)
    if twice:
        owners = {block: [seq for seq, table in tables.items() if block in table] for block in twice}
        fail(
            f"{scenario}: block ownership",
            "each block in at most one table (nothing is shared yet)",
            f"tables {tables}",
            f"block(s) {owners} appear more than once: a block was handed out twice. "
            "Blocks must come from allocator.allocate(), which takes them off the free list.",
        )
    for block in range(num_blocks):
        if refs[block] != held[block]:
            where = [seq for seq, table in tables.items() if block in table]
            if held[block] == 0:
                hint = (
                    f"block {block} is in no table but still has count {refs[block]}: it leaked. Every block "
                    "a table lets go of (free, truncate, a failed reserve) must be released to the allocator."
                )
            else:
                hint = (
                    f"block {block} is in the table of {where} and should have count 1. Take blocks "
                    "only with allocator.allocate() and give them back only with allocator.release()."
                )
            fail(f"{scenario}: the reference count of block {block}", held[block], refs[block], hint)
    should_be_free = sorted(block for block in range(num_blocks) if held[block] == 0)
    if sorted(free) != should_be_free:
        fail(
            f"{scenario}: the allocator's free list",
            should_be_free,
            sorted(free),
            "the free list must hold exactly the blocks that no table uses, each once.",
        )
    if not reading.num_free_agrees():
        fail(
            f"{scenario}: allocator.num_free",
            len(should_be_free),
            reading.num_free,
            "num_free counts the blocks no table uses.",
        )


def _verify_table_length(cache, seq, expected: int, scenario: str, hint: str) -> None:
    got = len(cache.tables[seq]) if seq in cache.tables else "no table"
    if got != expected:
        fail(f"{scenario}: blocks in the table of {seq!r}", expected, got, hint)


# --------------------------------------------------------------------------- construction


def _new_cache(cache_class: type, setup: _Setup, device: torch.device, scenario: str):
    call = (
        f"PagedKVCache(layers={setup.layers}, num_blocks={setup.num_blocks}, block_size={setup.block_size}, "
        f"kv_heads={setup.kv_heads}, head_dim={setup.head_dim})"
    )
    cache = _call(
        call,
        cache_class,
        setup.layers,
        setup.num_blocks,
        setup.block_size,
        setup.kv_heads,
        setup.head_dim,
        device=device,
        dtype=torch.float32,
        scenario=scenario,
    )
    for name in ("k_pool", "v_pool", "block_size", "allocator", "tables", "lengths"):
        if not hasattr(cache, name):
            fail(
                f"{scenario}: the attribute `{name}`",
                "present",
                "missing",
                "keep the chapter's attribute names: the model, widgets and later notebooks use them.",
            )
    shape = (setup.num_blocks, setup.kv_heads, setup.block_size, setup.head_dim)
    for name in ("k_pool", "v_pool"):
        pools = getattr(cache, name)
        if len(pools) != setup.layers:
            fail(f"{scenario}: len({name})", setup.layers, len(pools), "one pool tensor per layer.")
        if tuple(pools[0].shape) != shape:
            fail(
                f"{scenario}: {name}[0].shape",
                shape,
                tuple(pools[0].shape),
                "each layer's pool is [num_blocks, kv_heads, block_size, head_dim].",
            )
    if cache.tables or cache.lengths:
        fail(
            f"{scenario}: a new cache",
            "no sequences",
            f"tables {cache.tables}, lengths {cache.lengths}",
            "tables and lengths start empty.",
        )
    _verify_accounting(cache, setup.num_blocks, f"{scenario}: a new cache")
    return cache


def _check_blocks_needed(cache, block_size: int) -> None:
    # Partial blocks first, then exact boundaries, then zero: each slip fails where its hint fits best.
    counts = [1, block_size + 1, 2 * block_size + 1, 3 * block_size - 1, block_size, 2 * block_size, 0]
    for tokens in counts:
        scenario = f"blocks_needed({tokens}) with block_size {block_size}"
        got = _call(f"blocks_needed({tokens})", cache.blocks_needed, tokens, scenario=scenario)
        expected = ceil_div(tokens, block_size)
        if got == expected:
            continue
        round_up = "blocks_needed returns -(-tokens // block_size): tokens / block_size rounded up"
        if tokens % block_size and got == tokens // block_size:
            hint = Hint(
                f"{tokens} token(s) leave a partial last block ({tokens % block_size} token(s)), which still "
                "needs a block of its own",
                round_up,
            )
        elif tokens % block_size == 0 and got == tokens // block_size + 1:
            hint = Hint(
                f"{tokens} = {tokens // block_size} x {block_size} lies exactly on a block boundary: the "
                "blocks are all full and no extra one is needed",
                round_up,
            )
        elif tokens == 0:
            hint = Hint("an empty sequence needs no block at all", round_up)
        else:
            hint = Hint("the number of blocks is tokens / block_size, rounded up", round_up)
        fail(scenario, expected, got, hint)


# --------------------------------------------------------------------------- sequences


def _create(cache, seq, num_blocks: int, scenario: str) -> None:
    _call(f"create({seq!r})", cache.create, seq, scenario=scenario)
    tables = learner_dict(cache.tables, "cache.tables", scenario, learner_int_list)
    lengths = learner_dict(cache.lengths, "cache.lengths", scenario, learner_int)
    if tables.get(seq) != [] or lengths.get(seq) != 0:
        fail(
            f"{scenario}: after create({seq!r})",
            "tables[seq] == [] and lengths[seq] == 0",
            f"tables {cache.tables.get(seq, 'missing')}, lengths {cache.lengths.get(seq, 'missing')}",
            "create starts an empty sequence: no blocks until reserve asks for them.",
        )


def _free(cache, seq, num_blocks: int, scenario: str) -> None:
    _call(f"free({seq!r})", cache.free, seq, scenario=scenario)
    if seq in cache.tables or seq in cache.lengths:
        fail(
            f"{scenario}: after free({seq!r})",
            f"{seq!r} gone from tables and lengths",
            f"still in {'tables' if seq in cache.tables else 'lengths'}",
            "free must forget the sequence: remove it from tables and lengths after releasing its blocks.",
        )
    _verify_accounting(cache, num_blocks, f"{scenario}: after free({seq!r})")


def _reserve(cache, seq, new_tokens: int, num_blocks: int, scenario: str) -> None:
    """reserve; the table must then hold exactly blocks_needed(length + new_tokens) blocks (never fewer)."""
    block_size = cache.block_size
    before = len(learner_int_list(cache.tables[seq], f"tables[{seq!r}]", scenario))
    length = learner_int(cache.lengths[seq], f"lengths[{seq!r}]", scenario)
    expected = max(before, ceil_div(length + new_tokens, block_size))
    if hasattr(cache, "blocks_to_add"):
        to_add = _call(
            f"blocks_to_add({seq!r}, {new_tokens})", cache.blocks_to_add, seq, new_tokens, scenario=scenario
        )
        if learner_int(to_add, f"blocks_to_add({seq!r}, {new_tokens})", scenario) != expected - before:
            fail(
                f"{scenario}: blocks_to_add({seq!r}, {new_tokens}) "
                f"with length {length} and {before} block(s)",
                expected - before,
                to_add,
                "the table needs blocks_needed(length + new_tokens) blocks in total; the blocks it "
                "already has count, and it never needs a negative number.",
            )
    free = cache.allocator.num_free
    try:
        _call(f"reserve({seq!r}, {new_tokens})", cache.reserve, seq, new_tokens, scenario=scenario)
    except NotImplementedYet:
        raise
    except CheckFailed as error:
        if not isinstance(error.__cause__, MemoryError):
            raise
        cause = hint_text(scenario, _why_a_fit_was_refused(type(cache), block_size))
        raise CheckFailed(
            f"{error}\n  likely cause: the table needed {expected - before} more block(s) and {free} were "
            f"free, so it fits: {cause}"
        ) from error.__cause__
    got = len(learner_int_list(cache.tables[seq], f"tables[{seq!r}]", scenario))
    if got != expected:
        end = length + new_tokens
        if got == before + ceil_div(new_tokens, block_size) and got != expected:
            hint = (
                f"reserve appended blocks_needed({new_tokens}) blocks on top of the {before} already there. "
                f"It must make positions [{length}, {end}) exist: {expected} block(s) in total, "
                "counting those the table already has."
            )
        elif end % block_size == 0 and got == expected + 1:
            hint = (
                f"length + new_tokens = {end} = {end // block_size} x {block_size} ends exactly on a block "
                "boundary: the last block is full, no extra block is needed."
            )
        elif end % block_size and got == expected - 1:
            hint = f"{end} tokens leave a partial last block, which needs a block too: round up."
        else:
            hint = (
                f"after reserve the table must cover positions [0, {end}): blocks_needed({end}) = {expected} "
                "block(s) (reserve never removes blocks)."
            )
        fail(
            f"{scenario}: reserve({seq!r}, {new_tokens}) at length {length} with {before} block(s)",
            f"{expected} block(s)",
            f"{got} block(s): {cache.tables[seq]}",
            hint,
        )
    _verify_accounting(cache, num_blocks, f"{scenario}: after reserve({seq!r}, {new_tokens})")


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


def _scramble_free_list(cache, num_blocks: int, rng: random.Random, scenario: str) -> None:
    """Take every block with one-block sequences, then free them in a random order."""
    fillers = [f"filler-{index}" for index in range(num_blocks)]
    for filler in fillers:
        _create(cache, filler, num_blocks, scenario)
        _reserve(cache, filler, 1, num_blocks, scenario)
    for index in rng.sample(range(num_blocks), num_blocks):
        _free(cache, fillers[index], num_blocks, scenario)
    if cache.tables:
        fail(
            f"{scenario}: after freeing every sequence",
            "tables == {}",
            cache.tables,
            "free removes the table.",
        )


# --------------------------------------------------------------------------- set_batch


def _set_batch(cache, seqs: list, num_blocks: int, scenario: str) -> None:
    _call(f"set_batch({seqs})", cache.set_batch, list(seqs), scenario=scenario)
    where = f"{scenario}: after set_batch({seqs})"
    if list(getattr(cache, "batch", [])) != list(seqs):
        fail(
            f"{where}: cache.batch",
            list(seqs),
            getattr(cache, "batch", "missing"),
            "set_batch keeps the sequences in the order given: row i of the batch is seqs[i].",
        )
    tensor = getattr(cache, "table_tensor", None)
    tables = [learner_int_list(cache.tables[seq], f"cache.tables[{seq!r}]", scenario) for seq in seqs]
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
            fail(
                f"{where}: row {row} of table_tensor (sequence {seq!r})",
                f"starts with {table}",
                rows[row],
                hint,
            )
        padding = rows[row][len(table) :]
        if any(not 0 <= block < num_blocks for block in padding):
            fail(
                f"{where}: the padding of row {row} (sequence {seq!r})",
                f"real block ids in 0..{num_blocks - 1}",
                padding,
                "pad shorter rows with a real block id such as 0. Padded entries are only read at "
                "positions the causal mask hides, but a kernel (notebook 07) must never see an id like -1.",
            )


# --------------------------------------------------------------------------- update, called directly


def _locate(pools: list[torch.Tensor], vector: torch.Tensor) -> list[tuple[int, int, int]]:
    """Every (layer, block, offset) whose [kv_heads, head_dim] slice equals ``vector``."""
    found = []
    for layer, pool in enumerate(pools):
        match = (pool.permute(0, 2, 1, 3) == vector).all(dim=-1).all(dim=-1)  # [N, block_size]
        found += [(layer, int(b), int(o)) for b, o in match.nonzero().tolist()]
    return found


def _placement_hint(
    cache,
    row_table: list[int],
    seq,
    layer: int,
    position: int,
    which: str,
    found: list[tuple[int, int, int]],
    batch_tables: dict,
) -> str:
    block_size = cache.block_size
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


def _verify_placement(cache, write: _Write, layer: int, which: str, new: torch.Tensor, where: str) -> None:
    """Every new vector of ``new`` [B, kv_heads, T, head_dim] sits at its position's home in the pool."""
    pools = getattr(cache, which)
    size = cache.block_size
    for row, seq in enumerate(write.batch):
        for t in range(write.new_tokens):
            p = write.starts[row] + t
            block, offset = write.home(seq, p, size)
            if _same(pools[layer][block, :, offset], new[row, :, t]):
                continue
            found = _locate(pools, new[row, :, t])
            got = f"found at (layer, block, offset) {found[:3]}" if found else "not in the pool"
            hint = _placement_hint(cache, write.tables[seq], seq, layer, p, which, found, write.owners)
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


def _verify_lengths(cache, write: _Write, layers: int, where: str) -> None:
    """After every layer has written, lengths[seq] is one past the highest position written for seq."""
    for row, seq in enumerate(write.batch):
        start = write.starts[row]
        expected, got = start + write.new_tokens, learner_int(cache.lengths[seq], f"lengths[{seq!r}]", where)
        if got == expected:
            continue
        if got == start:
            hint = (
                "lengths were not updated: when the last layer has written, lengths[seq] becomes the "
                "highest position written for seq + 1."
            )
        elif got == start + write.new_tokens * layers:
            hint = "the new tokens were counted once per layer: commit lengths only at the last layer."
        elif got == max(s + write.new_tokens for s in write.starts):
            hint = (
                "every sequence got the batch's highest position: each row has its own positions, so "
                "lengths[seq] = positions[row].max() + 1 for that sequence's row."
            )
        else:
            hint = "lengths[seq] counts the tokens written: the highest position written + 1."
        fail(f"{where}: lengths[{seq!r}] after every layer has written", expected, got, hint)


def _direct_update(
    cache,
    setup: _Setup,
    batch: list,
    new_tokens: int,
    written: dict,
    generator: torch.Generator,
    scenario: str,
) -> None:
    """Call update for every layer with known k/v; check placement, returned history and lengths.

    ``written[seq]`` is [2 (k, v), layers, kv_heads, positions, head_dim]: what the check wrote so far.
    """
    device = cache.k_pool[0].device
    starts = [cache.lengths[seq] for seq in batch]
    positions = torch.tensor([[s + t for t in range(new_tokens)] for s in starts], device=device)  # [B, T]
    for seq in batch:
        _reserve(cache, seq, new_tokens, setup.num_blocks, scenario)
    _set_batch(cache, batch, setup.num_blocks, scenario)
    write = _Write(
        batch,
        starts,
        new_tokens,
        tables={seq: list(cache.tables[seq]) for seq in batch},
        owners={seq: list(table) for seq, table in cache.tables.items()},
    )
    shape = (len(batch), setup.kv_heads, new_tokens, setup.head_dim)
    new_k = [torch.randn(shape, generator=generator).to(device) for _ in range(setup.layers)]
    new_v = [torch.randn(shape, generator=generator).to(device) for _ in range(setup.layers)]
    empty = torch.zeros(2, setup.layers, setup.kv_heads, 0, setup.head_dim, device=device)
    for row, seq in enumerate(batch):
        fresh = torch.stack([torch.stack([k[row] for k in new_k]), torch.stack([v[row] for v in new_v])])
        written[seq] = torch.cat([written.get(seq, empty)[:, :, :, : starts[row]], fresh], dim=3)
    at = ", ".join(f"{seq!r} at {_positions(s, new_tokens)}" for seq, s in zip(batch, starts, strict=True))
    where = f"{scenario}: update(layer, k, v, positions) writing {at}"
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
        _verify_placement(cache, write, layer, "k_pool", new_k[layer], where)
        _verify_placement(cache, write, layer, "v_pool", new_v[layer], where)
        _check_reply(reply, batch, written, layer, where)
    _verify_lengths(cache, write, setup.layers, where)


def _check_reply(reply, batch: list, written: dict, layer: int, where: str) -> None:
    """update's reply holds, for each row, every position written so far with the right key and value."""
    if not isinstance(reply, tuple) or len(reply) != 3:
        fail(
            f"{where}: what update returned (layer {layer})",
            "(keys, values, key_positions)",
            type(reply).__name__,
            "update returns the history to attend to: keys, values and their positions.",
        )
    keys, values, key_positions = reply
    _, _, kv_heads, _, head_dim = written[batch[0]].shape
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
    if not isinstance(key_positions, torch.Tensor) or key_positions.shape not in (
        (span,),
        (len(batch), span),
    ):
        fail(
            f"{where}: the key positions update returned (layer {layer})",
            f"a tensor [{span}] (or [{len(batch)}, {span}]): the position of each returned key",
            tuple(key_positions.shape) if isinstance(key_positions, torch.Tensor) else repr(key_positions),
            "return torch.arange(span): the history is positions 0..span-1 of every sequence.",
        )
    if key_positions.ndim == 1:
        key_positions = key_positions.expand(len(batch), -1)
    for row, seq in enumerate(batch):
        history = written[seq]  # [2, layers, kv_heads, length, head_dim]
        returned = {int(p): j for j, p in enumerate(key_positions[row].tolist())}
        for p in range(history.shape[3]):
            if p not in returned:
                fail(
                    f"{where}: the history returned for {seq!r} (row {row}, layer {layer})",
                    f"a key for every position 0..{history.shape[3] - 1}",
                    f"no key for position {p} (span {span})",
                    Hint(
                        "update returns the whole history, every position up to the highest one in the batch, "
                        "not only the tokens just written",
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
                            "the write checked out, so the read side differs: each row must read its positions "
                            "through its own sequence's block table",
                            "gather pool[table_tensor[row, p // block_size], :, p % block_size] for each row",
                        ),
                    )


# --------------------------------------------------------------------------- exhaustion and truncate


def _exhaustion(cache, setup: _Setup, seq, scenario: str) -> None:
    """Leave exactly 2 free blocks, then a reserve needing more must change nothing."""
    block_size = cache.block_size
    _create(cache, "hog", setup.num_blocks, scenario)
    _reserve(cache, "hog", (cache.allocator.num_free - 2) * block_size, setup.num_blocks, scenario)
    length, held = cache.lengths[seq], len(cache.tables[seq])
    new_tokens = (held + 4) * block_size - length  # needs 4 more blocks; only 2 are free
    before = CacheSnapshot.of(cache)
    where = (
        f"{scenario}: reserve({seq!r}, {new_tokens}) needs 4 more blocks but only 2 are free "
        "(exhaustion in the middle of a multi-block reserve)"
    )
    try:
        cache.reserve(seq, new_tokens)
    except MemoryError:
        pass
    except NotImplementedError:
        _call("reserve", cache.reserve, seq, new_tokens, scenario=where)
    except Exception as error:
        fail(
            where,
            "MemoryError",
            f"{type(error).__name__}: {error}",
            "raise MemoryError (a scheduler catches it to wait or preempt) before allocating anything.",
        )
    else:
        fail(
            where,
            "MemoryError",
            f"no exception; the table is now {cache.tables[seq]}",
            "when the pool cannot supply every block, reserve must raise MemoryError.",
        )
    after = CacheSnapshot.of(cache)
    if after != before:
        grew = len(after.tables.get(seq, [])) - len(before.tables[seq])
        hint = (
            f"reserve took {grew} block(s) before running out and kept them: half-reserved blocks nobody "
            "accounts for. Count the blocks needed and compare with allocator.num_free BEFORE allocating any."
            if grew > 0
            else "a failed reserve must leave tables, lengths, counts and the free list unchanged."
        )
        fail(
            f"{where}: the cache after the MemoryError",
            "exactly as before",
            f"table {after.tables.get(seq)} (was {before.tables[seq]}), free {after.free} (was {before.free})",
            hint,
        )
    _verify_accounting(cache, setup.num_blocks, f"{where}, after the MemoryError")
    fits = (held + 2) * block_size - length  # exactly the 2 free blocks
    _reserve(
        cache,
        seq,
        fits,
        setup.num_blocks,
        f"{scenario}: reserve({seq!r}, {fits}) needs exactly the 2 free blocks (it fits)",
    )
    _free(cache, "hog", setup.num_blocks, scenario)


def _truncate(cache, seq, length: int, num_blocks: int, scenario: str) -> None:
    before = learner_int_list(cache.tables[seq], f"tables[{seq!r}]", scenario)
    old_length = learner_int(cache.lengths[seq], f"lengths[{seq!r}]", scenario)
    _call(f"truncate({seq!r}, {length})", cache.truncate, seq, length, scenario=scenario)
    keep = ceil_div(length, cache.block_size)
    where = f"{scenario}: truncate({seq!r}, {length}) from length {old_length} with table {before}"
    got = learner_int_list(cache.tables[seq], f"tables[{seq!r}]", where)
    if got != before[:keep]:
        if len(got) == keep + 1:
            hint = (
                f"{length} tokens fit in {keep} block(s) of {cache.block_size}"
                f"{' exactly' if length % cache.block_size == 0 else ''}: keep blocks_needed(length) blocks, "
                "no more."
            )
        elif len(got) == len(before):
            hint = (
                "truncate must drop the blocks past blocks_needed(length) from the table (and release them)."
            )
        else:
            hint = "keep the first blocks_needed(length) blocks of the table, in order."
        fail(f"{where}: the table", before[:keep], got, hint)
    if learner_int(cache.lengths[seq], f"lengths[{seq!r}]", where) != length:
        fail(f"{where}: lengths[{seq!r}]", length, cache.lengths[seq], "truncate sets the sequence's length.")
    _verify_accounting(cache, num_blocks, f"{where}, after truncate")


# --------------------------------------------------------------------------- the real model


def _model_run(cache_class: type, rng: random.Random, block_size: int) -> None:
    from ..model import tiny_qwen3

    model = tiny_qwen3(seed=0)
    config = model.config
    setup = _Setup(config.num_hidden_layers, 40, block_size, config.num_key_value_heads, config.head_dim)
    scenario = "the tiny Qwen3 on your cache"
    cache = _new_cache(cache_class, setup, model.device, scenario)
    _scramble_free_list(cache, setup.num_blocks, rng, f"{scenario}, scrambling the free list")
    b = block_size
    prompt_lengths = {"s0": 2 * b + 1, "s1": b, "s2": 3 * b - 1, "s3": 1}
    tokens = {seq: [rng.randrange(config.vocab_size) for _ in range(n)] for seq, n in prompt_lengths.items()}
    for seq in tokens:
        _create(cache, seq, setup.num_blocks, scenario)

    def step(new: dict, label: str) -> None:
        """One forward pass of the sequences in ``new`` (same count each), compared with from scratch."""
        seqs = list(new)
        count = len(new[seqs[0]])
        lengths_before = [cache.lengths[seq] for seq in seqs]
        where = f"{scenario}, {label}: batch {seqs} at lengths {lengths_before}, {count} new token(s) each"
        for seq in seqs:
            _reserve(cache, seq, count, setup.num_blocks, where)
        _set_batch(cache, seqs, setup.num_blocks, where)
        positions = torch.tensor([[n + t for t in range(count)] for n in lengths_before], device=model.device)
        with torch.no_grad():
            logits = _call(
                "the model's forward pass",
                model,
                torch.tensor([new[s] for s in seqs], device=model.device),
                positions,
                cache=cache,
                scenario=where,
            )  # [B, T, vocab]
        for row, seq in enumerate(seqs):
            full = tokens[seq][: lengths_before[row]] + new[seq]
            scratch = model.logits_from_scratch([full])[0][lengths_before[row] :]  # [T, vocab]
            gap = logit_gap(logits[row], scratch)
            if not logits_match(gap, model.device, logits.dtype):
                fail(
                    f"{where}: the logits of {seq!r} (row {row})",
                    f"those of running its {len(full)} tokens from scratch "
                    f"(within {logit_tolerance(model.device, logits.dtype)})",
                    f"a difference of {gap:.3g}",
                    "the history update returned for this sequence is not its own. Check: the "
                    "table_tensor row of each sequence (set_batch order), table[p // block_size] and "
                    "p % block_size for every position of every row, span = highest position in the "
                    "batch + 1, and lengths per sequence.",
                )
            tokens[seq] = full
            if cache.lengths[seq] != len(full):
                fail(
                    f"{where}: lengths[{seq!r}]",
                    len(full),
                    cache.lengths[seq],
                    "after a forward pass, lengths[seq] counts every token written for seq.",
                )
            _verify_table_length(
                cache,
                seq,
                ceil_div(len(full), b),
                where,
                "a sequence holds blocks_needed(length) blocks after a step.",
            )
        _verify_accounting(cache, setup.num_blocks, where)

    # Prefill, interleaved and in chunks, so that tables are non-contiguous and chunks end mid-block.
    prompts = {seq: list(t) for seq, t in tokens.items()}
    tokens = {seq: [] for seq in prompts}
    step({"s2": prompts["s2"][: b + 2]}, "prefill of s2, first chunk")
    step({"s0": prompts["s0"]}, "prefill of s0")
    step({"s1": prompts["s1"]}, "prefill of s1 (exactly one full block)")
    step({"s2": prompts["s2"][b + 2 :]}, "prefill of s2, second chunk (starts mid-block)")
    step({"s3": prompts["s3"]}, "prefill of s3 (one token)")
    order = [["s2", "s0", "s3", "s1"], ["s3", "s2", "s0"], ["s1", "s0", "s2", "s3"], ["s0", "s1", "s2", "s3"]]
    for index, batch in enumerate(order):
        step({seq: [rng.randrange(config.vocab_size)] for seq in batch}, f"decode step {index + 1}")
    cut = 2 * b - 1
    _truncate(cache, "s2", cut, setup.num_blocks, f"{scenario}, rolling s2 back across a block boundary")
    tokens["s2"] = tokens["s2"][:cut]
    for index in range(2):
        step(
            {seq: [rng.randrange(config.vocab_size)] for seq in ["s0", "s2"]},
            f"decode step {index + 1} after truncate",
        )
    for seq in list(prompts):
        _free(cache, seq, setup.num_blocks, f"{scenario}, freeing every sequence at the end")
    if cache.allocator.num_free != setup.num_blocks:
        fail(
            f"{scenario}: after freeing every sequence",
            f"{setup.num_blocks} free blocks",
            cache.allocator.num_free,
            "every block must be back on the free list: nothing may leak.",
        )


# --------------------------------------------------------------------------- the check


# --------------------------------------------------------------------------- hidden scenarios


def _hidden_setup(rng: random.Random, block_sizes: tuple[int, ...]) -> _Setup:
    return _Setup(layers=1, num_blocks=rng.randint(10, 30), block_size=rng.choice(block_sizes), kv_heads=1, head_dim=2)


def _hidden_churn(cache_class: type, rng: random.Random) -> None:
    """Sequences created, grown (as if written), truncated and freed in a secret order."""
    from ..device import DEVICE

    scenario = "a hidden scenario"
    setup = _hidden_setup(rng, (1, 2, 3, 5, 8))
    cache = _new_cache(cache_class, setup, DEVICE, scenario)
    names = [f"s{k}" for k in range(rng.randint(3, 7))]
    live: list[str] = []
    for _ in range(60):
        move = rng.choice(["create", "grow", "grow", "grow", "truncate", "free"])
        if move == "create" or not live:
            fresh = [name for name in names if name not in live]
            if fresh:
                seq = rng.choice(fresh)
                _create(cache, seq, setup.num_blocks, scenario)
                live.append(seq)
            continue
        seq = rng.choice(live)
        length, held = cache.lengths[seq], len(cache.tables[seq])
        if move == "grow":
            room = (held + cache.allocator.num_free) * setup.block_size - length
            if room <= 0:
                continue
            new_tokens = rng.randint(0, min(room, 3 * setup.block_size))
            _reserve(cache, seq, new_tokens, setup.num_blocks, scenario)
            cache.lengths[seq] = length + new_tokens  # as if the forward pass had written them
        elif move == "truncate":
            _truncate(cache, seq, rng.randint(0, length), setup.num_blocks, scenario)
        else:
            _free(cache, seq, setup.num_blocks, scenario)
            live.remove(seq)
    for seq in list(live):
        _free(cache, seq, setup.num_blocks, scenario)


def _hidden_token_by_token(cache_class: type, rng: random.Random) -> None:
    """One sequence grown a token at a time across block boundaries, rolled back to 0, grown again."""
    from ..device import DEVICE

    scenario = "a hidden scenario"
    setup = _hidden_setup(rng, (1, 2, 3, 4, 7))
    cache = _new_cache(cache_class, setup, DEVICE, scenario)
    _create(cache, "t", setup.num_blocks, scenario)
    for _round in range(2):
        for _ in range(rng.randint(1, min(3 * setup.block_size + 1, setup.num_blocks * setup.block_size))):
            _reserve(cache, "t", 1, setup.num_blocks, scenario)
            cache.lengths["t"] += 1
        _truncate(cache, "t", rng.choice([0, cache.lengths["t"] // 2]), setup.num_blocks, scenario)
    _free(cache, "t", setup.num_blocks, scenario)


def _hidden_full_pool(cache_class: type, rng: random.Random) -> None:
    """The whole pool handed out to several sequences, then a refused reserve, then everything freed."""
    from ..device import DEVICE

    scenario = "a hidden scenario"
    setup = _hidden_setup(rng, (2, 3, 4))
    cache = _new_cache(cache_class, setup, DEVICE, scenario)
    seqs = [f"f{k}" for k in range(rng.randint(2, 4))]
    for seq in seqs:
        _create(cache, seq, setup.num_blocks, scenario)
    while cache.allocator.num_free:
        seq = rng.choice(seqs)
        tokens = rng.randint(1, cache.allocator.num_free) * setup.block_size
        _reserve(cache, seq, tokens, setup.num_blocks, scenario)
        cache.lengths[seq] += tokens
    seq = rng.choice(seqs)
    before = CacheSnapshot.of(cache)
    try:
        cache.reserve(seq, setup.block_size)
    except MemoryError:
        pass
    except NotImplementedError:
        _call("reserve", cache.reserve, seq, setup.block_size, scenario=scenario)
    except Exception as error:
        fail(scenario, "MemoryError", f"{type(error).__name__}", "an exhausted pool raises MemoryError.")
    else:
        fail(scenario, "MemoryError", "no exception", "a reserve that needs a block when none is free must raise MemoryError.")
    changed = before.changes(CacheSnapshot.of(cache))
    if changed:
        fail(scenario, "nothing changed by the refused reserve", "; ".join(changed), "check before allocating anything.")
    for seq in rng.sample(seqs, len(seqs)):
        _free(cache, seq, setup.num_blocks, scenario)


HIDDEN_KINDS = {
    "sequences created, grown, truncated and freed in a random order": _hidden_churn,
    "a sequence grown one token at a time, rolled back and grown again": _hidden_token_by_token,
    "the whole pool handed out, a refused reserve, then everything freed": _hidden_full_pool,
}


@check(notebook="03_paged_kv_cache", builds="PagedKVCache")
def check_paged_kv_cache(PagedKVCache: type, *, seed: int = 0, hidden: bool = False) -> None:  # noqa: N803
    """Block accounting, placement through block tables, and the tiny Qwen3's logits on the cache.

    ``hidden=True`` (the hidden tests) also runs two of ``HIDDEN_KINDS``, chosen and sized by ``seed``.
    """
    if hidden:
        run_hidden_scenarios(HIDDEN_KINDS, seed, 2, PagedKVCache)
    rng = random.Random(seed)
    block_size = 4 if seed == 0 else rng.choice([2, 3, 4, 8])
    generator = torch.Generator().manual_seed(seed)
    setup = _Setup(layers=2, num_blocks=24, block_size=block_size, kv_heads=2, head_dim=8)
    from ..device import DEVICE

    scenario = f"a cache of {setup.num_blocks} blocks of {block_size} tokens"
    cache = _new_cache(PagedKVCache, setup, DEVICE, scenario)
    _check_blocks_needed(cache, block_size)
    duplicate = f"{scenario}: create('a') twice"
    _create(cache, "a", setup.num_blocks, scenario)
    try:
        cache.create("a")
    except ValueError:
        pass
    except Exception as error:
        fail(
            duplicate,
            "ValueError",
            f"{type(error).__name__}: {error}",
            "raise ValueError for an existing sequence.",
        )
    else:
        fail(
            duplicate,
            "ValueError",
            "no exception",
            "creating a sequence that exists would silently drop its table (and leak its blocks): "
            "raise ValueError.",
        )
    _free(cache, "a", setup.num_blocks, scenario)

    _scramble_free_list(cache, setup.num_blocks, rng, f"{scenario}, scrambling the free list")
    for seq in ("a", "b"):
        _create(cache, seq, setup.num_blocks, scenario)
    b = block_size
    for seq, new_tokens in (("a", b), ("b", 1), ("a", b + 1), ("a", 2 * b), ("b", 2 * b + 1), ("a", 0)):
        _reserve(cache, seq, new_tokens, setup.num_blocks, f"{scenario}, growing two interleaved tables")
    _set_batch(
        cache, ["b", "a"], setup.num_blocks, f"{scenario}, two sequences with tables of 3 and 2 blocks"
    )

    written: dict = {}
    _direct_update(cache, setup, ["a"], 2 * b - 1, written, generator, f"{scenario}, prefill of 'a'")
    _direct_update(cache, setup, ["b"], b + 1, written, generator, f"{scenario}, prefill of 'b'")
    _direct_update(
        cache,
        setup,
        ["b", "a"],
        1,
        written,
        generator,
        f"{scenario}, one decode step of a batch at different lengths",
    )
    _direct_update(
        cache,
        setup,
        ["a", "b"],
        1,
        written,
        generator,
        f"{scenario}, a second decode step, batch order swapped",
    )
    _exhaustion(cache, setup, "a", scenario)
    _truncate(cache, "a", b, setup.num_blocks, f"{scenario}, rolling 'a' back to exactly one full block")
    _direct_update(
        cache, setup, ["a", "b"], 2, written, generator, f"{scenario}, writing again after truncate"
    )
    for seq in ("a", "b"):
        _free(cache, seq, setup.num_blocks, f"{scenario}, freeing everything")
    _model_run(PagedKVCache, rng, block_size)
