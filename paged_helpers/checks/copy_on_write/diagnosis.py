"""What notebook 04's checks say when something went wrong: the hints, and the functions that
name the bug from what the check saw.

Hints come in two tiers (``speaking.failure.Hint``): the idea first, the concrete change when the
same failure repeats. ``with_cause`` puts this failure's own numbers in front of a hint's idea.
Nothing here calls the learner's code; ``diagnose_fork`` only reads the cache it is handed.
"""

from __future__ import annotations

from typing import Any

import torch

from ..reading.strict import torch_unhooked
from ..speaking.failure import Hint

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
    "a reserve that cannot be completed must change nothing, so it has to know what it needs before it takes anything",
    "count the copies and the new blocks first, compare with allocator.num_free, and raise MemoryError "
    "before allocating or copying anything",
)
LEAKED_AFTER_LOGITS = (
    "the logits were right but blocks leaked: after copy-on-write, release the shared block once "
    "(the sequence no longer points at it)"
)


def with_cause(cause: str, hint: Hint) -> Hint:
    """``hint`` with this failure's cause in front of its concept."""
    return Hint(f"{cause}: {hint.concept}", hint.change)


def still_shared_hint(*, index: int, written: range, table_before: int, block: int, length: int) -> Hint:
    """Why table index ``index``, about to be written, is still shared after reserve.

    ``written`` are the table indices the write touches; ``table_before`` the table's length before
    reserve; ``length`` the sequence's length (the write's first position).
    """
    if index > written.start:  # past the block holding position `length`: reserved earlier
        return with_cause(
            f"the write runs on from table index {written.start} into index {index}, room reserved "
            f"before the fork and not yet written: reserve copied only the block holding position {length}",
            RESERVED_ROOM_HINT,
        )
    if index < table_before < written.stop:  # the write ran on into appended blocks
        return with_cause(
            f"the write starts in shared block {block} and runs on into {written.stop - table_before} new block(s)",
            CROSSING_HINT,
        )
    return COPY_HINT


def history_change(
    *, writers: dict, seq: str, layer: int, pool_name: str, block: int, got_value: float, copied: dict[int, int]
) -> tuple[str, str | Hint]:
    """(what was found, hint) for a key or value of ``seq`` that changed in ``block``.

    ``writers`` is the ledger's map from a token's base to (writer, position); ``copied`` maps each
    block this reserve copied from to its copy.
    """
    base = round(abs(got_value) - 0.25 * layer)
    if base in writers:
        writer, at = writers[base]
        got = f"the {pool_name} {writer!r} wrote at position {at}"
    else:
        got = f"{got_value:g}, a value nobody wrote there"
    source = [old for old, new in copied.items() if new == block]
    if source:
        hint: str | Hint = with_cause(
            f"block {block} is the copy of block {source[0]} made by this reserve, and its {pool_name} "
            f"in layer {layer} were not copied",
            BOTH_POOLS_HINT,
        )
    elif base in writers and writers[base][0] != seq:
        hint = with_cause(f"another sequence's write landed in a block {seq!r} reads", COPY_HINT)
    else:
        hint = "a sequence's history must not change when another sequence forks, writes or is freed"
    return got, hint


def diagnose_fork(cache: Any, parent: str, child: str, fork_length: int, *, block_size: int) -> str | Hint:
    """Name the likely bug from the state of the cache after the milestone's logits went wrong."""
    tables = cache.tables
    if parent in tables and child in tables and tables[parent] is tables[child]:
        return (
            "the child's table is the parent's list object: fork must give the child a new list, or "
            "the child's copy-on-write rewrites the parent's table too"
        )
    index, prompt_slots = fork_length // block_size, fork_length % block_size
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
            return with_cause(f"{wrote} (refcount {refs})", COPY_HINT)
        for layer in range(len(cache.k_pool)):
            for name, pool in (("keys", cache.k_pool), ("values", cache.v_pool)):
                with torch_unhooked():  # a learner's tensor subclass cannot answer
                    same = torch.equal(
                        pool[layer][parent_block, :, :prompt_slots], pool[layer][child_block, :, :prompt_slots]
                    )
                if not same:
                    return with_cause(
                        f"the child's copy (block {child_block}) of the shared block {parent_block} lacks "
                        f"the prompt's {name} in layer {layer}",
                        BOTH_POOLS_HINT,
                    )
    return "a sequence's history changed after the fork; check_copy_on_write names the step where it happens"
