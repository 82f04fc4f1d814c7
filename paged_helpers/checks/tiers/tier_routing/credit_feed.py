"""The driver of ``check_tier_aware_router``: a drawn stream of KV events, each naming its medium, fed to
the learner's ``TierAwareRouter``.

After every event the feed asks, for three requests, each replica's ``overlap_credit`` (``credits.credit``),
its ``cost`` (Dynamo's form with the credit in place of the overlap) and ``choose``; all against the
check's account of the events. A wrong credit is not reported at once: one wrong answer can fit two
mistakes, so the feed goes on through the stream asking only for credits, scores which mistake explains
the most of them (``diagnosis.score_credits``) and reports the first wrong credit with that mistake's
hint once the stream is done.
"""

from __future__ import annotations

from typing import Any

from ...reading.calls import call_learner
from ...reading.strict import learner_float
from ...speaking.failure import fail
from ..router_feed import RouterFeed
from .credits import CPU, GPU, WEIGHTS, credit, lowest
from .diagnosis import CHOOSE_HINT, COST_HINT, most_explained, score_credits

__all__ = ["CreditFeed", "serve_stream"]


class CreditFeed(RouterFeed):
    """One stream on the learner's ``TierAwareRouter`` of overlap weight ``overlap_weight`` and tier
    ``weights``. ``wrong``: the first wrong credit (scenario, expected, got), reported by ``finish``;
    ``score``: for each mistake's hint, how many wrong credits it explains."""

    COST_HINT = COST_HINT
    CHOOSE_HINT = CHOOSE_HINT

    def __init__(self, router: Any, scenario: str, replicas: int, overlap_weight: float, weights: dict) -> None:
        super().__init__(router, scenario, replicas)
        self.overlap_weight, self.weights = overlap_weight, weights
        self.wrong: tuple | None = None  # the first wrong credit: reported once the stream has named the mistake
        self.score: dict[str, int] = {}

    def told(self, event: tuple) -> str:
        replica, kind, keys, medium, _ = event
        return f"replica {replica} {kind} {len(keys)} block(s) on {medium}"

    def send(self, event: tuple) -> None:
        replica, kind, keys, medium, _ = event
        call_learner(
            f"on_event({replica}, {kind!r}, keys, {medium!r})",
            self.router.on_event,
            replica,
            kind,
            list(keys),
            medium,
            scenario=self.scenario,
        )

    def after_event(self, event: tuple, account: Any, where: str) -> None:
        asks = event[-1]
        if self.wrong is not None:  # after a wrong credit, only the credits, to see which mistake explains them
            score_credits(self.score, account, self._credits(asks, where), asks, self.weights)
            return
        for keys_asked, decode in asks:
            self.asked += 1
            if not self._ask(keys_asked, decode, account, asks, where):
                break

    def _ask(self, keys_asked: list, decode: list[int], account: Any, asks: list, where: str) -> bool:
        """Credit and cost on every replica, then the choice; False after a wrong credit (held back)."""
        costs, reported = [], []
        for r in range(self.replicas):
            expected = credit(account.held[r], keys_asked, self.weights)
            got = learner_float(
                call_learner(
                    f"overlap_credit({r}, keys)", self.router.overlap_credit, r, list(keys_asked), scenario=where
                ),
                f"overlap_credit({r}, keys)",
                where,
            )
            if abs(got - expected) > 1e-9 * max(1.0, abs(expected)):
                on_gpu = sum(key in account.held[r][GPU] for key in keys_asked)
                on_cpu = sum(key in account.held[r][CPU] for key in keys_asked)
                self.wrong = (
                    f"{where}: a request of {len(keys_asked)} blocks on replica {r} (it holds {on_gpu} of "
                    f"them on the GPU, {on_cpu} on the host)",
                    f"credit {expected:g}",
                    f"credit {got:g}",
                )
                score_credits(self.score, account, self._credits(asks, where), asks, self.weights)
                return False
            want = self.overlap_weight * (len(keys_asked) - expected) + decode[r]
            costs.append(want)
            reported.append(
                self.expect_cost(r, keys_asked, decode, want, f"credit {expected:g}", where, shown=round(want, 9))
            )
        self._expect_choice(keys_asked, decode, costs, reported, where)
        return True

    def _expect_choice(self, keys_asked: list, decode: list[int], costs: list, reported: list, where: str) -> None:
        best = lowest(costs)
        got_choice = self.ask_choice(keys_asked, decode, where)
        tied = [r for r in range(self.replicas) if abs(costs[r] - costs[best]) <= 1e-9 * max(1.0, abs(costs[best]))]
        # Credits of 0.8 add up with rounding: a choice among equal costs that the router's own costs
        # (as floats) really put lower is not a tie broken the wrong way.
        rounding = got_choice in tied and 0 <= got_choice < self.replicas and reported[got_choice] < reported[best]
        if got_choice != best and not rounding:
            self.wrong_choice(keys_asked, decode, best, [round(cost, 6) for cost in costs], got_choice, where)

    def finish(self) -> None:
        if self.wrong is not None:
            fail(*self.wrong, most_explained(self.score))

    def _credits(self, asks: list, where: str) -> dict[tuple[int, int], float]:
        """The router's credit for every request asked after one event, on every replica (to name its mistake)."""
        return {
            (index, r): learner_float(
                call_learner(f"overlap_credit({r}, keys)", self.router.overlap_credit, r, list(keys), scenario=where),
                f"overlap_credit({r}, keys)",
                where,
            )
            for index, (keys, _) in enumerate(asks)
            for r in range(self.replicas)
        }


def serve_stream(Router: Any, stream: Any, overlap_weight: float, name: str) -> int:  # noqa: N803
    """Feed ``stream`` to a new router, asking after every event; returns how many requests were asked."""
    replicas, weights = stream.replicas, stream.weights
    default = weights == WEIGHTS
    scenario = f"{name} ({replicas} replicas, overlap_weight {overlap_weight}, tier weights {weights})"
    made = f"TierAwareRouter({replicas}, overlap_weight={overlap_weight}" + ("" if default else f", {weights}") + ")"
    arguments = (replicas, overlap_weight) if default else (replicas, overlap_weight, dict(weights))
    router = call_learner(made, Router, *arguments, scenario=scenario)
    return CreditFeed(router, scenario, replicas, overlap_weight, weights).feed(stream)
