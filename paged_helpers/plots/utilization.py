"""Paged utilisation against block size, for one fixed set of request lengths (notebook 01).

Utilisation is tokens stored / token slots reserved. Each request holds whole blocks, so it
wastes only the unused tail of its last block: between 0 and block_size - 1 slots, about
(block_size - 1) / 2 on average. The figure shows how that tail grows with the block size.
"""

from __future__ import annotations

DEFAULT_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def slots_reserved_paged(lengths: list[int], block_size: int) -> int:
    """Token slots held when each request takes whole blocks of ``block_size`` tokens."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    return sum(-(-length // block_size) * block_size for length in lengths)


def utilization_by_block_size(
    lengths: list[int], block_sizes: tuple[int, ...] = DEFAULT_BLOCK_SIZES
) -> dict[int, float]:
    """{block_size: tokens stored / slots reserved} for the requests of the given lengths."""
    if not lengths:
        raise ValueError("lengths must name at least one request")
    stored = sum(lengths)
    return {size: stored / slots_reserved_paged(lengths, size) for size in block_sizes}


def plot_utilization_vs_block_size(
    lengths: list[int],
    block_sizes: tuple[int, ...] = DEFAULT_BLOCK_SIZES,
    static_capacity: int | None = None,
    highlight: int = 16,
    ax=None,
):
    """Line plot of paged utilisation against block size (log2 axis); returns the Figure.

    ``static_capacity`` adds the static-slot baseline as a horizontal line; ``highlight``
    marks a block size (vLLM's default, 16).
    """
    import matplotlib.pyplot as plt

    utilization = utilization_by_block_size(lengths, block_sizes)
    if ax is None:
        figure, ax = plt.subplots(figsize=(7, 3.8))
    else:
        figure = ax.figure
    sizes = list(utilization)
    ax.plot(sizes, [utilization[s] for s in sizes], marker="o", label="paged blocks")
    if static_capacity is not None:
        static = sum(lengths) / (len(lengths) * static_capacity)
        ax.axhline(static, color="tab:red", linestyle="--", label=f"static slots of {static_capacity} tokens")
    if highlight in utilization:
        ax.annotate(
            f"block size {highlight}: {utilization[highlight]:.1%}",
            (highlight, utilization[highlight]),
            xytext=(10, -25),
            textcoords="offset points",
            arrowprops={"arrowstyle": "->"},
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("block size (tokens per block)")
    ax.set_ylabel("utilisation (stored / reserved)")
    ax.set_title(f"{len(lengths)} requests of {min(lengths)}-{max(lengths)} tokens")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    figure.tight_layout()
    return figure


def plot_utilization_by_workload(
    workloads: tuple[str, ...] | None = None,
    block_sizes: tuple[int, ...] = DEFAULT_BLOCK_SIZES,
    requests: int = 32,
    ax=None,
):
    """Paged utilisation against block size, one line per request-length workload; returns the Figure.

    Each legend entry also gives the static-slot utilisation of that workload (its requests in
    slots of the workload's capacity), so the figure shows how waste depends on the traffic:
    short requests (Alpaca) leave static slots nearly empty and feel large blocks most.
    """
    import matplotlib.pyplot as plt

    from ..workloads import workload_capacity, workload_lengths, workload_names

    names = tuple(workload_names()) if workloads is None else workloads
    if ax is None:
        figure, ax = plt.subplots(figsize=(7, 3.8))
    else:
        figure = ax.figure
    for name in names:
        lengths = workload_lengths(name, requests)
        utilization = utilization_by_block_size(lengths, block_sizes)
        static = sum(lengths) / (len(lengths) * workload_capacity(name))
        sizes = list(utilization)
        ax.plot(sizes, [utilization[s] for s in sizes], marker="o", label=f"{name} (static slots: {static:.1%})")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(block_sizes), [str(s) for s in block_sizes])
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("block size (tokens per block)")
    ax.set_ylabel("utilisation (stored / reserved)")
    ax.set_title(f"{requests} live requests per workload")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    figure.tight_layout()
    return figure
