"""Throughput and KV memory over time for engines serving the same workload (notebook 08).

Reads only ``EngineMetrics.timeline``: one record per engine step with the time, the tokens
generated so far, the KV token slots held and the tokens actually stored in them. The
upper panel is the throughput; the lower one shows each engine's memory held (solid) against
what it holds real tokens in (dotted): for static slots, mostly reserved-but-empty space.
"""

from __future__ import annotations


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


def plot_engine_timelines(metrics_by_name: dict, budget_tokens: int | None = None, window_steps: int = 10):
    """Two stacked panels (tokens/s; KV token slots held and stored) against seconds; returns the Figure.

    ``metrics_by_name`` maps a label to an EngineMetrics; ``budget_tokens`` draws the shared
    memory budget as a dashed line.
    """
    import matplotlib.pyplot as plt

    if not metrics_by_name:
        raise ValueError("metrics_by_name must hold at least one engine's metrics")
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for name, metrics in metrics_by_name.items():
        timeline = metrics.timeline
        times, rates = rolling_throughput(timeline, window_steps)
        line = top.plot(
            times, rates, label=f"{name}: {metrics.summary()['tokens_per_second']:.0f} tokens/s overall"
        )
        color = line[0].get_color()
        seconds = [r.time for r in timeline]
        bottom.step(
            seconds,
            [r.kv_tokens_reserved for r in timeline],
            where="post",
            color=color,
            label=f"{name}: held",
        )
        bottom.step(
            seconds,
            [r.kv_tokens_stored for r in timeline],
            where="post",
            color=color,
            linestyle=":",
            label=f"{name}: tokens stored",
        )
    if budget_tokens is not None:
        bottom.axhline(
            budget_tokens, color="grey", linestyle="--", label=f"budget: {budget_tokens} token slots"
        )
    top.set_ylabel(f"tokens / s\n(last {window_steps} steps)")
    top.set_title("Throughput and KV memory over time, same workload, same memory budget")
    top.legend(loc="upper right", fontsize=8)
    bottom.set_ylabel("KV token slots")
    bottom.set_xlabel("seconds spent in the engine's steps")
    bottom.legend(loc="center right", fontsize=8)
    figure.tight_layout()
    return figure
