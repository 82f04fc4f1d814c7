"""The driver of ``check_kv_router``: a drawn stream of KV events fed to the learner's ``CacheAwareRouter``.

After every event (a replica "stored" the blocks of a prompt's prefix, or "removed" the last blocks of
one, as a radix cache evicts a leaf) the feed asks the router, for each request drawn for that moment,
each replica's overlap (how many of the request's keys, from the first, the replica holds by its
events), each replica's cost in Dynamo's form (``overlap_weight x blocks to prefill + blocks in
decode``) and its choice (the lowest cost, ties to the lowest index), against the check's account of
the events. A router that keeps blocks a replica reported removed (stale events) is named as such.
"""

from __future__ import annotations

from typing import Any

from ...reading.calls import call_learner
from ...reading.strict import learner_int
from ...speaking.failure import fail
from ..router_feed import RouterFeed
from ..router_streams import overlap
from .diagnosis import CHOOSE_HINT, COST_HINT, overlap_hint

__all__ = ["OverlapFeed", "serve_stream"]


class OverlapFeed(RouterFeed):
    """One stream on the learner's ``CacheAwareRouter`` of overlap weight ``weight``."""

    COST_HINT = COST_HINT
    CHOOSE_HINT = CHOOSE_HINT

    def __init__(self, router: Any, scenario: str, replicas: int, weight: float) -> None:
        super().__init__(router, scenario, replicas)
        self.weight = weight

    def told(self, event: tuple) -> str:
        replica, kind, keys, _ = event
        return f"replica {replica} {kind} {len(keys)} block(s)"

    def send(self, event: tuple) -> None:
        replica, kind, keys, _ = event
        call_learner(
            f"on_event({replica}, {kind!r}, keys)",
            self.router.on_event,
            replica,
            kind,
            list(keys),
            scenario=self.scenario,
        )

    def after_event(self, event: tuple, account: Any, where: str) -> None:
        for keys, decode in event[-1]:
            self.asked += 1
            for r in range(self.replicas):
                expected = self._expect_overlap(r, keys, account, where)
                want = self.weight * (len(keys) - expected) + decode[r]
                self.expect_cost(r, keys, decode, want, f"overlap {expected}", where, shown=want)
            costs = [
                self.weight * (len(keys) - overlap(account.held[r], keys)) + decode[r] for r in range(self.replicas)
            ]
            best = min(range(self.replicas), key=lambda r: (costs[r], r))
            got = self.ask_choice(keys, decode, where)
            if got != best:
                self.wrong_choice(keys, decode, best, costs, got, where)

    def _expect_overlap(self, r: int, keys: list, account: Any, where: str) -> int:
        """The router's ``overlap_blocks`` on replica ``r`` equal to the account's; returns the account's."""
        expected = overlap(account.held[r], keys)
        got = learner_int(
            call_learner(f"overlap_blocks({r}, keys)", self.router.overlap_blocks, r, list(keys), scenario=where),
            f"overlap_blocks({r}, keys)",
            where,
        )
        if got != expected:
            stale = got == overlap(account.ever[r], keys)
            fail(
                f"{where}: a request of {len(keys)} blocks on replica {r}",
                f"overlap {expected} (block {expected} of the request"
                + (" was reported removed by the replica)" if stale else " is not held by the replica)")
                if expected < len(keys)
                else f"overlap {expected} (every block held)",
                f"overlap {got}",
                overlap_hint(got, expected, stale),
            )
        return expected


def serve_stream(Router: Any, stream: Any, weight: float, name: str) -> int:  # noqa: N803
    """Feed ``stream`` to a new router, asking after every event; returns how many requests were asked."""
    replicas = stream.replicas
    scenario = f"{name} ({replicas} replicas, overlap_weight {weight})"
    router = call_learner(
        f"CacheAwareRouter({replicas}, overlap_weight={weight})", Router, replicas, weight, scenario=scenario
    )
    return OverlapFeed(router, scenario, replicas, weight).feed(stream)
