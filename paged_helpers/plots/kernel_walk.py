"""The paged kernel's walk: which physical blocks one program reads, in which order.

Top row: the sequence as the kernel sees it, logical block 0, 1, 2, ... (the last one only
partly filled: its tail is masked). Bottom row: the block pool, physical blocks 0 .. N-1.
An arrow goes from logical block i to the physical block the table names, labelled with
that table entry (``table[i] = 5``); the text inside a logical block is the loop step that
reads it, counted from 0. With ``splits`` > 1 (flash-decoding), each split's program has
its own colour: it reads a contiguous run of logical blocks, and a merge combines the splits
afterwards. Entries of the table past the sequence's blocks are padding (the course pads with
block 0): drawn hatched grey, without an arrow, because the kernel never reads them.

``SPLIT_K_EXAMPLE`` is notebook 07's split-K picture: a table whose real entries never name
block 0, the block the padding entries name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "MASK_MEANINGS",
    "QUERY_TILE",
    "SPLIT_K_EXAMPLE",
    "plot_kernel_walk",
    "plot_prefill_mask",
    "prefill_mask_cells",
    "split_ranges",
    "text_boxes",
]

# (block_table, length) of notebook 07's split-K picture, blocks of 4: six real blocks, none of
# them block 0, then two padding entries (block 0), as set_batch pads a row.
SPLIT_K_EXAMPLE = ((5, 1, 7, 8, 3, 2, 0, 0), 21)

_LABEL_GAP = 0.3  # centre of an arrow's label, below its logical block
_ARROW_START = 0.55  # where the arrow leaves, below its label

_COLUMN_INCHES = 0.75  # one block's column: a label "table[i] = n" fits at 8 pt (dpi 100)
_PADDING = "#f2f2f2"  # a padding entry of the table (past the sequence's blocks)

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

    block_table: the sequence's row (physical block of each logical block; padding allowed:
    entries past the blocks ``length`` needs are drawn as padding, hatched grey, with no arrow,
    since the kernel never reads them). length: tokens in the sequence (>= 1). num_blocks: size
    of the pool (default: just enough for the table's real entries).
    """
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one

    table = [int(block) for block in block_table]
    used, num_blocks = _walk_sizes(table, length, block_size, num_blocks)
    owner = {logical: split for split, blocks in enumerate(split_ranges(used, splits)) for logical in blocks}
    width = max(len(table), num_blocks)
    fig, ax = plt.subplots(figsize=(min(0.2 + _COLUMN_INCHES * (width + 1.2), 14), 3.4))
    rows = _Rows()  # one row of texts each, fitted to their columns at the end
    _draw_sequence(ax, rows, used, length, block_size, owner)
    _draw_padding(ax, rows, table, used)
    _draw_pool(ax, table, used, num_blocks, owner)
    _draw_reads(ax, rows, table, used, owner, splits)
    ax.text(-0.2, _TOP + _HEIGHT / 2, "sequence", ha="right", va="center", fontsize=9)
    ax.text(-0.2, _BOTTOM + _HEIGHT / 2, "pool", ha="right", va="center", fontsize=9)
    ax.set_xlim(-1.1, width + 0.1)
    ax.set_ylim(-0.6, _TOP + _HEIGHT + 0.5)
    ax.axis("off")
    if title is None:
        who = "one program" if splits == 1 else f"{splits} programs (one per split; colour = split)"
        title = f"{who} reading a {length}-token sequence, blocks of {block_size}"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    for row in (rows.names, rows.steps, rows.labels):
        _fit_row(fig, row)
    return fig


# Rows of the walk: the sequence (logical blocks) on top, the pool (physical blocks) below.
_TOP, _BOTTOM, _HEIGHT = 2.2, 0.0, 0.8


@dataclass
class _Rows:
    """The walk's three rows of texts, left to right: block names, texts inside blocks, arrow labels."""

    names: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    labels: list = field(default_factory=list)


def _walk_sizes(table: list[int], length: int, block_size: int, num_blocks: int | None) -> tuple[int, int]:
    """(logical blocks the length needs, the pool's size), refusing a table that does not fit them."""
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    used = -(-length // block_size)
    if used > len(table):
        raise ValueError(f"length {length} needs {used} blocks of {block_size} but block_table has {len(table)}")
    num_blocks = num_blocks if num_blocks is not None else max(table[:used]) + 1
    if max(table[:used]) >= num_blocks:
        raise ValueError(f"block_table names block {max(table[:used])} but the pool has {num_blocks} blocks")
    return used, num_blocks


def _draw_sequence(ax, rows: _Rows, used: int, length: int, block_size: int, owner: dict[int, int]) -> None:
    """The logical blocks the kernel reads, in their split's colour; the last one's masked tail hatched."""
    from matplotlib.patches import Rectangle

    for logical in range(used):
        filled = min(block_size, length - logical * block_size) / block_size
        colour = _COLOURS[owner[logical] % len(_COLOURS)]
        ax.add_patch(Rectangle((logical, _TOP), 0.9 * filled, _HEIGHT, color=colour, alpha=0.8))
        if filled < 1:  # the masked tail of the last block
            ax.add_patch(
                Rectangle(
                    (logical + 0.9 * filled, _TOP),
                    0.9 * (1 - filled),
                    _HEIGHT,
                    fill=False,
                    hatch="//",
                    ec="grey",
                )
            )
        rows.names.append(ax.text(logical + 0.45, _TOP + _HEIGHT + 0.1, f"logical {logical}", ha="center", fontsize=8))


def _draw_padding(ax, rows: _Rows, table: list[int], used: int) -> None:
    """The table's entries past the sequence's blocks: in the row, never read (the length stops the loop)."""
    from matplotlib.patches import Rectangle

    for entry in range(used, len(table)):
        ax.add_patch(Rectangle((entry, _TOP), 0.9, _HEIGHT, fc=_PADDING, ec="grey", hatch="..", lw=0.6, ls="--"))
        rows.names.append(
            ax.text(entry + 0.45, _TOP + _HEIGHT + 0.1, f"entry {entry}", ha="center", fontsize=8, color="grey")
        )
        rows.steps.append(_inside(ax, entry + 0.45, _TOP + _HEIGHT / 2, "padding", color="#555555"))
        rows.labels.append(
            ax.text(
                entry + 0.45,
                _TOP - _LABEL_GAP,
                f"not read\ntable[{entry}] = {table[entry]}",
                gid="padding",
                fontsize=8,
                ha="center",
                va="center",
                color="#555555",
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "grey", "lw": 0.6, "ls": "--"},
            )
        )


def _draw_pool(ax, table: list[int], used: int, num_blocks: int, owner: dict[int, int]) -> None:
    """The physical blocks: coloured where a logical block reads them, hatched where padding names them."""
    from matplotlib.patches import Rectangle

    physical_of = {table[logical]: logical for logical in range(used)}
    padding_targets = {table[entry] for entry in range(used, len(table))} - set(physical_of)
    for physical in range(num_blocks):
        logical = physical_of.get(physical)
        colour = _COLOURS[owner[logical] % len(_COLOURS)] if logical is not None else "#EEEEEE"
        ax.add_patch(
            Rectangle((physical, _BOTTOM), 0.9, _HEIGHT, color=colour, alpha=0.8 if logical is not None else 1)
        )
        if physical in padding_targets:  # the block the padding entries name, as they are drawn
            ax.add_patch(Rectangle((physical, _BOTTOM), 0.9, _HEIGHT, fill=False, ec="grey", hatch="..", lw=0.6))
        named = f"{physical}: padding" if physical in padding_targets else str(physical)
        ax.text(
            physical + 0.45,
            _BOTTOM - 0.3,
            named,
            ha="center",
            fontsize=8,
            color="#555555" if physical in padding_targets else "black",
        )


def _draw_reads(ax, rows: _Rows, table: list[int], used: int, owner: dict[int, int], splits: int) -> None:
    """Each logical block's loop step, and its arrow to the physical block, labelled with the table entry."""
    from matplotlib.patches import FancyArrowPatch

    step_in_split: dict[int, int] = {}
    for logical in range(used):
        split = owner[logical]
        step = step_in_split.get(split, 0)
        step_in_split[split] = step + 1
        colour = _COLOURS[split % len(_COLOURS)]
        # The loop step, inside the block it reads (0-based, as the loop counts).
        rows.steps.insert(
            logical,
            _inside(ax, logical + 0.45, _TOP + _HEIGHT / 2, f"step {step}" if splits == 1 else f"s{split} step {step}"),
        )
        # The arrow's label sits at its tail, in its logical block's own column, and the arrow starts
        # below it: labels never overlap each other, and no arrow crosses a label.
        rows.labels.insert(
            logical,
            ax.text(
                logical + 0.45,
                _TOP - _LABEL_GAP,
                f"table[{logical}] = {table[logical]}",
                fontsize=8,
                ha="center",
                va="center",
                color=colour,
                bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": colour, "lw": 0.6},
            ),
        )
        arrow = FancyArrowPatch(
            (logical + 0.45, _TOP - _ARROW_START),
            (table[logical] + 0.45, _BOTTOM + _HEIGHT),
            arrowstyle="-|>",
            mutation_scale=10,
            color=colour,
        )
        ax.add_patch(arrow)


def _inside(ax, x: float, y: float, text: str, color: str = "black"):
    """The text inside a sequence block: its loop step, or that it is padding."""
    return ax.text(
        x,
        y,
        text,
        fontsize=8,
        ha="center",
        va="center",
        color=color,
        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.6},
    )


def text_boxes(texts) -> list:
    """Each text's drawn box (its frame, where it has one), in display pixels; needs a drawn figure."""
    return [(text.get_bbox_patch() or text).get_window_extent() for text in texts]


def _fit_row(fig, texts, gap: float = 3.0) -> None:
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


QUERY_TILE = 16  # notebook 09's kernel: one program answers a tile of 16 new tokens (its QUERY_TILE)

# The prefill mask's cells, one colour and one legend entry each.
MASKED, CHUNK, HISTORY, PADDING = 0, 1, 2, 3
MASK_COLOURS = {MASKED: "#ffffff", CHUNK: "#9ecae1", HISTORY: "#2166ac", PADDING: "#bdbdbd"}
MASK_MEANINGS = {
    HISTORY: "key visible to the query: cached history (before start)",
    CHUNK: "key visible to the query: this chunk's own keys",
    MASKED: "masked: in the query's future",
    PADDING: "padding / past the length:\na row past T, a key past start + T",
}


def prefill_mask_cells(start: int, new_tokens: int, block_size: int, tile: int = QUERY_TILE):
    """The mask as the kernel's programs see it: an int array [rows, keys] of MASKED, CHUNK, HISTORY, PADDING.

    Rows: every row of the query tiles (cdiv(new_tokens, tile) * tile; rows at or past new_tokens
    are the last tile's padding). Keys: every slot of the blocks the last tile's loop reads (up to
    the block holding position start + new_tokens - 1; slots past it are padding).
    """
    import numpy as np

    if start < 0 or new_tokens < 1 or block_size < 1 or tile < 1:
        raise ValueError("start must be >= 0 and new_tokens, block_size, tile >= 1")
    total = start + new_tokens
    rows = -(-new_tokens // tile) * tile
    keys = -(-total // block_size) * block_size
    key = np.arange(keys)[None, :]
    row = np.arange(rows)[:, None]
    query = start + row
    cells = np.where(key > query, MASKED, np.where(key < start, HISTORY, CHUNK))
    return np.where((row >= new_tokens) | (key >= total), PADDING, cells)


def plot_prefill_mask(start: int, new_tokens: int, block_size: int, tile: int = QUERY_TILE):
    """Which keys each new token of a prefill chunk attends to. Returns the matplotlib Figure.

    Rows: new tokens t = 0 .. new_tokens - 1 (position start + t), padded to whole tiles of
    ``tile`` queries (one program each; the kernel's TILE, 16 by default). Columns: key positions,
    padded to whole blocks. Each colour is named in the legend: visible history, visible keys of
    the chunk itself, masked (the query's future), padding. Faint lines: one cell per (query, key);
    black lines: block boundaries (one loop step each); red frames: the tiles of queries; dashed:
    the end of the cached history.
    """
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one
    from matplotlib.colors import ListedColormap

    cells = prefill_mask_cells(start, new_tokens, block_size, tile)
    rows, keys = cells.shape
    cell_inches = max(0.08, min(0.22, 7.5 / keys, 5.0 / rows))
    fig, ax = plt.subplots(
        figsize=(min(1.6 + cell_inches * keys, 10) + 4.0, min(1.7 + cell_inches * rows, 8)), layout="constrained"
    )
    ax.imshow(
        cells,
        cmap=ListedColormap([MASK_COLOURS[k] for k in (MASKED, CHUNK, HISTORY, PADDING)]),
        aspect="equal",
        vmin=0,
        vmax=3,
        interpolation="nearest",
    )
    _draw_mask_lines(ax, rows, keys, cell_inches, start, block_size, tile)
    ax.set_xlim(-0.5, keys - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlabel("key position")
    ax.set_ylabel(f"new token t (position {start} + t)")
    tiles = rows // tile
    ax.set_title(
        f"{new_tokens} new tokens after {start} cached ones\n"
        f"blocks of {block_size} keys, {tiles} tile{'s' if tiles > 1 else ''} of {tile} queries",
        fontsize=10,
    )
    fig.legend(handles=_mask_legend(start, block_size, tile), loc="outside right center", fontsize=9, frameon=False)
    return fig


def _draw_mask_lines(ax, rows: int, keys: int, cell_inches: float, start: int, block_size: int, tile: int) -> None:
    """The mask's lines: faint cells, black block boundaries, red tiles of queries, the history's dashed end."""
    from matplotlib.patches import Rectangle

    if cell_inches * 72 >= 4:  # a faint line around every (query, key) cell, where cells are big enough
        for x in range(1, keys):
            ax.axvline(x - 0.5, color="#d0d0d0", linewidth=0.4)
        for y in range(1, rows):
            ax.axhline(y - 0.5, color="#d0d0d0", linewidth=0.4)
    for boundary in range(block_size, keys, block_size):
        ax.axvline(boundary - 0.5, color="black", linewidth=0.9)
    for first in range(0, rows, tile):
        ax.add_patch(Rectangle((-0.5, first - 0.5), keys, tile, fill=False, ec="red", lw=2, clip_on=False))
    for spine in ax.spines.values():  # the tiles' red frames are the picture's border
        spine.set_visible(False)
    if start > 0:
        ax.axvline(start - 0.5, color="#f4a582", linewidth=2, linestyle="--")


def _mask_legend(start: int, block_size: int, tile: int) -> list:
    """One legend entry per colour of the mask, then per kind of line."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(facecolor=MASK_COLOURS[k], edgecolor="#888888", label=MASK_MEANINGS[k])
        for k in (HISTORY, CHUNK, MASKED, PADDING)
    ]
    handles += [
        Line2D([], [], color="black", linewidth=0.9, label=f"block boundary ({block_size} keys: one loop step)"),
        Line2D([], [], color="red", linewidth=2, label=f"tile of {tile} queries (one program)"),
    ]
    if start > 0:
        handles.append(Line2D([], [], color="#f4a582", linewidth=2, linestyle="--", label="end of the cached history"))
    return handles
