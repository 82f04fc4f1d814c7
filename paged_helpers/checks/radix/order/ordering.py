"""The rule of ``check_cache_aware_order``, its classic slips, and one queue put to the learner.

``expected_order`` is the rule as a sort key (starving requests first by arrival, then most cached
tokens first, ties by arrival) and, with a ``mistake`` of ``MISTAKES``, the order that slip gives: the
scenarios draw hidden queues that each slip orders otherwise. ``judge_order`` asks the learner's
``cache_aware_order`` for one case of the table and fails naming what is wrong with its answer.
"""

from __future__ import annotations

from typing import Any

from ...reading.calls import call_learner
from ...speaking.failure import fail

__all__ = ["MISTAKES", "expected_order", "judge_order"]

# The classic slips of cache_aware_order, each a keyword of expected_order: the hidden queues are drawn
# so that each slip their kind is meant for orders them otherwise.
MISTAKES = ("no_guard", "guard_off_by_one", "starving_by_cache", "ties_by_id")


def expected_order(waiting: list[str], cached: dict, waited: dict, max_wait: int, mistake: str = "") -> list[str]:
    """The rule, as a sort key: starving requests first by arrival, then most cached first, ties by arrival;
    or, with ``mistake`` (one of ``MISTAKES``), the order that slip gives."""
    arrival = {request: index for index, request in enumerate(waiting)}

    def starving(request: str) -> bool:
        if mistake == "no_guard":
            return False
        return waited[request] > max_wait if mistake == "guard_off_by_one" else waited[request] >= max_wait

    def rank(request: str) -> tuple:
        if starving(request):
            return (0, -cached[request] if mistake == "starving_by_cache" else 0, arrival[request])
        return (1, -cached[request], request if mistake == "ties_by_id" else arrival[request])

    return sorted(waiting, key=rank)


def judge_order(cache_aware_order: Any, case: tuple) -> None:
    what, waiting, cached, waited, max_wait, expected, hint = case
    arguments = (list(waiting), dict(cached), dict(waited), max_wait)
    got = call_learner(f"cache_aware_order(...) with {what}", cache_aware_order, *arguments, scenario=what)
    if not isinstance(got, list) or sorted(map(str, got)) != sorted(waiting):
        fail(
            what,
            f"a list of every waiting request, once each: {sorted(waiting)}",
            repr(got),
            "return the ids of waiting, reordered, none dropped or repeated",
        )
    if got != expected:
        fail(
            f"{what}: waiting {waiting}, cached tokens {cached}, rounds waited {waited}, max_wait {max_wait}",
            expected,
            got,
            hint,
        )
    if arguments != (waiting, cached, waited, max_wait):
        fail(what, "the arguments left as they were", "cache_aware_order changed them", "build a new list")
