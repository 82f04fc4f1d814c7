"""A paged cache's bookkeeping copied at one moment, and refusals that must leave it untouched.

``CacheSnapshot.of(cache)`` reads the learner's ``tables``, ``lengths``, ``allocator.refs`` and
``allocator.free`` through the strict readers, so two snapshots compare as plain data;
``expect_refused`` holds a refusal (MemoryError from a step that cannot be completed) to
all-or-nothing: the cache after it equals the cache before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..speaking.failure import Hint, fail
from .calls import expect_raise
from .strict import learner_dict, learner_int, learner_int_list

__all__ = ["CacheSnapshot", "expect_refused"]


@dataclass(frozen=True)
class CacheSnapshot:
    """Copies of a paged cache's bookkeeping at one moment; two snapshots compare with ==."""

    tables: dict
    lengths: dict
    refs: list
    free: list  # sorted: the free list's order is the allocator's business

    @classmethod
    def of(cls, cache: Any) -> CacheSnapshot:
        return cls(
            learner_dict(cache.tables, "cache.tables", "", learner_int_list),
            learner_dict(cache.lengths, "cache.lengths", "", learner_int),
            learner_int_list(cache.allocator.refs, "allocator.refs"),
            sorted(learner_int_list(cache.allocator.free, "allocator.free")),
        )

    def changes(self, after: CacheSnapshot) -> list[str]:
        """ "part: what changed" for each part that differs in ``after``: only the sequences and blocks
        that changed (a pool of 24 blocks would otherwise bury the one that moved), the free list whole."""

        def entries(label: str, before: dict, now: dict, name: Callable[[Any], str]) -> list[str]:
            missing = "absent"
            moved = [
                f"{name(key)}: {before.get(key, missing)} -> {now.get(key, missing)}"
                for key in sorted(set(before) | set(now), key=str)
                if before.get(key, missing) != now.get(key, missing)
            ]
            return [f"{label}: " + ", ".join(moved)] if moved else []

        return [
            *entries("tables", self.tables, after.tables, repr),
            *entries("lengths", self.lengths, after.lengths, repr),
            *entries("reference counts", dict(enumerate(self.refs)), dict(enumerate(after.refs)), "block {}".format),
            *([f"free list: {self.free} -> {after.free}"] if self.free != after.free else []),
        ]


def expect_refused(
    error_type: type[BaseException],
    what: str,
    function: Callable[..., Any],
    *args: Any,
    cache: Any,
    scenario: str,
    hint: str | Hint,
    changed_hint: str | Hint | Callable[[CacheSnapshot, CacheSnapshot], str | Hint],
) -> None:
    """Learner code that must raise ``error_type`` and leave ``cache``'s bookkeeping exactly as it was.

    A refusal (MemoryError from a reserve that cannot be completed, say) is all or nothing: the
    tables, lengths, reference counts and free list after it are compared with a snapshot taken
    before. ``changed_hint`` may be a function of the two snapshots, to name what was kept.
    """
    before = CacheSnapshot.of(cache)
    expect_raise(error_type, what, function, *args, scenario=scenario, hint=hint)
    after = CacheSnapshot.of(cache)
    changes = before.changes(after)
    if changes:
        name = error_type.__name__
        fail(
            scenario,
            f"{name}, with the cache exactly as before",
            f"{name}, but the cache changed first: " + "; ".join(changes),
            changed_hint(before, after) if callable(changed_hint) else changed_hint,
        )
