"""Pictures for notebook 10: a radix cache's tree, and hit rate against the block budget.

``draw_tree(radix)`` reads only the tree's public shape, the interface notebook 10 declares:
``radix.root``, and on each node ``tokens`` (the edge's tokens), ``blocks`` (one physical block
per ``block_size`` tokens), ``children`` (a dict of nodes), ``lock_count`` and ``last_used``. It
draws each node as a box (its first tokens, its blocks, when it was last used), marks locked
nodes, and highlights the next eviction candidate under the course's rule: the unlocked leaf
with the smallest ``last_used``. It changes nothing in the tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LOCKED = "#c0392b"
CANDIDATE = "#f5b041"
PLAIN = "#eaf2f8"


def next_eviction(radix: Any) -> Any:
    """The unlocked leaf with the smallest last_used (what evict takes next), or None."""
    leaves, stack = [], list(radix.root.children.values())
    while stack:
        node = stack.pop()
        stack.extend(node.children.values())
        if not node.children and node.lock_count == 0:
            leaves.append(node)
    return min(leaves, key=lambda node: node.last_used, default=None)


def _label(node: Any, shown: int) -> str:
    tokens = list(node.tokens)
    text = " ".join(str(token) for token in tokens[:shown]) + (" …" if len(tokens) > shown else "")
    lines = [f"{len(tokens)} tokens: {text}", f"blocks {list(node.blocks)}", f"last used {node.last_used}"]
    if node.lock_count:
        lines.append(f"locked ×{node.lock_count}")
    return "\n".join(lines)


def draw_tree(radix: Any, shown_tokens: int = 4, title: str = "radix cache"):
    """A matplotlib figure of the tree, root on the left, leaves on the right."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    candidate = next_eviction(radix)
    places, leaves = _places(radix)
    depth = max(d for d, _ in places.values())
    figure, axes = plt.subplots(figsize=(2.0 + 3.0 * depth, 1.0 + 1.1 * max(leaves, 1)))
    stack = [radix.root]
    while stack:
        node = stack.pop()
        x, y = places[id(node)]
        for child in node.children.values():
            cx, cy = places[id(child)]
            axes.plot([x, cx], [y, cy], color="#7f8c8d", zorder=1)
            stack.append(child)
        _draw_node(axes, node, (x, y), root=node is radix.root, candidate=node is candidate, shown=shown_tokens)
    axes.set_xlim(-0.5, depth + 0.6)
    axes.set_ylim(leaves - 0.4, -0.6)
    axes.axis("off")
    axes.legend(
        handles=[
            Patch(facecolor=PLAIN, edgecolor=LOCKED, linewidth=2.5, label="locked (a running request uses it)"),
            Patch(facecolor=CANDIDATE, edgecolor="#7f8c8d", label="next eviction: least recently used unlocked leaf"),
        ],
        loc="lower left",
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0, -0.02),
    )
    axes.set_title(title)
    figure.tight_layout()
    return figure


def _places(radix: Any) -> tuple[dict[int, tuple[int, float]], int]:
    """(id(node) -> (depth, row), the number of leaves): each leaf a row of its own, a parent between its children."""
    places: dict[int, tuple[int, float]] = {}
    rows = [0]

    def place(node: Any, depth: int) -> float:
        children = list(node.children.values())
        if not children:
            row = float(rows[0])
            rows[0] += 1
        else:
            row = sum(place(child, depth + 1) for child in children) / len(children)
        places[id(node)] = (depth, row)
        return row

    place(radix.root, 0)
    return places, rows[0]


def _draw_node(axes: Any, node: Any, at: tuple[int, float], *, root: bool, candidate: bool, shown: int) -> None:
    """The root as a circle; any other node as a box of its label, locked and next-eviction marked."""
    x, y = at
    if root:
        axes.text(
            x,
            y,
            "root",
            ha="center",
            va="center",
            zorder=2,
            bbox={"boxstyle": "circle", "facecolor": "white", "edgecolor": "#7f8c8d"},
        )
        return
    axes.text(
        x,
        y,
        _label(node, shown),
        ha="center",
        va="center",
        fontsize=8,
        zorder=2,
        bbox={
            "boxstyle": "round",
            "facecolor": CANDIDATE if candidate else PLAIN,
            "edgecolor": LOCKED if node.lock_count else "#7f8c8d",
            "linewidth": 2.5 if node.lock_count else 1.0,
        },
    )


def plot_hit_rates(budgets: Sequence[int], rates: dict[str, Sequence[float]], parameters: dict | None = None):
    """Hit rate (prompt tokens served from the cache / prompt tokens) against the block budget.

    The legend and the workload's parameters (a wrapped line, ``parameters`` without the
    vocabulary size) sit below the axes: every text is 9 pt or more, and nothing covers a curve.
    """
    import textwrap

    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.6), layout="constrained")
    for name, values in rates.items():
        axes.plot(budgets, values, marker="o", label=name)
    axes.set_xlabel("block budget (blocks in the pool)")
    axes.set_ylabel("hit rate (prompt tokens from cache)")
    axes.set_ylim(0, 1)
    axes.set_title("Multi-turn chats: hit rate against cache budget")
    axes.grid(True, alpha=0.3)
    figure.legend(loc="outside lower center", ncol=min(len(rates), 3) or 1, fontsize=9, frameon=False)
    if parameters:  # under the x label, so that the layout makes room for it
        shown = ", ".join(f"{k} {v}" for k, v in parameters.items() if k != "vocab_size")
        axes.annotate(
            textwrap.fill(f"workload: {shown}", 80),
            xy=(0.5, 0),
            xycoords=axes.xaxis.label,
            xytext=(0, -4),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=9,
            color="#444",
        )
    return figure
