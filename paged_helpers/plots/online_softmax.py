"""Notebook 07's online softmax: the state (m, l, acc) of one program after each block it reads.

``online_softmax_steps`` runs the update of notebook 07's kernel in plain Python, one block of
scores at a time, and keeps every intermediate value; ``plot_online_softmax`` draws them: the
scores with the running max ``m``, the running sum ``l`` and the accumulator ``acc`` as bars
(the part carried over from earlier blocks after the rescale by ``alpha``, plus the new block's
part, with the value before the rescale dashed), and ``acc / l`` beside the exact answer.
``acc`` is drawn for ``head_dim = 1``: one number per token stands in for each value vector.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["EXAMPLE_SCORES", "EXAMPLE_VALUES", "Step", "online_softmax_steps", "plot_online_softmax"]

# Four blocks of 4: m grows at block 0 (from -inf), stays at block 1, grows at block 2, stays at block 3.
EXAMPLE_SCORES = (0.5, 1.0, -0.3, 0.2, 0.1, -0.5, 0.8, 0.3, 2.5, 0.4, 1.1, -0.2, 1.9, 0.7, 2.2, 0.6)
EXAMPLE_VALUES = (0.8, 1.2, 0.4, 0.6, 1.0, 0.2, 0.9, 0.5, 0.3, 0.7, 0.6, 1.1, 0.4, 0.9, 0.2, 1.0)

_BLOCK_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
_CARRIED = "#BBBBBB"


@dataclass(frozen=True)
class Step:
    """The state after one block: ``*_old`` before it, ``alpha = exp(m_old - m)`` the rescale."""

    block: int
    m_old: float
    m: float
    alpha: float
    l_old: float
    block_l: float  # sum(exp(s - m)) over this block's scores
    l: float  # l_old * alpha + block_l
    acc_old: float
    block_acc: float  # sum(exp(s - m) * v) over this block
    acc: float  # acc_old * alpha + block_acc

    @property
    def output(self) -> float:
        """acc / l: the exact attention output over every token read so far."""
        return self.acc / self.l


def online_softmax_steps(scores: Sequence[float], values: Sequence[float], block_size: int) -> list[Step]:
    """The kernel's update, block by block, in float64: m = -inf, l = 0, acc = 0 before block 0."""
    if len(scores) != len(values) or not scores:
        raise ValueError(f"scores and values need the same, non-zero length, got {len(scores)} and {len(values)}")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")
    m, l, acc, steps = -math.inf, 0.0, 0.0, []
    for block, start in enumerate(range(0, len(scores), block_size)):
        s = [float(x) for x in scores[start : start + block_size]]
        v = [float(x) for x in values[start : start + block_size]]
        m_new = max(m, *s)
        alpha = math.exp(m - m_new)  # exp(-inf) = 0 on the first block, where l and acc are 0 anyway
        p = [math.exp(x - m_new) for x in s]
        block_l, block_acc = sum(p), sum(w * x for w, x in zip(p, v, strict=True))
        new_l, new_acc = l * alpha + block_l, acc * alpha + block_acc
        steps.append(Step(block, m, m_new, alpha, l, block_l, new_l, acc, block_acc, new_acc))
        m, l, acc = m_new, new_l, new_acc
    return steps


def plot_online_softmax(
    scores: Sequence[float] = EXAMPLE_SCORES, values: Sequence[float] = EXAMPLE_VALUES, block_size: int = 4
):
    """Draw the state after each block (see the module). Returns the matplotlib Figure."""
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one
    from matplotlib.patches import Patch

    steps = online_softmax_steps(scores, values, block_size)
    weights = [math.exp(x - max(scores)) for x in scores]
    exact = sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights)
    colours = [_BLOCK_COLOURS[step.block % len(_BLOCK_COLOURS)] for step in steps]
    blocks = [step.block for step in steps]
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.6))
    (ax_m, ax_l), (ax_acc, ax_out) = axes
    _draw_scores(ax_m, steps, colours, scores, block_size)
    _draw_bars(
        ax_l,
        blocks,
        colours,
        [step.l_old for step in steps],
        [step.l_old * step.alpha for step in steps],
        [step.block_l for step in steps],
        "l = l·α + sum(exp(s − m))",
    )
    _draw_bars(
        ax_acc,
        blocks,
        colours,
        [step.acc_old for step in steps],
        [step.acc_old * step.alpha for step in steps],
        [step.block_acc for step in steps],
        "acc = acc·α + sum(exp(s − m)·v)   (head_dim = 1)",
    )
    fig.legend(
        handles=[
            Patch(fill=False, edgecolor="black", linestyle="--", label="before this block"),
            Patch(color=_CARRIED, label="× α: earlier blocks, rescaled"),
            Patch(color=colours[-1], label="this block's part (its colour)"),
        ],
        fontsize=8,
        loc="lower center",
        ncol=3,
        title="bars of l and acc:",
        title_fontsize=8,
    )
    _draw_outputs(ax_out, blocks, steps, exact)
    fig.suptitle(
        f"online softmax over {len(scores)} tokens in blocks of {block_size}: one program's (m, l, acc)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def _draw_scores(ax, steps: list[Step], colours: list[str], scores: Sequence[float], block_size: int) -> None:
    """Scores, coloured by block, and m after each block as a step across the block; where m grows, alpha."""
    for step, colour in zip(steps, colours, strict=True):
        first = step.block * block_size
        positions = range(first, min(first + block_size, len(scores)))
        ax.scatter(list(positions), [scores[i] for i in positions], color=colour, zorder=3, s=18)
        ax.hlines(step.m, first - 0.4, positions[-1] + 0.4, color="black", linewidth=2)
        if first:
            ax.axvline(first - 0.5, color="#DDDDDD", linewidth=1, zorder=0)
        if step.l_old > 0 and step.alpha == 1:
            ax.text(first + (block_size - 1) / 2, step.m + 0.12, "m stays: α = 1", fontsize=8, ha="center")
        elif step.l_old > 0:  # m grew: everything summed so far is rescaled
            ax.annotate(
                f"m grows {step.m_old:g} → {step.m:g}\nα = exp({step.m_old:g} − {step.m:g}) = {step.alpha:.2f}",
                (first - 0.4, step.m),
                xytext=(first - 0.4, step.m + 0.55),
                fontsize=8,
                ha="center",
                arrowprops={"arrowstyle": "-", "color": "grey"},
            )
    ax.set_title("scores s (colour = block) and the running max m (black)", fontsize=10)
    ax.set_xlabel("token position")
    top = max(scores)
    ax.set_ylim(min(scores) - 0.3, top + 1.4)


def _draw_bars(ax, blocks: list[int], colours: list[str], old, carried, new, label: str) -> None:
    """Per block: the value before the block (dashed), what survives the rescale, the block's part."""
    ax.bar(blocks, carried, color=_CARRIED, width=0.6)
    ax.bar(blocks, new, bottom=carried, color=colours, width=0.6)
    ax.bar(blocks, old, fill=False, edgecolor="black", linestyle="--", width=0.6)
    for block, total in zip(blocks, [c + n for c, n in zip(carried, new, strict=True)], strict=True):
        ax.text(block, total, f"{total:.2f}", ha="center", va="bottom" if total >= 0 else "top", fontsize=8)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylim(min(0, *old, *carried) * 1.1, max(*old, *[c + n for c, n in zip(carried, new, strict=True)]) * 1.2)
    ax.set_xticks(blocks, [f"after block {block}" for block in blocks], fontsize=8)
    ax.set_title(label, fontsize=10)


def _draw_outputs(ax, blocks: list[int], steps: list[Step], exact: float) -> None:
    """acc / l after each block, against the exact softmax-weighted sum of the values."""
    ax.plot(blocks, [step.output for step in steps], "o-", color="black")
    ax.axhline(exact, color="#C44E52", linestyle="--", label=f"exact softmax(s)·v = {exact:.3f}")
    ax.set_xticks(blocks, [f"after block {block}" for block in blocks], fontsize=8)
    ax.set_title("acc / l: attention over the tokens read so far", fontsize=10)
    ax.legend(fontsize=8)
