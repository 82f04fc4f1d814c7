"""check_kv_router: a cache-aware router fed by the replicas' KV events (notebook 11).

The check plays the replicas: a seeded stream of KV events (a replica "stored" the blocks of a
prompt's prefix, or "removed" the last blocks of one, as a radix cache evicts a leaf) interleaved
with requests. A block's key is the tuple of every token from the start of the prompt to the end
of the block, so keys of one prompt chain. After every event the check asks the learner's router,
for each request, each replica's overlap (how many of the request's keys, from the first, the
replica holds by its events), each replica's cost in Dynamo's form (``overlap_weight x blocks to
prefill + blocks in decode``) and its choice (the lowest cost, ties to the lowest index), and
compares them with its own account of the events. A router that keeps blocks a replica reported
removed (stale events) is named as such.

The hidden call (``hidden=True``) runs every kind of ``_HIDDEN``, each with one stream of
``HIDDEN_EVENTS`` events for every overlap weight the kind names; the seed picks the replicas (within
the kind's range), prompts, events and requests, and a stream is redrawn until it shows each classic
mistake (``_telling``: a removed leading block, a block held after a gap, a tie for the lowest cost).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any, NamedTuple

from ..reading.calls import call_learner
from ..reading.strict import learner_float, learner_int
from ..registry import check
from ..speaking.failure import fail
from ..speaking.hidden import redraw_until
from ..story import Story

__all__ = ["check_kv_router"]

BLOCK = 4

STALE_HINT = (
    "a 'removed' event means the replica evicted those blocks: take them out of what the router thinks "
    "the replica holds, or requests go to replicas that no longer have their prefix (and prefill it all)"
)
LEADING_HINT = (
    "only a prefix can be reused: count the request's keys from the first and stop at the first key the "
    "replica does not hold"
)
STORED_HINT = "a 'stored' event adds its keys to what the replica holds (the router knows nothing else)"
COST_HINT = "cost = overlap_weight x (the request's blocks - its overlap on the replica) + decode_blocks[replica]"
CHOOSE_HINT = "choose returns the replica of lowest cost; among equal costs, the lowest replica index"


def _chain(tokens: list[int]) -> list[tuple[int, ...]]:
    return [tuple(tokens[:end]) for end in range(BLOCK, len(tokens) + 1, BLOCK)]


def _overlap(held: set, keys: list) -> int:
    """The expected overlap: the index of the first key ``held`` lacks (all of them when it lacks none)."""
    return next((index for index, key in enumerate(keys) if key not in held), len(keys))


class _Replicas:
    """The check's account: what each replica holds, and every key it ever reported stored (what a
    router deaf to "removed" events believes it holds)."""

    def __init__(self, replicas: int) -> None:
        self.held: list[set] = [set() for _ in range(replicas)]
        self.ever: list[set] = [set() for _ in range(replicas)]


def _prompts(rng: random.Random, count: int, vocab: int, longest: int) -> list[list[int]]:
    """Prompts sharing prefixes: a few stems, each prompt a stem plus its own blocks."""
    stems = [[rng.randrange(vocab) for _ in range(BLOCK * rng.randint(1, 3))] for _ in range(3)]
    return [
        rng.choice(stems) + [rng.randrange(vocab) for _ in range(BLOCK * rng.randint(1, longest))] for _ in range(count)
    ]


class _Stream(NamedTuple):
    """A stream drawn before any call to the router: each event (replica, "stored" or "removed", its
    keys) and the requests asked after it, (keys, decode_blocks) each."""

    replicas: int
    events: list[tuple[int, str, list, list[tuple[list, list[int]]]]]

    def accounts(self) -> Iterator[tuple[int, tuple[int, str, list, list], _Replicas]]:
        """(index, event, the account after it) for each event in turn (one account, updated in place)."""
        account = _Replicas(self.replicas)
        for index, (replica, kind, keys, asks) in enumerate(self.events):
            if kind == "removed":
                account.held[replica].difference_update(keys)
            else:
                account.held[replica].update(keys)
                account.ever[replica].update(keys)
            yield index, (replica, kind, keys, asks), account


def _draw_stream(rng: random.Random, replicas: int, events: int, longest: int) -> _Stream:
    """``events`` events on ``replicas`` replicas over 8 prompts sharing stems, 3 requests after each."""
    account = _Replicas(replicas)
    prompts = _prompts(rng, 8, 6, longest)
    drawn = []
    for _ in range(events):
        replica = rng.randrange(replicas)
        held_chains = [chain for chain in (_chain(p) for p in prompts) if chain and chain[0] in account.held[replica]]
        if held_chains and rng.random() < 0.4:
            chain = [key for key in rng.choice(held_chains) if key in account.held[replica]]
            keys = chain[-rng.randint(1, len(chain)) :]  # a leaf's blocks: the end of a cached chain
            kind = "removed"
            account.held[replica].difference_update(keys)
        else:
            chain = _chain(rng.choice(prompts))
            keys = chain[: rng.randint(1, len(chain))]
            kind = "stored"
            account.held[replica].update(keys)
        asks = []
        for prompt in rng.sample(prompts, 3):
            keys_asked = _chain(prompt)
            asks.append((keys_asked, [rng.randrange(0, 3 * len(keys_asked) + 1) for _ in range(replicas)]))
        drawn.append((replica, kind, keys, asks))
    return _Stream(replicas, drawn)


def _telling(stream: _Stream, weight: float) -> bool:
    """Does the stream show each classic mistake? Some request meets a replica that reported removed one
    of its leading blocks (a router deaf to "removed" answers otherwise), one that holds a block after a
    gap (counting every held key answers otherwise), and, with several replicas, a tie for the lowest
    cost (ties to the highest index answer otherwise)."""
    stale = gap = tie = False
    for _, (_, _, _, asks), account in stream.accounts():
        for keys, decode in asks:
            overlaps = [_overlap(held, keys) for held in account.held]
            stale = stale or any(_overlap(ever, keys) != o for ever, o in zip(account.ever, overlaps, strict=True))
            gap = gap or any(sum(k in held for k in keys) != o for held, o in zip(account.held, overlaps, strict=True))
            costs = [weight * (len(keys) - overlaps[r]) + decode[r] for r in range(stream.replicas)]
            tie = tie or costs.count(min(costs)) > 1
    return stale and gap and (tie or stream.replicas == 1)


def _run_stream(
    Router: Any,
    rng: random.Random,
    *,
    replicas: int,
    events: int,
    weight: float,
    longest: int,
    name: str,  # noqa: N803
) -> int:
    return _serve_stream(Router, _draw_stream(rng, replicas, events, longest), weight, name)


def _serve_stream(Router: Any, stream: _Stream, weight: float, name: str) -> int:  # noqa: N803
    """Feed ``stream`` to a new router, asking after every event; returns how many requests were asked."""
    replicas = stream.replicas
    scenario = f"{name} ({replicas} replicas, overlap_weight {weight})"
    router = call_learner(
        f"CacheAwareRouter({replicas}, overlap_weight={weight})", Router, replicas, weight, scenario=scenario
    )
    asked = 0
    history: list[str] = []
    for step, (replica, kind, keys, asks), account in stream.accounts():
        history.append(f"replica {replica} {kind} {len(keys)} block(s)")
        call_learner(
            f"on_event({replica}, {kind!r}, keys)", router.on_event, replica, kind, list(keys), scenario=scenario
        )
        where = f"{scenario}, after event {step + 1} ({'; '.join(history[-3:])})"
        for keys, decode in asks:
            asked += 1
            for r in range(replicas):
                expected = _overlap(account.held[r], keys)
                got = learner_int(
                    call_learner(f"overlap_blocks({r}, keys)", router.overlap_blocks, r, list(keys), scenario=where),
                    f"overlap_blocks({r}, keys)",
                    where,
                )
                if got != expected:
                    stale = got == _overlap(account.ever[r], keys)
                    hint = STALE_HINT if stale else (LEADING_HINT if got > expected else STORED_HINT)
                    fail(
                        f"{where}: a request of {len(keys)} blocks on replica {r}",
                        f"overlap {expected} (block {expected} of the request"
                        + (" was reported removed by the replica)" if stale else " is not held by the replica)")
                        if expected < len(keys)
                        else f"overlap {expected} (every block held)",
                        f"overlap {got}",
                        hint,
                    )
                want = weight * (len(keys) - expected) + decode[r]
                cost = learner_float(
                    call_learner(
                        f"cost({r}, keys, {decode})", router.cost, r, list(keys), list(decode), scenario=where
                    ),
                    f"cost({r}, keys, decode_blocks)",
                    where,
                )
                if abs(cost - want) > 1e-9 * max(1.0, abs(want)):
                    fail(
                        f"{where}: cost of a request of {len(keys)} blocks on replica {r} (overlap {expected}, "
                        f"decode_blocks {decode[r]})",
                        want,
                        cost,
                        COST_HINT,
                    )
            costs = [weight * (len(keys) - _overlap(account.held[r], keys)) + decode[r] for r in range(replicas)]
            best = min(range(replicas), key=lambda r: (costs[r], r))
            got = learner_int(
                call_learner(f"choose(keys, {decode})", router.choose, list(keys), list(decode), scenario=where),
                "choose(keys, decode_blocks)",
                where,
            )
            if got != best:
                fail(
                    f"{where}: choose for a request of {len(keys)} blocks, decode_blocks {decode}",
                    f"replica {best} (costs {costs})",
                    f"replica {got}",
                    CHOOSE_HINT,
                )
    return asked


HIDDEN_EVENTS = 40  # events in a hidden stream: the most the drawn streams ever had
def _hidden(replicas: tuple[int, int], weights: tuple[float, ...], longest: int, name: str):
    """A hidden kind: one stream of ``HIDDEN_EVENTS`` events for each of ``weights``, on a number of
    replicas drawn from ``replicas``, each stream redrawn until it shows every classic mistake
    (``_telling``)."""

    def scenario(Router: Any, rng: random.Random) -> None:  # noqa: N803
        for weight in weights:
            count = rng.randint(*replicas)
            stream = redraw_until(
                functools.partial(_draw_stream, rng, count, HIDDEN_EVENTS, longest),
                functools.partial(_telling, weight=weight),
            )
            _serve_stream(Router, stream, weight, name)

    return scenario


_HIDDEN = {
    "many replicas": _hidden((6, 9), (1.0,), 3, "many replicas"),
    "a router that weighs load only": _hidden((2, 4), (0.0,), 3, "overlap_weight 0"),
    "long prompts, a strong overlap weight": _hidden((2, 5), (2.0, 4.0), 8, "long prompts"),
    "one replica": _hidden((1, 1), (1.0, 0.5), 4, "one replica"),
}


@check(notebook="11_cache_tiers_and_routing", builds="CacheAwareRouter")
def check_kv_router(CacheAwareRouter: Any, *, seed: int = 0, hidden: bool = False) -> str:  # noqa: N803
    """Overlaps from the replicas' KV events (stored and removed), Dynamo's cost, the cheapest replica."""
    return STORY.tell(CacheAwareRouter, seed=seed, hidden=hidden)


def _three_streams(CacheAwareRouter: Any, rng: random.Random) -> str:  # noqa: N803
    asked = 0
    for replicas, weight, name in ((2, 1.0, "two replicas"), (4, 1.0, "four replicas"), (3, 0.5, "a weaker overlap")):
        asked += _run_stream(CacheAwareRouter, rng, replicas=replicas, events=30, weight=weight, longest=4, name=name)
    return f"3 event streams, {asked} requests routed as Dynamo's cost says"


STORY = Story(visible=(_three_streams,), hidden=_HIDDEN)
