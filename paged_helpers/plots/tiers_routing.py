"""Notebook 11's figure: hit rate and prefill tokens against the host tier's size and the replica count.

``plot_tiers_and_routing`` draws four panels from plain numbers (the demos' ``series`` functions make
them from a run: ``demos.tiers.series``, ``demos.route.series``), nothing is simulated here:

* top: one replica, a host tier from none to 8 times the GPU pool, one line per write policy; hit
  rate (GPU and host together) on the left, prompt tokens prefilled on the right;
* bottom: 1 to 8 replicas, one line per routing policy, the same two measures.

Every line shares the first point of its row: no host tier (top), one replica (bottom), where the
policies cannot differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Series = Mapping[str, Sequence[tuple[float, float, float]]]  # name -> [(x, hit rate, prefill tokens), ...]


def plot_tiers_and_routing(host: Series, replicas: Series, gpu_blocks: int, title: str | None = None):
    """The figure. ``host``: write policy -> (host blocks, hit rate, prefill tokens) for each host size
    (0 for none); ``replicas``: routing policy -> (replicas, hit rate, prefill tokens); ``gpu_blocks``:
    the GPU pool of one replica (the host sizes are labelled as multiples of it)."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2, figsize=(11, 8), layout="constrained")
    sizes = sorted({point[0] for points in host.values() for point in points})
    position = {size: index for index, size in enumerate(sizes)}
    labels = ["none" if size == 0 else f"{size / gpu_blocks:g}x" for size in sizes]
    for name, points in host.items():
        xs = [position[point[0]] for point in points]
        axes[0, 0].plot(xs, [point[1] for point in points], marker="o", label=name)
        axes[0, 1].plot(xs, [point[2] for point in points], marker="o", label=name)
    for column, what in enumerate(("hit rate (GPU and host)", "prompt tokens prefilled")):
        panel = axes[0, column]
        panel.set_xticks(range(len(sizes)), labels)
        panel.set_xlabel(f"host tier, in GPU pools of {gpu_blocks} blocks (one replica)")
        panel.set_ylabel(what)
        panel.grid(True, alpha=0.3)
    axes[0, 0].set_ylim(0, 1)
    axes[0, 0].set_title("A host tier under one replica's cache")
    axes[0, 1].set_title("Prefill work left")
    axes[0, 1].legend(fontsize=9, frameon=False)
    counts = sorted({point[0] for points in replicas.values() for point in points})
    for name, points in replicas.items():
        xs = [point[0] for point in points]
        axes[1, 0].plot(xs, [point[1] for point in points], marker="o", label=name)
        axes[1, 1].plot(xs, [point[2] for point in points], marker="o", label=name)
    for column, what in enumerate(("hit rate", "prompt tokens prefilled, all replicas")):
        panel = axes[1, column]
        panel.set_xscale("log", base=2)
        panel.set_xticks(counts, [str(count) for count in counts])
        panel.set_xlabel("replicas")
        panel.set_ylabel(what)
        panel.grid(True, alpha=0.3)
    axes[1, 0].set_ylim(0, 1)
    axes[1, 0].set_title("Routing over replicas")
    axes[1, 1].set_title("Prefill work left")
    axes[1, 1].legend(fontsize=9, frameon=False)
    if title:
        figure.suptitle(title, fontsize=11)
    return figure
