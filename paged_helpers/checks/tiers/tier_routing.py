"""check_tier_aware_router: a router whose KV events carry the medium, GPU or host (notebook 11).

The check plays replicas with a host tier. Its seeded streams hold the events such a replica sends:
blocks "stored" on the GPU when a prompt is cached; an evicted leaf "removed" from the GPU and, when
it was offloaded, "stored" on the CPU; write-through copies "stored" on the CPU while still on the
GPU; a load-back "stored" on the GPU again (the host copy stays); the host's LRU "removed" from the
CPU. After every event it asks the learner's ``TierAwareRouter``, for three requests, each replica's
``overlap_credit`` (from the request's first key, while the replica holds the key on some medium, the
largest weight of the media holding it: llm-d's longest-prefix score with tier weights), its ``cost``
(Dynamo's form with the credit in place of the overlap) and ``choose``; all against the check's own
account of the events. A wrong credit is named by the mistake that gives it: removals ignored (stale
events), the medium ignored, a removal taken from both media, the two media's weights added or the
smaller one taken, blocks counted after a gap, constant weights. One wrong answer can fit two of them,
so after the first wrong credit the check goes on feeding the stream, asking only for credits, and
names the mistake that explains the most of them (``_score``); the failure reports the first one.

The hidden call (``hidden=True``) runs every kind of ``_HIDDEN`` in full: one stream of
``HIDDEN_EVENTS`` events for each overlap weight of the kind, on a number of replicas drawn from the
kind's range, redrawn until it shows every mistake above (``_telling``) and, with several replicas, a
tie for the lowest cost. One kind changes the tier weights: a router that wrote 0.8 where it should
read ``tier_weights`` fails it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..reading.calls import call_learner
from ..reading.strict import learner_float, learner_int
from ..registry import check
from ..speaking.failure import fail
from ..speaking.hidden import redraw_until
from ..story import Story
from .routing import _chain, _prompts

__all__ = ["check_tier_aware_router"]

GPU, CPU = "GPU", "CPU"
MEDIA = (GPU, CPU)
WEIGHTS = {GPU: 1.0, CPU: 0.8}  # the notebook's TIER_WEIGHTS (llm-d's defaults)

STALE_HINT = (
    "a 'removed' event means the replica no longer holds those blocks on that medium: take them out of "
    "held_on[replica][medium], or the router credits blocks that are gone"
)
MEDIUM_HINT = (
    "keep the keys per medium (held_on[replica][medium]): a block the replica holds only on the host earns "
    "tier_weights['CPU'] of a GPU block's credit, read from self.tier_weights"
)
REMOVED_MEDIUM_HINT = (
    "a 'removed' event takes the keys out of its own medium only: a block evicted from the GPU may still be "
    "on the host, and one the host dropped may still be on the GPU"
)
BOTH_MEDIA_HINT = (
    "a block held on both media earns the larger of the two weights (the GPU copy is used), once: neither the "
    "sum nor the smaller weight"
)
LEADING_HINT = (
    "only a prefix can be reused: walk the request's keys from the first and stop at the first key the "
    "replica holds on neither medium"
)
TIER_WEIGHTS_HINT = (
    "the weights are the router's own tier_weights (its third argument, kept in self.tier_weights), not "
    "constants: a deployment may credit the host at another weight"
)
CREDIT_HINT = (
    "overlap_credit: from the first key, while the replica holds the key on GPU or CPU, add the largest "
    "weight among the media holding it; stop at the first key held on neither"
)
COST_HINT = "cost = overlap_weight x (the request's blocks - its credit on the replica) + decode_blocks[replica]"
CHOOSE_HINT = (
    "choose (your CacheAwareRouter's) must compare self.cost, so that the credit counts: the replica of lowest "
    "cost, ties to the lowest index"
)


# --- the check's account ------------------------------------------------------------------------------
class _Account:
    """What each replica holds on each medium by its events; ``ever``, every key it reported stored on
    each medium (what a router deaf to "removed" believes); ``blind``, the keys of a router that ignores
    the medium (one set: stored adds, removed takes away); ``both_gone``, the sets of a router that takes
    a removal out of both media."""

    def __init__(self, replicas: int) -> None:
        self.held: list[dict[str, set]] = [{medium: set() for medium in MEDIA} for _ in range(replicas)]
        self.ever: list[dict[str, set]] = [{medium: set() for medium in MEDIA} for _ in range(replicas)]
        self.blind: list[set] = [set() for _ in range(replicas)]
        self.both_gone: list[dict[str, set]] = [{medium: set() for medium in MEDIA} for _ in range(replicas)]

    def apply(self, replica: int, kind: str, keys: list, medium: str) -> None:
        if kind == "stored":
            self.held[replica][medium].update(keys)
            self.ever[replica][medium].update(keys)
            self.blind[replica].update(keys)
            self.both_gone[replica][medium].update(keys)
        else:
            self.held[replica][medium].difference_update(keys)
            self.blind[replica].difference_update(keys)
            for held in self.both_gone[replica].values():
                held.difference_update(keys)


def _credit(held: dict[str, set], keys: list, weights: dict[str, float], combine: Callable = max) -> float:
    """The leading keys' credit: per key, ``combine`` of the weights of the media holding it."""
    total = 0.0
    for key in keys:
        found = [weights[medium] for medium in MEDIA if key in held[medium]]
        if not found:
            break
        total += combine(found)
    return total


def _credit_after_gaps(held: dict[str, set], keys: list, weights: dict[str, float]) -> float:
    """What a router that does not stop at the first missing key answers."""
    return sum(max((weights[m] for m in MEDIA if key in held[m]), default=0.0) for key in keys)


def _blind_credit(blind: set, keys: list) -> float:
    return float(next((index for index, key in enumerate(keys) if key not in blind), len(keys)))


def _hypotheses(account: _Account, replica: int, keys: list, weights: dict[str, float]) -> list[tuple[str, float]]:
    """(hint, the credit a router with that mistake answers), most specific first."""
    held = account.held[replica]
    found = [(TIER_WEIGHTS_HINT, _credit(held, keys, WEIGHTS))] if weights != WEIGHTS else []
    return found + [
        (STALE_HINT, _credit(account.ever[replica], keys, weights)),
        (MEDIUM_HINT, _blind_credit(account.blind[replica], keys)),
        (REMOVED_MEDIUM_HINT, _credit(account.both_gone[replica], keys, weights)),
        (BOTH_MEDIA_HINT, _credit(held, keys, weights, sum)),
        (BOTH_MEDIA_HINT, _credit(held, keys, weights, min)),
        (LEADING_HINT, _credit_after_gaps(held, keys, weights)),
    ]


def _score(
    score: dict[str, int], account: _Account, answers: dict[tuple[int, int], float], asks: list, weights: dict
) -> None:
    """Add to ``score``, for each mistake, how many of the router's wrong credits ``answers`` it explains
    ((request, replica) -> credit, after one event). A single answer can fit two mistakes; a stream's
    worth of them rarely does."""

    def near(value: float, got: float) -> bool:
        return abs(value - got) <= 1e-9 * max(1.0, abs(got))

    for (ask, replica), got in answers.items():
        keys = asks[ask][0]
        if near(_credit(account.held[replica], keys, weights), got):
            continue
        score.setdefault(CREDIT_HINT, 0)
        for hint in dict.fromkeys(h for h, value in _hypotheses(account, replica, keys, weights) if near(value, got)):
            score[hint] = score.get(hint, 0) + 1


def _diagnosis(score: dict[str, int]) -> str:
    """The hint of the mistake that explains the most wrong credits (ties: the most specific);
    CREDIT_HINT when none explains any."""
    named = {hint: count for hint, count in score.items() if hint != CREDIT_HINT and count}
    return max(named, key=lambda hint: named[hint]) if named else CREDIT_HINT


# --- streams ------------------------------------------------------------------------------------------
class _Stream(NamedTuple):
    """A stream drawn before any call to the router: each event (replica, kind, keys, medium) with the
    requests asked after it, (keys, decode_blocks) each."""

    replicas: int
    weights: dict[str, float]
    events: list[tuple[int, str, list, str, list[tuple[list, list[int]]]]]

    def accounts(self) -> Iterator[tuple[int, tuple, _Account]]:
        account = _Account(self.replicas)
        for index, (replica, kind, keys, medium, asks) in enumerate(self.events):
            account.apply(replica, kind, keys, medium)
            yield index, (replica, kind, keys, medium, asks), account


def _draw_stream(rng: random.Random, replicas: int, events: int, longest: int, weights: dict[str, float]) -> _Stream:
    """``events`` events of replicas with a host tier, over 8 prompts sharing stems, 3 requests after each."""
    held = [{medium: set() for medium in MEDIA} for _ in range(replicas)]
    prompts = _prompts(rng, 8, 6, longest)
    chains = [_chain(prompt) for prompt in prompts]
    drawn: list[tuple[int, str, list, str, list]] = []

    def emit(replica: int, kind: str, keys: list, medium: str) -> None:
        if kind == "stored":
            held[replica][medium].update(keys)
        else:
            held[replica][medium].difference_update(keys)
        asks = []
        for prompt in rng.sample(prompts, 3):
            keys_asked = _chain(prompt)
            asks.append((keys_asked, [rng.randrange(0, 3 * len(keys_asked) + 1) for _ in range(replicas)]))
        drawn.append((replica, kind, list(keys), medium, asks))

    while len(drawn) < events:
        replica = rng.randrange(replicas)
        on = held[replica]
        gpu_chains = [[key for key in chain if key in on[GPU]] for chain in chains]
        gpu_chains = [chain for chain in gpu_chains if chain]
        cpu_keys = sorted(on[CPU], key=lambda key: (len(key), key))
        roll = rng.random()
        if gpu_chains and roll < 0.3:  # eviction of a leaf: off the GPU, offloaded to the host or dropped
            chain = rng.choice(gpu_chains)
            keys = chain[-rng.randint(1, len(chain)) :]
            emit(replica, "removed", keys, GPU)
            if rng.random() < 0.7 and len(drawn) < events:
                emit(replica, "stored", keys, CPU)
        elif cpu_keys and roll < 0.45:  # the host's LRU drops entries
            emit(replica, "removed", rng.sample(cpu_keys, rng.randint(1, min(3, len(cpu_keys)))), CPU)
        elif cpu_keys and roll < 0.55:  # a load-back: on the GPU again, the host copy kept
            chain = rng.choice(chains)
            keys = [key for key in chain if key in on[CPU]]
            emit(replica, "stored", keys or cpu_keys[:1], GPU)
        else:  # a prompt cached on the GPU; with write-through, copied to the host as well
            chain = rng.choice(chains)
            keys = chain[: rng.randint(1, len(chain))]
            emit(replica, "stored", keys, GPU)
            if rng.random() < 0.35 and len(drawn) < events:
                emit(replica, "stored", keys, CPU)
    return _Stream(replicas, dict(weights), drawn)


def _gpu_overlap(held: dict[str, set], keys: list) -> int:
    """What your CacheAwareRouter's overlap_blocks answers: the leading keys held on the GPU."""
    return next((index for index, key in enumerate(keys) if key not in held[GPU]), len(keys))


def _lowest(costs: list[float]) -> int:
    return min(range(len(costs)), key=lambda replica: (round(costs[replica], 9), replica))


def _telling(stream: _Stream, overlap_weight: float) -> bool:
    """Does the stream show each classic mistake? For some request and replica, a credit that differs
    from the right one when removals are ignored, when the medium is ignored, when a removal is taken
    from both media, when the two media's weights are added, when counting goes on after a gap, and a
    cost that differs when the GPU overlap stands in for the credit (a cost not overridden); with
    several replicas, a choice that this GPU-only cost changes and a tie for the lowest cost."""
    weights = stream.weights
    seen = dict.fromkeys(("stale", "medium", "removal", "both", "gap", "gpu_only", "choice", "tie"), False)
    if stream.replicas == 1:
        seen["tie"] = seen["choice"] = True
    for _, (_, _, _, _, asks), account in stream.accounts():
        for keys, decode in asks:
            costs, gpu_costs = [], []
            for replica in range(stream.replicas):
                held = account.held[replica]
                right = _credit(held, keys, weights)
                costs.append(overlap_weight * (len(keys) - right) + decode[replica])
                gpu_costs.append(overlap_weight * (len(keys) - _gpu_overlap(held, keys)) + decode[replica])
                seen["stale"] |= _credit(account.ever[replica], keys, weights) != right
                seen["medium"] |= _blind_credit(account.blind[replica], keys) != right
                seen["removal"] |= _credit(account.both_gone[replica], keys, weights) != right
                seen["both"] |= _credit(held, keys, weights, sum) != right
                seen["gap"] |= _credit_after_gaps(held, keys, weights) != right
                seen["gpu_only"] |= _gpu_overlap(held, keys) != right
            seen["tie"] |= sum(abs(cost - min(costs)) < 1e-9 for cost in costs) > 1
            seen["choice"] |= _lowest(gpu_costs) != _lowest(costs)
    return all(seen.values())


def _serve_stream(Router: Any, stream: _Stream, overlap_weight: float, name: str) -> int:  # noqa: N803
    """Feed ``stream`` to a new router, asking after every event; returns how many requests were asked."""
    replicas, weights = stream.replicas, stream.weights
    default = weights == WEIGHTS
    scenario = f"{name} ({replicas} replicas, overlap_weight {overlap_weight}, tier weights {weights})"
    made = f"TierAwareRouter({replicas}, overlap_weight={overlap_weight}" + ("" if default else f", {weights}") + ")"
    arguments = (replicas, overlap_weight) if default else (replicas, overlap_weight, dict(weights))
    router = call_learner(made, Router, *arguments, scenario=scenario)
    asked = 0
    history: list[str] = []
    wrong: tuple | None = None  # the first wrong credit: reported once the stream has named the mistake
    score: dict[str, int] = {}
    for step, (replica, kind, keys, medium, asks), account in stream.accounts():
        history.append(f"replica {replica} {kind} {len(keys)} block(s) on {medium}")
        call_learner(
            f"on_event({replica}, {kind!r}, keys, {medium!r})",
            router.on_event,
            replica,
            kind,
            list(keys),
            medium,
            scenario=scenario,
        )
        where = f"{scenario}, after event {step + 1} ({'; '.join(history[-3:])})"
        if wrong is not None:  # after a wrong credit, only the credits, to see which mistake explains them
            _score(score, account, _credits(router, asks, replicas, where), asks, weights)
            continue
        for keys_asked, decode in asks:
            asked += 1
            costs, reported = [], []
            for r in range(replicas):
                expected = _credit(account.held[r], keys_asked, weights)
                got = learner_float(
                    call_learner(
                        f"overlap_credit({r}, keys)", router.overlap_credit, r, list(keys_asked), scenario=where
                    ),
                    f"overlap_credit({r}, keys)",
                    where,
                )
                if abs(got - expected) > 1e-9 * max(1.0, abs(expected)):
                    on_gpu = sum(key in account.held[r][GPU] for key in keys_asked)
                    on_cpu = sum(key in account.held[r][CPU] for key in keys_asked)
                    wrong = (
                        f"{where}: a request of {len(keys_asked)} blocks on replica {r} (it holds {on_gpu} of "
                        f"them on the GPU, {on_cpu} on the host)",
                        f"credit {expected:g}",
                        f"credit {got:g}",
                    )
                    _score(score, account, _credits(router, asks, replicas, where), asks, weights)
                    break
                want = overlap_weight * (len(keys_asked) - expected) + decode[r]
                costs.append(want)
                cost = learner_float(
                    call_learner(
                        f"cost({r}, keys, {decode})", router.cost, r, list(keys_asked), list(decode), scenario=where
                    ),
                    f"cost({r}, keys, decode_blocks)",
                    where,
                )
                reported.append(cost)
                if abs(cost - want) > 1e-9 * max(1.0, abs(want)):
                    fail(
                        f"{where}: cost of a request of {len(keys_asked)} blocks on replica {r} (credit "
                        f"{expected:g}, decode_blocks {decode[r]})",
                        round(want, 9),
                        cost,
                        COST_HINT,
                    )
            if wrong is not None:
                break
            best = _lowest(costs)
            got_choice = learner_int(
                call_learner(f"choose(keys, {decode})", router.choose, list(keys_asked), list(decode), scenario=where),
                "choose(keys, decode_blocks)",
                where,
            )
            tied = [r for r in range(replicas) if abs(costs[r] - costs[best]) <= 1e-9 * max(1.0, abs(costs[best]))]
            # Credits of 0.8 add up with rounding: a choice among equal costs that the router's own costs
            # (as floats) really put lower is not a tie broken the wrong way.
            rounding = got_choice in tied and 0 <= got_choice < replicas and reported[got_choice] < reported[best]
            if got_choice != best and not rounding:
                fail(
                    f"{where}: choose for a request of {len(keys_asked)} blocks, decode_blocks {decode}",
                    f"replica {best} (costs {[round(cost, 6) for cost in costs]})",
                    f"replica {got_choice}",
                    CHOOSE_HINT,
                )
    if wrong is not None:
        fail(*wrong, _diagnosis(score))
    return asked


def _credits(router: Any, asks: list, replicas: int, where: str) -> dict[tuple[int, int], float]:
    """The router's credit for every request asked after one event, on every replica (to name its mistake)."""
    return {
        (index, r): learner_float(
            call_learner(f"overlap_credit({r}, keys)", router.overlap_credit, r, list(keys), scenario=where),
            f"overlap_credit({r}, keys)",
            where,
        )
        for index, (keys, _) in enumerate(asks)
        for r in range(replicas)
    }


HIDDEN_EVENTS = 40  # events in a hidden stream


def _hidden(replicas: tuple[int, int], overlap_weights: tuple[float, ...], weights: dict[str, float], name: str):
    """A hidden kind: one stream of ``HIDDEN_EVENTS`` events per overlap weight, on a number of replicas
    drawn from ``replicas``, redrawn until it shows every classic mistake (``_telling``)."""

    def scenario(Router: Any, rng: random.Random) -> None:  # noqa: N803
        for overlap_weight in overlap_weights:
            count = rng.randint(*replicas)
            stream = redraw_until(
                functools.partial(_draw_stream, rng, count, HIDDEN_EVENTS, 4, weights),
                functools.partial(_telling, overlap_weight=overlap_weight),
            )
            _serve_stream(Router, stream, overlap_weight, name)

    return scenario


_HIDDEN = {
    "several replicas with host tiers": _hidden((3, 6), (1.0,), WEIGHTS, "several replicas"),
    "a stronger overlap weight": _hidden((2, 4), (2.0,), WEIGHTS, "overlap_weight 2"),
    "other tier weights": _hidden((2, 4), (1.0,), {GPU: 1.0, CPU: 0.5}, "other tier weights"),
    "one replica": _hidden((1, 1), (1.0, 0.5), WEIGHTS, "one replica"),
}


@check(notebook="11_cache_tiers_and_routing", builds="TierAwareRouter")
def check_tier_aware_router(TierAwareRouter: Any, *, seed: int = 0, hidden: bool = False) -> str:  # noqa: N803
    """KV events per medium, host blocks credited at their weight, Dynamo's cost on the credit, the cheapest replica."""
    return STORY.tell(TierAwareRouter, seed=seed, hidden=hidden)


def _three_streams(TierAwareRouter: Any, rng: random.Random) -> str:  # noqa: N803
    asked = 0
    for replicas, overlap_weight, name in (
        (2, 1.0, "two replicas"),
        (3, 1.0, "three replicas"),
        (3, 2.0, "a stronger overlap"),
    ):
        stream = _draw_stream(rng, replicas, 30, 4, WEIGHTS)
        asked += _serve_stream(TierAwareRouter, stream, overlap_weight, name)
    return f"3 event streams, {asked} requests credited and routed"


STORY = Story(visible=(_three_streams,), hidden=_HIDDEN)
