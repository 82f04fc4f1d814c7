"""The block pool's bookkeeping invariant, read from any allocator (the learner's or the course's).

One definition for the checks and the widgets: a block is on the free list exactly when its
reference count is 0, and then exactly once; no count is negative; ``num_free`` is the length of
the free list. Reading copies the allocator's ``refs``, ``free`` and ``num_free`` and never
changes it. Who holds a block (tables, a prefix cache) is the caller's business: this module only
knows counts and the free list.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ...learner_view.prefetch import prefetch
from .strict import learner_int, learner_int_list


@dataclass(frozen=True)
class PoolReading:
    """An allocator's counts and free list at one moment."""

    refs: tuple[int, ...]
    free: tuple[int, ...]
    num_free: int

    @classmethod
    def of(cls, allocator: Any, scenario: str = "") -> PoolReading:
        """Read ``allocator.refs``, ``allocator.free`` and ``allocator.num_free`` as plain ints.

        Anything else (an int subclass, an object that says it equals everything) fails as a
        ``CheckFailed`` naming what was expected (``strict.learner_int_list``).
        """
        prefetch(allocator, names=("refs", "free", "num_free"))  # one request, where it lives in another process
        return cls(
            tuple(learner_int_list(allocator.refs, "allocator.refs", scenario)),
            tuple(learner_int_list(allocator.free, "allocator.free", scenario)),
            learner_int(allocator.num_free, "allocator.num_free", scenario),
        )

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
