"""The paged kernel's walk: which physical blocks one program reads, in which order.

Top row: the sequence as the kernel sees it, logical block 0, 1, 2, ... (the last one only
partly filled: its tail is masked). Bottom row: the block pool, physical blocks 0 .. N-1.
An arrow goes from logical block i to the physical block the table names, labelled with
that table entry (``table[i] = 5``); the text inside a logical block is the loop step that
reads it, counted from 0. With ``splits`` > 1 (flash-decoding), each split's program has
its own colour: it reads a contiguous run of logical blocks, and a merge combines the splits
afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["plot_kernel_walk", "plot_prefill_mask", "split_ranges", "text_boxes"]

_LABEL_GAP = 0.3  # centre of an arrow's label, below its logical block
_ARROW_START = 0.55  # where the arrow leaves, below its label

_COLOURS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def split_ranges(blocks: int, splits: int) -> list[range]:
    """Logical blocks of each split: runs of cdiv(blocks, splits) in order (the last may be short/empty)."""
    if splits < 1:
        raise ValueError(f"splits must be at least 1, got {splits}")
    per_split = -(-blocks // splits)
    return [range(min(s * per_split, blocks), min((s + 1) * per_split, blocks)) for s in range(splits)]


def plot_kernel_walk(
    block_table: Sequence[int],
    length: int,
    block_size: int,
    num_blocks: int | None = None,
    splits: int = 1,
    title: str | None = None,
):
    """Draw one sequence's walk through the pool. Returns the matplotlib Figure.

    block_table: the sequence's row (physical block of each logical block; padding allowed).
    length: tokens in the sequence (>= 1). num_blocks: size of the pool (default: just
    enough for the table).
    """
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one
    from matplotlib.patches import FancyArrowPatch, Rectangle

    table = [int(block) for block in block_table]
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    used = -(-length // block_size)
    if used > len(table):
        raise ValueError(
            f"length {length} needs {used} blocks of {block_size} but block_table has {len(table)}"
        )
    num_blocks = num_blocks if num_blocks is not None else max(table[:used]) + 1
    if max(table[:used]) >= num_blocks:
        raise ValueError(f"block_table names block {max(table[:used])} but the pool has {num_blocks} blocks")

    names, steps, labels = [], [], []  # one row of texts each, fitted to their columns at the end
    owner = {}
    for split, blocks in enumerate(split_ranges(used, splits)):
        for logical in blocks:
            owner[logical] = split

    width = max(used, num_blocks)
    fig, ax = plt.subplots(figsize=(min(1.0 + 0.75 * width, 14), 3.4))
    top, bottom, height = 2.2, 0.0, 0.8
    for logical in range(used):
        filled = min(block_size, length - logical * block_size) / block_size
        colour = _COLOURS[owner[logical] % len(_COLOURS)]
        ax.add_patch(Rectangle((logical, top), 0.9 * filled, height, color=colour, alpha=0.8))
        if filled < 1:  # the masked tail of the last block
            ax.add_patch(
                Rectangle(
                    (logical + 0.9 * filled, top),
                    0.9 * (1 - filled),
                    height,
                    fill=False,
                    hatch="//",
                    ec="grey",
                )
            )
        names.append(ax.text(logical + 0.45, top + height + 0.1, f"logical {logical}", ha="center", fontsize=8))
    physical_of = {table[logical]: logical for logical in range(used)}
    for physical in range(num_blocks):
        logical = physical_of.get(physical)
        colour = _COLOURS[owner[logical] % len(_COLOURS)] if logical is not None else "#EEEEEE"
        ax.add_patch(
            Rectangle((physical, bottom), 0.9, height, color=colour, alpha=0.8 if logical is not None else 1)
        )
        ax.text(physical + 0.45, bottom - 0.3, str(physical), ha="center", fontsize=8)
    step_in_split: dict[int, int] = {}
    for logical in range(used):
        split = owner[logical]
        step = step_in_split.get(split, 0)
        step_in_split[split] = step + 1
        colour = _COLOURS[split % len(_COLOURS)]
        # The loop step, inside the block it reads (0-based, as the loop counts).
        inside = f"step {step}" if splits == 1 else f"s{split} step {step}"
        steps.append(
            ax.text(
                logical + 0.45,
                top + height / 2,
                inside,
                fontsize=7,
                ha="center",
                va="center",
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.6},
            )
        )
        # The arrow's label sits at its tail, in its logical block's own column, and the arrow starts
        # below it: labels never overlap each other, and no arrow crosses a label.
        labels.append(
            ax.text(
                logical + 0.45,
                top - _LABEL_GAP,
                f"table[{logical}] = {table[logical]}",
                fontsize=8,
                ha="center",
                va="center",
                color=colour,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": colour, "lw": 0.6},
            )
        )
        arrow = FancyArrowPatch(
            (logical + 0.45, top - _ARROW_START),
            (table[logical] + 0.45, bottom + height),
            arrowstyle="-|>",
            mutation_scale=10,
            color=colour,
        )
        ax.add_patch(arrow)
    ax.text(-0.2, top + height / 2, "sequence", ha="right", va="center", fontsize=9)
    ax.text(-0.2, bottom + height / 2, "pool", ha="right", va="center", fontsize=9)
    ax.set_xlim(-1.6, width + 0.2)
    ax.set_ylim(-0.6, top + height + 0.5)
    ax.axis("off")
    if title is None:
        who = "one program" if splits == 1 else f"{splits} programs (one per split; colour = split)"
        title = f"{who} reading a {length}-token sequence, blocks of {block_size}"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    for row in (names, steps, labels):
        _fit_row(fig, row)
    return fig


def text_boxes(texts) -> list:
    """Each text's drawn box (its frame, where it has one), in display pixels; needs a drawn figure."""
    return [(text.get_bbox_patch() or text).get_window_extent() for text in texts]


def _fit_row(fig, texts, gap: float = 6.0) -> None:
    """Shrink one row of texts (left to right) until neighbours are ``gap`` pixels apart or more."""
    size = texts[0].get_fontsize() if texts else 0
    while size > 3:
        fig.canvas.draw()
        boxes = text_boxes(texts)
        if all(a.x1 + gap <= b.x0 for a, b in zip(boxes, boxes[1:], strict=False)):
            return
        size -= 0.5
        for text in texts:
            text.set_fontsize(size)


def plot_prefill_mask(start: int, new_tokens: int, block_size: int, tile: int = 16):
    """Which keys each new token of a prefill chunk attends to. Returns the matplotlib Figure.

    Rows: new tokens t = 0 .. new_tokens - 1 (position start + t). Columns: key positions
    0 .. start + new_tokens - 1. Dark: cached history; light: the chunk's own tokens; white:
    masked (the future). Vertical lines are block boundaries (one loop step each), horizontal
    lines separate the tiles of queries that one program handles.
    """
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one
    import numpy as np

    if start < 0 or new_tokens < 1 or block_size < 1 or tile < 1:
        raise ValueError("start must be >= 0 and new_tokens, block_size, tile >= 1")
    total = start + new_tokens
    keys = np.arange(total)[None, :]
    queries = start + np.arange(new_tokens)[:, None]
    picture = np.where(keys > queries, 0, np.where(keys < start, 2, 1))  # [new_tokens, total]
    fig, ax = plt.subplots(figsize=(min(2 + 0.22 * total, 14), min(1.5 + 0.22 * new_tokens, 8)))
    ax.imshow(
        picture,
        cmap=plt.matplotlib.colors.ListedColormap(["white", "#9ecae1", "#3182bd"]),
        aspect="auto",
        vmin=0,
        vmax=2,
        interpolation="nearest",
    )
    for boundary in range(block_size, total, block_size):
        ax.axvline(boundary - 0.5, color="black", linewidth=0.8)
    for boundary in range(tile, new_tokens, tile):
        ax.axhline(boundary - 0.5, color="red", linewidth=1.2)
    ax.axvline(start - 0.5, color="#3182bd", linewidth=2, linestyle="--")
    ax.set_xlabel(f"key position (black lines: blocks of {block_size})")
    ax.set_ylabel(f"new token t (position {start} + t)")
    ax.set_title(
        f"{new_tokens} new tokens after {start} cached ones\n"
        f"(dashed: end of the history; red: tiles of {tile} queries)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
