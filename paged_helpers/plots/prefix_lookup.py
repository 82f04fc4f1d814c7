"""Lookup cost of a prefix cache against prompt length: whole-prefix tuple keys vs a hash chain.

``time_lookups`` times lookup functions that the notebook defines (this module holds no prefix
cache): each entry of ``lookups`` is a factory ``make(prompt) -> lookup``, where ``make`` fills
its index with every full block of ``prompt`` and ``lookup()`` walks the prompt block by block,
as ``attach`` does, every block a hit. ``plot_lookup_times`` draws the result on log-log axes,
where a cost growing like n^k is a straight line of slope k.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

LookupFactory = Callable[[list[int]], Callable[[], object]]


def best_time(function: Callable[[], object], budget_s: float = 0.05, least: int = 3, most: int = 7) -> float:
    """The fastest of ``least`` runs of ``function``, or more (up to ``most``) while under ``budget_s``.

    The minimum, not the mean: on a shared machine, noise only ever adds time.
    """
    times: list[float] = []
    while len(times) < least or (sum(times) < budget_s and len(times) < most):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def time_lookups(
    lookups: dict[str, LookupFactory], lengths: Sequence[int], vocab_size: int = 151_936, seed: int = 0
) -> dict[str, list[float]]:
    """Seconds per full-prompt lookup, for each factory in ``lookups`` and each prompt length."""
    if not lengths or min(lengths) < 1:
        raise ValueError(f"lengths must be positive prompt lengths, got {list(lengths)}")
    rng = random.Random(seed)
    prompt = [rng.randrange(vocab_size) for _ in range(max(lengths))]
    seconds: dict[str, list[float]] = {name: [] for name in lookups}
    for length in lengths:
        for name, make in lookups.items():
            lookup = make(prompt[:length])
            seconds[name].append(best_time(lookup))
            del lookup  # release the index before the next one is built
    return seconds


def plot_lookup_times(lengths: Sequence[int], seconds: dict[str, list[float]], block_size: int = 16):
    """Log-log plot of milliseconds per lookup against prompt tokens; returns the figure."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for name, values in seconds.items():
        axes.plot(lengths, [1e3 * s for s in values], marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel(f"prompt tokens (blocks of {block_size}, every block cached)")
    axes.set_ylabel("milliseconds per lookup")
    axes.set_title("Finding a cached prefix: cost against prompt length")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    return figure
