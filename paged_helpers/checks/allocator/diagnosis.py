"""Notebook 02's diagnosis: what a wrong count, a wrong free list or a wrong ``num_free`` means.

The hints name the rule the allocator broke (a count is +1 on allocate and share, -1 on release; a
block is on the free list exactly when its count is 0, and once), from what the check found.
"""

from __future__ import annotations

from ..speaking.failure import Hint

__all__ = [
    "FREE_LIST_IS_A_QUEUE",
    "FRESH_POOL",
    "HANDED_OUT_TWICE",
    "STILL_ON_THE_FREE_LIST",
    "NUM_FREE_IS_THE_FREE_LIST",
    "doubled_free_hint",
    "misplaced_free_hint",
    "refs_hint",
]

FREE_LIST_IS_A_QUEUE = Hint(
    "the free list is a queue: allocate() takes from its front, release() appends at its back, "
    "and the checks (and the later notebooks) read it as an ordered sequence of block ids, in "
    "which a block appearing twice is a bug to be seen, not hidden as a set would hide it",
    "self.free = deque(range(num_blocks)); allocate: self.free.popleft(); release: self.free.append(block)",
)
FRESH_POOL = Hint(
    "a new pool starts with every block free and every count at 0",
    "free = deque(range(num_blocks)), refs = [0] * num_blocks",
)
HANDED_OUT_TWICE = Hint(
    "allocate() must take the block off the free list, so it is never handed out twice",
    "block = self.free.popleft()",
)
STILL_ON_THE_FREE_LIST = Hint(
    "allocate() must take the block off the free list, or it will be handed out again",
    "block = self.free.popleft()",
)
NUM_FREE_IS_THE_FREE_LIST = Hint(
    "num_free is the number of blocks on the free list, not the pool's size", "return len(self.free)"
)


def refs_hint(expected: int, got: object) -> str:
    """A block's count is ``got`` where the check counted ``expected``."""
    if expected == 1 and got == 0:
        return "allocate() must set the new block's count to 1: the table that asked for it points at it."
    if isinstance(got, int) and got < 0:
        return (
            "a count went below 0: release() of a block whose count is already 0 must raise RuntimeError "
            "before changing anything."
        )
    if isinstance(got, int) and got < expected:
        return "share(block) means one more table points at the block: add 1 to its count."
    return "refs[block] counts the tables (and caches) pointing at the block: +1 on allocate/share, -1 on release."


def doubled_free_hint(duplicates: list[int]) -> str:
    return (
        f"block(s) {duplicates} are on the free list more than once, so allocate() would hand them "
        "to two tables at once. A block goes back to the free list only on the release that "
        "brings it to 0."
    )


def misplaced_free_hint(expected_refs: list[int], in_use_but_free: list[int], lost: list[int]) -> str:
    """The free list holds referenced blocks (``in_use_but_free``) or misses free ones (``lost``)."""
    if in_use_but_free:
        return (
            f"block(s) {in_use_but_free} are on the free list but still referenced (counts "
            f"{[expected_refs[b] for b in in_use_but_free]}): release() must return a block only "
            "when its count reaches 0, and allocate() must take the block off the free list."
        )
    return (
        f"block(s) {lost} have count 0 but are not on the free list: they are lost for good "
        "(a leak). The release that brings a count to 0 must append the block to `free`."
    )
