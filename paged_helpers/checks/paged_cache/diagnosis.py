"""Notebook 03's diagnosis: the hints that name the bug, from what the check found went wrong.

Each function reads one kind of failure (a wrong count, a wrong number of blocks, a refused fit, a
key or value stored in the wrong place, a wrong length) against the usual slips and says the rule
broken in the learner's terms. ``why_a_fit_was_refused`` probes fresh caches of the learner's class
to tell three miscounts apart; ``locate`` finds where a vector went so that a hint can say so.
"""

from __future__ import annotations

import torch

from ..reading.calls import call_learner
from ..reading.ledger import ceil_div
from ..speaking.failure import CheckFailed, Hint, NotImplementedYet, hint_text

__all__ = [
    "HISTORY_LAYOUT",
    "READ_THROUGH_OWN_TABLE",
    "RESERVE_COUNTS_HELD_BLOCKS",
    "RESERVE_IGNORES_PARTIAL_ROOM",
    "RESERVE_REFUSES_EXACT_FIT",
    "TRUNCATE_RELEASES_TOO_FEW",
    "WHOLE_HISTORY",
    "blocks_needed_hint",
    "call_naming_cause",
    "count_hint",
    "kept_hint",
    "lengths_hint",
    "locate",
    "overwritten",
    "placement_hint",
    "refused_fit",
    "reserve_hint",
    "truncate_table_hint",
    "why_a_fit_was_refused",
]


def call_naming_cause(what: str, function, *args, scenario: str, likely: str = "", **kwargs):
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


def why_a_fit_was_refused(cache_class: type, block_size: int) -> Hint:
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


# What update returns: the history to attend to, one row per sequence, heads before positions.
HISTORY_LAYOUT = Hint(
    "return one row of history per sequence in the batch, with heads before positions, the layout attention expects",
    "pool[blocks, :, offsets] is [B, span, kv_heads, head_dim]: return it .transpose(1, 2)",
)
WHOLE_HISTORY = Hint(
    "update returns the whole history, every position up to the highest one in the "
    "batch, not only the tokens just written",
    "span = int(positions.max()) + 1; gather positions torch.arange(span)",
)
READ_THROUGH_OWN_TABLE = Hint(
    "the write checked out, so the read side differs: each row must read its "
    "positions through its own sequence's block table",
    "gather pool[table_tensor[row, p // block_size], :, p % block_size] for each row",
)


def count_hint(block: int, holders: list, count: int) -> str:
    if not holders:
        return (
            f"block {block} is in no table but still has count {count}: it leaked. Every block a table lets "
            "go of (free, truncate, a failed reserve) must be released to the allocator."
        )
    return (
        f"block {block} is in the table of {holders} and should have count 1. Take blocks only with "
        "allocator.allocate() and give them back only with allocator.release()."
    )


def blocks_needed_hint(tokens: int, block_size: int, got) -> Hint:
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


def reserve_hint(before: int, length: int, new_tokens: int, block_size: int, got: int) -> str:
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


def kept_hint(grew: int) -> str:
    if grew > 0:
        return (
            f"reserve took {grew} block(s) before running out and kept them: half-reserved blocks nobody "
            "accounts for. Count the blocks needed and compare with allocator.num_free BEFORE allocating any."
        )
    return "a failed reserve must leave tables, lengths, counts and the free list unchanged."


def truncate_table_hint(length: int, block_size: int, kept: int, held_before: int) -> str:
    """truncate(seq, length) left ``kept`` blocks in a table that held ``held_before``."""
    keep = ceil_div(length, block_size)
    if kept == keep + 1:
        exactly = " exactly" if length % block_size == 0 else ""
        return (
            f"{length} tokens fit in {keep} block(s) of {block_size}{exactly}: keep blocks_needed(length) "
            "blocks, no more."
        )
    if kept == held_before:
        return "truncate must drop the blocks past blocks_needed(length) from the table (and release them)."
    return "keep the first blocks_needed(length) blocks of the table, in order."


def lengths_hint(got: int, start: int, new_tokens: int, layers: int, batch_end: int) -> str:
    """lengths[seq] is ``got`` after writing ``new_tokens`` from ``start`` (``batch_end``: the batch's highest end)."""
    if got == start:
        return (
            "lengths were not updated: when the last layer has written, lengths[seq] becomes the "
            "highest position written for seq + 1."
        )
    if got == start + new_tokens * layers:
        return "the new tokens were counted once per layer: commit lengths only at the last layer."
    if got == batch_end:
        return (
            "every sequence got the batch's highest position: each row has its own positions, so "
            "lengths[seq] = positions[row].max() + 1 for that sequence's row."
        )
    return "lengths[seq] counts the tokens written: the highest position written + 1."


def locate(pools: list[torch.Tensor], vector: torch.Tensor) -> list[tuple[int, int, int]]:
    """Every (layer, block, offset) whose [kv_heads, head_dim] slice equals ``vector``."""
    found = []
    for layer, pool in enumerate(pools):
        match = (pool.permute(0, 2, 1, 3) == vector).all(dim=-1).all(dim=-1)  # [N, block_size]
        found += [(layer, int(b), int(o)) for b, o in match.nonzero().tolist()]
    return found


def placement_hint(
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


def overwritten(occupant: tuple, home: tuple[int, int], which: str, block: int, offset: int, size: int):
    """(got, hint) when another new vector of the same write took this slot: ``occupant`` is its
    (sequence, position), ``home`` the (block, offset) where it belongs."""
    other_seq, other_p = occupant
    got = f"overwritten by the {which[0]} of {other_seq!r} at position {other_p}"
    home_block, home_offset = home
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


def refused_fit(
    error: CheckFailed, cache_class: type, block_size: int, where: str, missing: int, free: int
) -> CheckFailed:
    """``error`` (reserve raised MemoryError although ``missing`` <= ``free``) reworded with its cause."""
    refused_hint = why_a_fit_was_refused(cache_class, block_size)
    cause = hint_text(where, refused_hint)
    return error.reworded(
        f"{error}\n  likely cause: the table needed {missing} more {'block' if missing == 1 else 'blocks'} and "
        f"{free} {'was' if free == 1 else 'were'} free, so it fits: {cause}",
        hint=refused_hint.concept,
        concept=refused_hint.concept,
    )
