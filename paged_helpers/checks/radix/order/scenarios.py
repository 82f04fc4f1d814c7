"""The scenarios of ``check_cache_aware_order``: a table of waiting queues and the hidden kinds.

``ORDER_CASES`` is the visible table, each case (what, waiting in arrival order, cached tokens,
rounds waited, max_wait, the expected order, the hint if wrong). Each hidden kind draws one queue of
a fixed size and number of starving requests, redrawn until each slip the kind is meant for
(``ordering.MISTAKES``) orders it otherwise; the seed picks names, cached tokens, rounds waited and
which requests starve, never how many.
"""

from __future__ import annotations

import random
from typing import Any

from ...story import Story
from .ordering import MISTAKES, expected_order, judge_order

__all__ = ["ORDER_CASES", "ORDER_STORY"]

BLOCK = 4  # cached tokens come in whole blocks of this many

# (what, waiting in arrival order, cached tokens, rounds waited, max_wait, expected order, hint if wrong)
ORDER_CASES = (
    (
        "three requests, none starving",
        ["a", "b", "c"],
        {"a": 0, "b": 64, "c": 16},
        {"a": 0, "b": 0, "c": 0},
        4,
        ["b", "c", "a"],
        "sort by cached tokens, most first",
    ),
    (
        "equal cached tokens",
        ["d", "a", "c", "b"],
        {"d": 32, "a": 0, "c": 32, "b": 32},
        {"d": 1, "a": 1, "c": 0, "b": 0},
        4,
        ["d", "c", "b", "a"],
        "ties keep arrival order (the order of waiting), not the ids' order: sorted() is stable",
    ),
    (
        "a request that waited max_wait rounds",
        ["old", "hot", "new"],
        {"old": 0, "hot": 96, "new": 8},
        {"old": 3, "hot": 1, "new": 0},
        3,
        ["old", "hot", "new"],
        "a request that has waited max_wait rounds or more goes first, whatever it has cached: without "
        "that guard a request with nothing cached could wait forever behind hot ones",
    ),
    (
        "two starving requests",
        ["s2", "x", "s1"],
        {"s2": 16, "x": 80, "s1": 48},
        {"s2": 7, "x": 2, "s1": 5},
        5,
        ["s2", "s1", "x"],
        "starving requests go first in arrival order (the longest waiting first), not by cached tokens",
    ),
    ("an empty queue", [], {}, {}, 2, [], "nothing waiting: return an empty list"),
)


def _random_queue(rng, what: str, size: int, starving: int, cached_blocks: int, hint: str) -> tuple:
    """A queue of ``size`` requests, ``starving`` of them (at drawn places) waited max_wait rounds or more."""
    waiting = rng.sample([f"r{i}" for i in range(100)], size)
    max_wait = rng.randint(2, 6)
    cached = {r: BLOCK * rng.randint(0, cached_blocks) for r in waiting}
    hungry = set(rng.sample(waiting, starving))
    waited = {r: rng.randint(max_wait, max_wait + 3) if r in hungry else rng.randrange(max_wait) for r in waiting}
    return what, waiting, cached, waited, max_wait, expected_order(waiting, cached, waited, max_wait), hint


def _telling(case: tuple, mistakes: tuple[str, ...]) -> bool:
    """Does each of ``mistakes`` order ``case``'s queue otherwise, and does the rule reorder it at all (so a
    sort in place shows)?"""
    _, waiting, cached, waited, max_wait, expected, _ = case
    others = [expected_order(waiting, cached, waited, max_wait, mistake) for mistake in mistakes]
    return all(other != expected for other in others) and (len(waiting) < 2 or expected != waiting)


def _hidden_queue(size: int, starving: int, cached_blocks: int, mistakes: tuple[str, ...], what: str, hint: str):
    """A hidden scenario: a queue of ``size`` requests, ``starving`` of them starving, redrawn until each of
    ``mistakes`` orders it otherwise; ordered by the learner and by the rule."""

    def scenario(cache_aware_order: Any, rng) -> None:
        while not _telling(case := _random_queue(rng, what, size, starving, cached_blocks, hint), mistakes):
            pass
        judge_order(cache_aware_order, case)

    return scenario


# Every kind runs at its largest size in every draw (the seed picks names, cached tokens, rounds waited
# and which requests starve, never how many).
_HIDDEN_QUEUES = {
    "a long queue with many ties in cached tokens": _hidden_queue(
        16, 0, 2, ("ties_by_id",), "a long queue", "ties keep arrival order (the order of waiting)"
    ),
    "a queue where several requests starve": _hidden_queue(
        10,
        3,
        6,
        ("no_guard", "guard_off_by_one", "starving_by_cache"),
        "starving requests",
        "starving requests (waited max_wait rounds or more) first, in arrival order",
    ),
    "a queue of one request": _hidden_queue(1, 1, 4, (), "one request", "return [it]"),
    "a mixed queue": _hidden_queue(
        12, 2, 8, MISTAKES, "a mixed queue", "starving first, then most cached first, ties by arrival"
    ),
}


def _every_order_case(cache_aware_order: Any, _rng: random.Random) -> None:
    for case in ORDER_CASES:
        judge_order(cache_aware_order, case)


ORDER_STORY = Story(visible=(_every_order_case,), hidden=_HIDDEN_QUEUES, told=f"{len(ORDER_CASES)} queues")
