"""Throughput and KV memory over time for engines serving the same workload (notebook 08).

Reads only ``EngineMetrics.timeline``: one record per engine step with the time, the tokens
generated so far, the KV token slots held and the tokens actually stored in them. The
upper panel is the throughput; the lower one shows each engine's memory held against what it
holds real tokens in (dotted): for static slots, mostly reserved-but-empty space.

Memory held can change at every step (static slots swing between one slot and two as requests
finish and the next one is admitted a step later), so it is drawn per time bin: a line at the
time-weighted mean of the bin and a shaded band from the lowest to the highest value held in it,
not thousands of vertical jumps. The legend sits below the axes, never on the data.
"""

from __future__ import annotations

import math

__all__ = ["held_over_time", "plot_engine_timelines", "rolling_throughput"]

HELD_BINS = 50  # bins across the longest timeline; the other engines use the same bin width


def rolling_throughput(timeline, window_steps: int = 10) -> tuple[list[float], list[float]]:
    """(times, tokens per second over the last ``window_steps`` steps) from a metrics timeline."""
    if window_steps < 1:
        raise ValueError(f"window_steps must be >= 1, got {window_steps}")
    times, rates = [], []
    for index in range(window_steps, len(timeline)):
        early, late = timeline[index - window_steps], timeline[index]
        elapsed = late.time - early.time
        if elapsed > 0:
            times.append(late.time)
            rates.append((late.tokens_generated - early.tokens_generated) / elapsed)
    return times, rates


def held_over_time(timeline, bin_seconds: float) -> tuple[list[float], list[float], list[float], list[float]]:
    """KV token slots held, per time bin: (edges, mean, lowest, highest); one bin fewer than edges.

    The value a step records holds from its time until the next step's (a step function); the
    mean is weighted by time, the lowest and highest are over every value held inside the bin.
    Bins start at the first step and are ``bin_seconds`` wide (the last one ends at the last step).
    """
    if bin_seconds <= 0:
        raise ValueError(f"bin_seconds must be > 0, got {bin_seconds}")
    times = [record.time for record in timeline]
    values = [record.kv_tokens_reserved for record in timeline]
    if len(times) < 2 or times[-1] <= times[0]:
        return times[:1] * 2, values[:1], values[:1], values[:1]
    count = max(1, math.ceil((times[-1] - times[0]) / bin_seconds - 1e-9))
    edges = [min(times[0] + b * bin_seconds, times[-1]) for b in range(count)] + [times[-1]]
    means, lows, highs = [], [], []
    segment = 0  # the step whose value holds at the start of the current bin
    for left, right in zip(edges, edges[1:], strict=False):
        while segment + 1 < len(times) - 1 and times[segment + 1] <= left:
            segment += 1
        area, held, index = 0.0, [], segment
        while index < len(times) - 1 and times[index] < right:
            overlap = min(times[index + 1], right) - max(times[index], left)
            if overlap > 0:
                area += overlap * values[index]
                held.append(values[index])
            index += 1
        held = held or [values[segment]]
        means.append(area / (right - left) if right > left else float(held[0]))
        lows.append(min(held))
        highs.append(max(held))
    return edges, means, lows, highs


def plot_engine_timelines(metrics_by_name: dict, budget_tokens: int | None = None, window_steps: int = 10):
    """Two stacked panels (tokens/s; KV token slots held and stored) against seconds; returns the Figure.

    ``metrics_by_name`` maps a label to an EngineMetrics; ``budget_tokens`` draws the shared
    memory budget as a dashed line. One legend for both panels, below them.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if not metrics_by_name:
        raise ValueError("metrics_by_name must hold at least one engine's metrics")
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.4), sharex=True, layout="constrained")
    spans = [m.timeline[-1].time - m.timeline[0].time for m in metrics_by_name.values() if len(m.timeline) > 1]
    bin_seconds = max(spans, default=0) / HELD_BINS or 1.0
    engines = [
        _draw_engine(top, bottom, name, metrics, window_steps, bin_seconds) for name, metrics in metrics_by_name.items()
    ]
    ink = "#333333"
    styles = [
        (Patch(facecolor=ink, alpha=0.2, linewidth=0), Line2D([], [], color=ink, linewidth=1.8)),
        Line2D([], [], color=ink, linestyle=":"),
    ]
    style_labels = [
        f"held: mean per {_duration(bin_seconds)}, shaded from lowest to highest",
        "tokens stored (a block shared by k sequences counts k times)",
    ]
    if budget_tokens is not None:
        bottom.axhline(budget_tokens, color="grey", linestyle="--")
        styles.append(Line2D([], [], color="grey", linestyle="--"))
        style_labels.append(f"budget: {budget_tokens} token slots")
    top.set_ylabel(f"tokens / s\n(last {window_steps} steps)")
    top.set_title("Throughput and KV memory over time, same workload, same memory budget")
    bottom.set_ylabel("KV token slots")
    bottom.set_xlabel("seconds spent in the engine's steps")
    bottom.set_ylim(bottom=0)
    figure.legend(
        handles=engines + styles,
        labels=[line.get_label() for line in engines] + style_labels,
        loc="outside lower center",
        ncol=1 if len(engines) > 2 else 2,
        fontsize=9,
        frameon=False,
    )
    return figure


def _draw_engine(top, bottom, name: str, metrics, window_steps: int, bin_seconds: float):
    """One engine in both panels (throughput; memory held per bin, and stored); returns its legend line."""
    from matplotlib.lines import Line2D

    timeline = metrics.timeline
    times, rates = rolling_throughput(timeline, window_steps)
    label = f"{name}: {metrics.summary()['tokens_per_second']:.0f} tokens/s overall"
    color = top.plot(times, rates, label=label)[0].get_color()
    line = Line2D([], [], color=color, linewidth=2, label=label)
    edges, means, lows, highs = held_over_time(timeline, bin_seconds)
    if means:
        bottom.fill_between(
            edges, lows + lows[-1:], highs + highs[-1:], step="post", color=color, alpha=0.2, linewidth=0
        )
        bottom.stairs(means, edges, baseline=None, color=color, linewidth=1.8)
    bottom.step(
        [r.time for r in timeline],
        [r.kv_tokens_stored for r in timeline],
        where="post",
        color=color,
        linestyle=":",
    )
    return line


def _duration(seconds: float) -> str:
    """A bin width people read: '11 ms', '1.5 s'."""
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2g} ms"
    return f"{seconds * 1e6:.2g} µs"
