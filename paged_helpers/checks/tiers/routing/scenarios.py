"""The scenarios of ``check_kv_router``: seeded streams of KV events, drawn before any call to the router.

The check plays the replicas: a stream of events (a replica "stored" the blocks of a prompt's prefix,
or "removed" the last blocks of one, as a radix cache evicts a leaf), each with three requests asked
after it. The visible call feeds three streams (two, four and three replicas); the hidden call
(``hidden=True``) runs every kind of ``_HIDDEN``, each with one stream of ``HIDDEN_EVENTS`` events for
every overlap weight the kind names; the seed picks the replicas (within the kind's range), prompts,
events and requests, and a stream is redrawn until it shows each classic mistake (``_telling``: a
removed leading block, a block held after a gap, a tie for the lowest cost).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any, NamedTuple

from ...speaking.hidden import redraw_until
from ...story import Story
from ..router_streams import chain, draw_asks, overlap, prompts
from .overlap_feed import serve_stream

__all__ = ["STORY"]


class _Replicas:
    """The check's account: what each replica holds, and every key it ever reported stored (what a
    router deaf to "removed" events believes it holds)."""

    def __init__(self, replicas: int) -> None:
        self.held: list[set] = [set() for _ in range(replicas)]
        self.ever: list[set] = [set() for _ in range(replicas)]


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
    drawn_prompts = prompts(rng, 8, 6, longest)
    drawn = []
    for _ in range(events):
        replica = rng.randrange(replicas)
        held_chains = [keys for keys in (chain(p) for p in drawn_prompts) if keys and keys[0] in account.held[replica]]
        if held_chains and rng.random() < 0.4:
            held_chain = [key for key in rng.choice(held_chains) if key in account.held[replica]]
            keys = held_chain[-rng.randint(1, len(held_chain)) :]  # a leaf's blocks: the end of a cached chain
            kind = "removed"
            account.held[replica].difference_update(keys)
        else:
            prompt_chain = chain(rng.choice(drawn_prompts))
            keys = prompt_chain[: rng.randint(1, len(prompt_chain))]
            kind = "stored"
            account.held[replica].update(keys)
        drawn.append((replica, kind, keys, draw_asks(rng, drawn_prompts, replicas)))
    return _Stream(replicas, drawn)


def _telling(stream: _Stream, weight: float) -> bool:
    """Does the stream show each classic mistake? Some request meets a replica that reported removed one
    of its leading blocks (a router deaf to "removed" answers otherwise), one that holds a block after a
    gap (counting every held key answers otherwise), and, with several replicas, a tie for the lowest
    cost (ties to the highest index answer otherwise)."""
    stale = gap = tie = False
    for _, (_, _, _, asks), account in stream.accounts():
        for keys, decode in asks:
            overlaps = [overlap(held, keys) for held in account.held]
            stale = stale or any(overlap(ever, keys) != o for ever, o in zip(account.ever, overlaps, strict=True))
            gap = gap or any(sum(k in held for k in keys) != o for held, o in zip(account.held, overlaps, strict=True))
            costs = [weight * (len(keys) - overlaps[r]) + decode[r] for r in range(stream.replicas)]
            tie = tie or costs.count(min(costs)) > 1
    return stale and gap and (tie or stream.replicas == 1)


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
            serve_stream(Router, stream, weight, name)

    return scenario


_HIDDEN = {
    "many replicas": _hidden((6, 9), (1.0,), 3, "many replicas"),
    "a router that weighs load only": _hidden((2, 4), (0.0,), 3, "overlap_weight 0"),
    "long prompts, a strong overlap weight": _hidden((2, 5), (2.0, 4.0), 8, "long prompts"),
    "one replica": _hidden((1, 1), (1.0, 0.5), 4, "one replica"),
}


def _three_streams(CacheAwareRouter: Any, rng: random.Random) -> str:  # noqa: N803
    asked = 0
    for replicas, weight, name in ((2, 1.0, "two replicas"), (4, 1.0, "four replicas"), (3, 0.5, "a weaker overlap")):
        asked += serve_stream(CacheAwareRouter, _draw_stream(rng, replicas, 30, 4), weight, name)
    return f"3 event streams, {asked} requests routed as Dynamo's cost says"


STORY = Story(visible=(_three_streams,), hidden=_HIDDEN)
