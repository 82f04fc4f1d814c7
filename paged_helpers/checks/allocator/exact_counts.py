"""The check's own count of every block, and the calls that move it, held against the learner's allocator.

A scenario keeps ``refs``, a plain list with the count each block must have: ``allocate`` sets a
block's to 1, the scenario adds 1 for each ``share`` and takes 1 for each ``release`` it makes.
``verify`` holds the allocator against that list after each step: the same counts, each block on
the free list exactly when its count is 0 and then once (``pool_invariant``), ``num_free`` the free
list's length. A refused call (``expect_error``) must change nothing.
"""

from __future__ import annotations

from ...pool_invariant import PoolReading
from ..reading.calls import call_learner, expect_raise
from ..speaking.failure import Hint, fail
from . import diagnosis
from .allocator_reads import free_list, member, state

__all__ = ["allocate", "expect_error", "new", "verify"]


def verify(allocator: object, expected_refs: list[int], scenario: str, lost_hint: str | Hint = "") -> None:
    """The allocator's counts and free list agree exactly with ``expected_refs``.

    ``lost_hint`` replaces the hint for free blocks missing from the free list (a fresh pool).
    """
    free, refs, num_free = state(allocator, scenario)
    if refs != expected_refs:
        wrong = [b for b in range(len(expected_refs)) if b >= len(refs) or refs[b] != expected_refs[b]]
        block = wrong[0]
        got = refs[block] if block < len(refs) else "missing"
        fail(
            f"{scenario}: the reference count of block {block}",
            expected_refs[block],
            got,
            diagnosis.refs_hint(expected_refs[block], got),
        )
    reading = PoolReading(tuple(refs), tuple(free), num_free)
    duplicates = reading.twice_on_free_list()
    if duplicates:
        fail(
            f"{scenario}: the free list",
            "each free block exactly once",
            f"free = {free}",
            diagnosis.doubled_free_hint(duplicates),
        )
    should_be_free = sorted(b for b, count in enumerate(expected_refs) if count == 0)
    if sorted(free) != should_be_free:
        # refs equal expected_refs here, so the reading's view of the free list is the expected one
        in_use_but_free = reading.free_but_referenced()
        hint = diagnosis.misplaced_free_hint(expected_refs, in_use_but_free, reading.lost())
        if not in_use_but_free:
            hint = lost_hint or hint
        fail(f"{scenario}: the free block ids", should_be_free, sorted(free), hint)
    if num_free != len(should_be_free):
        fail(f"{scenario}: num_free", len(should_be_free), num_free, diagnosis.NUM_FREE_IS_THE_FREE_LIST)


def new(allocator_class: type, num_blocks: int, scenario: str) -> object:
    """The learner's ``BlockAllocator(num_blocks)``."""
    return call_learner(f"BlockAllocator({num_blocks})", allocator_class, num_blocks, scenario=scenario)


def allocate(allocator: object, refs: list[int], scenario: str) -> int:
    """``allocate()``: a free block, taken off the free list; counted 1 in ``refs``."""
    block = call_learner("allocate()", allocator.allocate, scenario=scenario)
    if type(block) is not int or not 0 <= block < len(refs):
        fail(
            f"{scenario}: the id allocate() returned",
            f"a block id in 0..{len(refs) - 1}",
            repr(block),
            "allocate() returns the id of the block it took from the free list.",
        )
    if refs[block] != 0:
        fail(
            f"{scenario}: allocate() returned block {block}",
            "a free block (count 0)",
            f"block {block}, which is already in use (count {refs[block]})",
            diagnosis.HANDED_OUT_TWICE,
        )
    free = free_list(member(allocator, "free", scenario), scenario)
    if block in free:
        fail(
            f"{scenario}: allocate() returned block {block}",
            f"block {block} taken off the free list",
            f"block {block} still on the free list {free}",
            diagnosis.STILL_ON_THE_FREE_LIST,
        )
    refs[block] = 1
    return block


def expect_error(
    allocator: object,
    method: str,
    block: int | None,
    error_type: type,
    refs: list[int],
    scenario: str,
    hint: str,
) -> None:
    """The call raises ``error_type`` and leaves the allocator exactly as it was."""
    args = () if block is None else (block,)
    call = f"{method}({'' if block is None else block})"
    expect_raise(error_type, call, getattr(allocator, method), *args, scenario=scenario, hint=hint)
    verify(allocator, refs, f"{scenario}, after the refused {call}")
