"""The block pool's bookkeeping invariant: one definition for the checks and the widgets.

A block is on the free list exactly when its reference count is 0, and then exactly once; no count
is negative; ``num_free`` is the length of the free list. ``PoolReading`` holds one moment's counts
and free list as plain ints, and says what breaks the invariant; how they were read is the reader's
business (the checks read a learner's allocator strictly, ``checks.reading.ledger.read_pool``; the
widgets read the course's or a learner's in the lab). Who holds a block (tables, a prefix cache) is
the caller's business too: this module knows counts and the free list, and imports nothing of the
package, so both the checks and the widgets stand on it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True)
class PoolReading:
    """An allocator's counts and free list at one moment."""

    refs: tuple[int, ...]
    free: tuple[int, ...]
    num_free: int

    def times_on_free_list(self, block: int) -> int:
        return Counter(self.free)[block]

    def twice_on_free_list(self) -> list[int]:
        """Blocks on the free list more than once: allocate() would hand them out twice."""
        return sorted(block for block, times in Counter(self.free).items() if times > 1)

    def free_but_referenced(self) -> list[int]:
        """Blocks on the free list whose count is not 0."""
        return sorted({block for block in self.free if 0 <= block < len(self.refs) and self.refs[block] != 0})

    def lost(self) -> list[int]:
        """Blocks with count 0 that are not on the free list: nobody can ever allocate them again."""
        on_list = set(self.free)
        return [block for block, count in enumerate(self.refs) if count == 0 and block not in on_list]

    def num_free_agrees(self) -> bool:
        return self.num_free == len(self.free)

    def block_problem(self, block: int) -> str:
        """What is wrong with one block's free-list bookkeeping, in a few words; "" when nothing is."""
        count = self.refs[block] if 0 <= block < len(self.refs) else 0
        times = self.times_on_free_list(block)
        if count < 0:
            return f"refcount {count} is negative"
        if times > 1:
            return f"on the free list {times} times"
        if count > 0 and times:
            return f"refcount {count} but on the free list"
        if count == 0 and not times:
            return "refcount 0 but not on the free list (leaked)"
        return ""
