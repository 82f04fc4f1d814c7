"""The credit rule of ``check_tier_aware_router``, the check's account of the events, and what each
classic mistake answers instead.

A replica's credit for a request: from its first key, while the replica holds the key on some medium,
the largest weight of the media holding it (llm-d's longest-prefix score with tier weights). ``credit``
is the rule (with ``combine=sum`` or ``min``: a router that adds the two media's weights or takes the
smaller); ``credit_after_gaps``, ``blind_credit`` and ``gpu_overlap`` are what a router that goes on
after a gap, ignores the medium, or credits the GPU only answers. ``MediaAccount`` replays the events
as the right router and as each mistaken one does.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "CPU",
    "GPU",
    "MEDIA",
    "WEIGHTS",
    "MediaAccount",
    "blind_credit",
    "credit",
    "credit_after_gaps",
    "gpu_overlap",
    "lowest",
]

GPU, CPU = "GPU", "CPU"
MEDIA = (GPU, CPU)
WEIGHTS = {GPU: 1.0, CPU: 0.8}  # the notebook's TIER_WEIGHTS (llm-d's defaults)


class MediaAccount:
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


def credit(held: dict[str, set], keys: list, weights: dict[str, float], combine: Callable = max) -> float:
    """The leading keys' credit: per key, ``combine`` of the weights of the media holding it."""
    total = 0.0
    for key in keys:
        found = [weights[medium] for medium in MEDIA if key in held[medium]]
        if not found:
            break
        total += combine(found)
    return total


def credit_after_gaps(held: dict[str, set], keys: list, weights: dict[str, float]) -> float:
    """What a router that does not stop at the first missing key answers."""
    return sum(max((weights[m] for m in MEDIA if key in held[m]), default=0.0) for key in keys)


def blind_credit(blind: set, keys: list) -> float:
    return float(next((index for index, key in enumerate(keys) if key not in blind), len(keys)))


def gpu_overlap(held: dict[str, set], keys: list) -> int:
    """What your CacheAwareRouter's overlap_blocks answers: the leading keys held on the GPU."""
    return next((index for index, key in enumerate(keys) if key not in held[GPU]), len(keys))


def lowest(costs: list[float]) -> int:
    """The replica of lowest cost (to 9 decimals: credits of 0.8 add up with rounding), ties to the lowest index."""
    return min(range(len(costs)), key=lambda replica: (round(costs[replica], 9), replica))
