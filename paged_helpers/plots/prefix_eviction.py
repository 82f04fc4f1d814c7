"""Why a prefix cache must evict a prompt's tail before its root: a static drawing.

``plot_eviction_orders`` draws one prompt of three full blocks, cached, and what one eviction
leaves under two LRU orders. The picture is drawn from the numbers given here; no prefix cache
runs (this package holds none). Each row is the cache's LRU list, least recently used on the left.

* Root first (a walk that touches block 0, then 1, then 2): block 0's entry is the least recently
  used, so evict drops it. The entries of blocks 1 and 2 stay, each holding a reference on its
  block, but attach stops at the first miss, so no prompt can ever reach them again.
* Tail first: block 2's entry goes; blocks 0 and 1 are still a prefix that attach can reuse.
"""

from __future__ import annotations

from collections.abc import Sequence

ROOT_FIRST = "root first"
TAIL_FIRST = "tail first"

# Colours by an entry's fate after the eviction.
KEPT, DROPPED, STRANDED = "#9ecae1", "#eeeeee", "#fc9272"
_FATE_COLOURS = {"kept": KEPT, "dropped": DROPPED, "stranded": STRANDED}


def entry_fates(order: str, blocks: int = 3, dropped: int = 1) -> tuple[list[int], dict[int, str]]:
    """The LRU list (logical block indices, least recently used first) and each index's fate.

    ``order`` is ROOT_FIRST or TAIL_FIRST: the order in which attach/remember last touched the
    prompt's entries. Evict drops the first ``dropped`` of the list; an entry survives reachable
    only if every earlier block of the prompt survives too.
    """
    if order not in (ROOT_FIRST, TAIL_FIRST):
        raise ValueError(f"order must be {ROOT_FIRST!r} or {TAIL_FIRST!r}, got {order!r}")
    if not 0 <= dropped <= blocks:
        raise ValueError(f"dropped must be in 0..{blocks}, got {dropped}")
    lru = list(range(blocks)) if order == ROOT_FIRST else list(reversed(range(blocks)))
    gone = set(lru[:dropped])
    fates = {}
    for index in range(blocks):
        if index in gone:
            fates[index] = "dropped"
        elif any(earlier in gone for earlier in range(index)):
            fates[index] = "stranded"
        else:
            fates[index] = "kept"
    return lru, fates


def reusable_tokens(fates: dict[int, str], block_size: int) -> int:
    """Tokens a re-attach of the same prompt reuses: the run of kept blocks from block 0."""
    reused = 0
    for index in sorted(fates):
        if fates[index] != "kept":
            break
        reused += block_size
    return reused


def plot_eviction_orders(physical: Sequence[int] = (4, 8, 12), block_size: int = 4, dropped: int = 1):
    """Two rows (root first, tail first): the LRU list after ``evict`` dropped ``dropped`` entries."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    figure, axes = plt.subplots(figsize=(7.6, 2.9))
    for row, order in enumerate((ROOT_FIRST, TAIL_FIRST)):
        _draw_order(axes, 1.3 * (1 - row), order, physical, block_size, dropped)
    axes.annotate("", xy=(4.6, -0.35), xytext=(0, -0.35), arrowprops={"arrowstyle": "->"})
    axes.text(
        2.3,
        -0.55,
        "least recently used -> most recently used (evict starts on the left)",
        ha="center",
        va="top",
        fontsize=8,
    )
    axes.legend(
        handles=[
            Patch(facecolor=_FATE_COLOURS[f], edgecolor="black", label=f) for f in ("dropped", "stranded", "kept")
        ],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        frameon=False,
    )
    axes.set_xlim(-2.2, 1.6 * len(physical) + 3.2)
    axes.set_ylim(-0.9, 2.3)
    axes.axis("off")
    axes.set_title(f"One prompt of {len(physical)} cached blocks, after evict dropped {dropped} entry", fontsize=10)
    figure.tight_layout()
    return figure


def _draw_order(axes, y: float, order: str, physical: Sequence[int], block_size: int, dropped: int) -> None:
    """One row at height ``y``: the LRU list under ``order`` after the eviction, and what a re-attach reuses."""
    from matplotlib.patches import Rectangle

    lru, fates = entry_fates(order, len(physical), dropped)
    axes.text(-0.2, y + 0.4, f"{order}", ha="right", va="center", fontsize=10, fontweight="bold")
    for slot, index in enumerate(lru):
        fate = fates[index]
        axes.add_patch(
            Rectangle(
                (1.6 * slot, y),
                1.4,
                0.8,
                facecolor=_FATE_COLOURS[fate],
                edgecolor="black",
                hatch="//" if fate == "dropped" else None,
            )
        )
        key_end = (index + 1) * block_size
        axes.text(
            1.6 * slot + 0.7,
            y + 0.4,
            f"prompt[:{key_end}]\nblock {physical[index]}\n{fate}",
            ha="center",
            va="center",
            fontsize=8,
        )
    held = sum(fate == "stranded" for fate in fates.values())
    axes.text(
        1.6 * len(lru) + 0.1,
        y + 0.4,
        f"re-attach reuses {reusable_tokens(fates, block_size)} tokens\n{held} block(s) held, unreachable",
        va="center",
        fontsize=9,
    )
