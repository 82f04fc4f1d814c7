"""The scenarios of ``check_tier_aware_router``: seeded streams of the events replicas with a host tier
send, drawn before any call to the router.

Blocks "stored" on the GPU when a prompt is cached; an evicted leaf "removed" from the GPU and, when it
was offloaded, "stored" on the CPU; write-through copies "stored" on the CPU while still on the GPU; a
load-back "stored" on the GPU again (the host copy stays); the host's LRU "removed" from the CPU. Three
requests are asked after every event. The visible call feeds three streams; the hidden call
(``hidden=True``) runs every kind of ``_HIDDEN`` in full: one stream of ``HIDDEN_EVENTS`` events for each
overlap weight of the kind, on a number of replicas drawn from the kind's range, redrawn until it shows
every classic mistake (``_telling``) and, with several replicas, a tie for the lowest cost. One kind
changes the tier weights: a router that wrote 0.8 where it should read ``tier_weights`` fails it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any, NamedTuple

from ...speaking.hidden import redraw_until
from ...story import Story
from ..router_streams import chain, draw_asks, prompts
from .credit_feed import serve_stream
from .credits import (
    CPU,
    GPU,
    MEDIA,
    WEIGHTS,
    MediaAccount,
    blind_credit,
    credit,
    credit_after_gaps,
    gpu_overlap,
    lowest,
)

__all__ = ["STORY"]


class _Stream(NamedTuple):
    """A stream drawn before any call to the router: each event (replica, kind, keys, medium) with the
    requests asked after it, (keys, decode_blocks) each."""

    replicas: int
    weights: dict[str, float]
    events: list[tuple[int, str, list, str, list[tuple[list, list[int]]]]]

    def accounts(self) -> Iterator[tuple[int, tuple, MediaAccount]]:
        account = MediaAccount(self.replicas)
        for index, (replica, kind, keys, medium, asks) in enumerate(self.events):
            account.apply(replica, kind, keys, medium)
            yield index, (replica, kind, keys, medium, asks), account


def _draw_stream(rng: random.Random, replicas: int, events: int, longest: int, weights: dict[str, float]) -> _Stream:
    """``events`` events of replicas with a host tier, over 8 prompts sharing stems, 3 requests after each."""
    held = [{medium: set() for medium in MEDIA} for _ in range(replicas)]
    drawn_prompts = prompts(rng, 8, 6, longest)
    chains = [chain(prompt) for prompt in drawn_prompts]
    drawn: list[tuple[int, str, list, str, list]] = []

    def emit(replica: int, kind: str, keys: list, medium: str) -> None:
        if kind == "stored":
            held[replica][medium].update(keys)
        else:
            held[replica][medium].difference_update(keys)
        drawn.append((replica, kind, list(keys), medium, draw_asks(rng, drawn_prompts, replicas)))

    while len(drawn) < events:
        replica = rng.randrange(replicas)
        on = held[replica]
        gpu_chains = [[key for key in prompt_keys if key in on[GPU]] for prompt_keys in chains]
        gpu_chains = [prompt_keys for prompt_keys in gpu_chains if prompt_keys]
        cpu_keys = sorted(on[CPU], key=lambda key: (len(key), key))
        roll = rng.random()
        if gpu_chains and roll < 0.3:  # eviction of a leaf: off the GPU, offloaded to the host or dropped
            picked = rng.choice(gpu_chains)
            keys = picked[-rng.randint(1, len(picked)) :]
            emit(replica, "removed", keys, GPU)
            if rng.random() < 0.7 and len(drawn) < events:
                emit(replica, "stored", keys, CPU)
        elif cpu_keys and roll < 0.45:  # the host's LRU drops entries
            emit(replica, "removed", rng.sample(cpu_keys, rng.randint(1, min(3, len(cpu_keys)))), CPU)
        elif cpu_keys and roll < 0.55:  # a load-back: on the GPU again, the host copy kept
            picked = rng.choice(chains)
            keys = [key for key in picked if key in on[CPU]]
            emit(replica, "stored", keys or cpu_keys[:1], GPU)
        else:  # a prompt cached on the GPU; with write-through, copied to the host as well
            picked = rng.choice(chains)
            keys = picked[: rng.randint(1, len(picked))]
            emit(replica, "stored", keys, GPU)
            if rng.random() < 0.35 and len(drawn) < events:
                emit(replica, "stored", keys, CPU)
    return _Stream(replicas, dict(weights), drawn)


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
                right = credit(held, keys, weights)
                costs.append(overlap_weight * (len(keys) - right) + decode[replica])
                gpu_costs.append(overlap_weight * (len(keys) - gpu_overlap(held, keys)) + decode[replica])
                seen["stale"] |= credit(account.ever[replica], keys, weights) != right
                seen["medium"] |= blind_credit(account.blind[replica], keys) != right
                seen["removal"] |= credit(account.both_gone[replica], keys, weights) != right
                seen["both"] |= credit(held, keys, weights, sum) != right
                seen["gap"] |= credit_after_gaps(held, keys, weights) != right
                seen["gpu_only"] |= gpu_overlap(held, keys) != right
            seen["tie"] |= sum(abs(cost - min(costs)) < 1e-9 for cost in costs) > 1
            seen["choice"] |= lowest(gpu_costs) != lowest(costs)
    return all(seen.values())


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
            serve_stream(Router, stream, overlap_weight, name)

    return scenario


_HIDDEN = {
    "several replicas with host tiers": _hidden((3, 6), (1.0,), WEIGHTS, "several replicas"),
    "a stronger overlap weight": _hidden((2, 4), (2.0,), WEIGHTS, "overlap_weight 2"),
    "other tier weights": _hidden((2, 4), (1.0,), {GPU: 1.0, CPU: 0.5}, "other tier weights"),
    "one replica": _hidden((1, 1), (1.0, 0.5), WEIGHTS, "one replica"),
}


def _three_streams(TierAwareRouter: Any, rng: random.Random) -> str:  # noqa: N803
    asked = 0
    for replicas, overlap_weight, name in (
        (2, 1.0, "two replicas"),
        (3, 1.0, "three replicas"),
        (3, 2.0, "a stronger overlap"),
    ):
        stream = _draw_stream(rng, replicas, 30, 4, WEIGHTS)
        asked += serve_stream(TierAwareRouter, stream, overlap_weight, name)
    return f"3 event streams, {asked} requests credited and routed"


STORY = Story(visible=(_three_streams,), hidden=_HIDDEN)
