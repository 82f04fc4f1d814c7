"""Pictures for the Triton warm-up (notebook 06): which elements each program loads.

``plot_tiles`` draws a vector (or one row) cut into tiles of BLOCK lanes, one colour per
program, with the lanes past the end hatched (the mask switches them off). Given ``loaded``
(for each element, the element the kernel actually put there, recovered from index-coded
inputs), it marks every element the kernel got wrong, left empty, or wrote outside the tensor.

``plot_gather`` draws a gather through an index table: output row i takes table row index[i].
Given ``loaded`` (the table row each output row actually holds), wrong rows are drawn in red.

``plot_block`` draws one [BLOCK, D] block of a 4-D pool [num_blocks, heads, block_size, head_dim]
(notebooks 03 and 07's layout) as the grid of offsets a 2-D tile of addresses gives (block base +
slot * s_slot + column), with the slots past the length hatched.
Given ``stored`` (what the kernel wrote, loaded from ``offset_coded_pool``, whose every element
holds its own offset), each cell also shows the address the kernel's load really used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .kernel_walk import _COLOURS

__all__ = ["offset_coded_pool", "plot_block", "plot_gather", "plot_tiles"]

_WRONG = "#C44E52"


def plot_tiles(
    length: int,
    block: int,
    loaded: Sequence[int | None] | None = None,
    outside: Sequence[int] = (),
    title: str | None = None,
    tiles: str = "programs",
):
    """Draw ``length`` elements cut into tiles of ``block`` lanes. Returns the matplotlib Figure.

    loaded: optional, one entry per element: the input element the kernel stored there (None where
    it stored nothing). outside: offsets past the end (>= length) that the kernel wrote to.
    tiles: "programs" (one program per tile, as in ``scale``) or "loop steps" (one program walks
    the tiles in a loop, as in ``softmax``): only the labels above the tiles differ.
    """
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one

    if length < 1 or block < 1:
        raise ValueError(f"length and block must be at least 1, got length={length}, block={block}")
    if loaded is not None and len(loaded) != length:
        raise ValueError(f"loaded must have one entry per element ({length}), got {len(loaded)}")
    if tiles not in ("programs", "loop steps"):
        raise ValueError(f"tiles must be 'programs' or 'loop steps', got {tiles!r}")
    programs = -(-length // block)
    lanes = programs * block
    figure, axes = plt.subplots(figsize=(max(6.0, 0.42 * lanes + 1.5), 1.9 if loaded is None else 2.5))
    for lane in range(lanes):
        _draw_lane(axes, lane, lane // block, length, loaded, outside)
    for program in range(programs):
        label = f"program {program}" if tiles == "programs" else f"loop step {program} of program r"
        axes.text(program * block + block / 2, 1.25, label, ha="center", va="bottom", fontsize=8)
    if loaded is not None:
        axes.text(-0.3, -0.45, "your kernel stored", ha="right", va="center", fontsize=8)
    axes.text(-0.3, 0.5, "element", ha="right", va="center", fontsize=8)
    axes.set_xlim(-4.5 if loaded is not None else -2.5, lanes + 0.5)
    axes.set_ylim(-0.9 if loaded is not None else -0.2, 1.8)
    axes.set_axis_off()
    axes.set_title(title or f"{length} elements in tiles of {block}: hatched lanes are masked off", fontsize=9)
    figure.tight_layout()
    return figure


def _draw_lane(axes, lane: int, program: int, length: int, loaded, outside: Sequence[int]) -> None:
    """One lane of a tile: its element (and what the kernel stored there), or masked off (and written, if so)."""
    from matplotlib.patches import Rectangle

    colour = _COLOURS[program % len(_COLOURS)]
    masked = lane >= length
    axes.add_patch(
        Rectangle(
            (lane, 0),
            1,
            1,
            facecolor="white" if masked else colour,
            alpha=1.0 if masked else 0.55,
            edgecolor=colour,
            hatch="///" if masked else None,
            linewidth=1.2,
        )
    )
    if masked:
        written_outside = lane in outside
        axes.text(
            lane + 0.5,
            0.5,
            "out!" if written_outside else "",
            ha="center",
            va="center",
            fontsize=7,
            color=_WRONG,
            weight="bold",
        )
        if written_outside:
            axes.add_patch(Rectangle((lane, 0), 1, 1, fill=False, edgecolor=_WRONG, linewidth=2.5))
        return
    axes.text(lane + 0.5, 0.5, str(lane), ha="center", va="center", fontsize=8)
    if loaded is not None:
        got = loaded[lane]
        wrong = got != lane
        axes.text(
            lane + 0.5,
            -0.45,
            "-" if got is None else str(got),
            ha="center",
            va="center",
            fontsize=8,
            color=_WRONG if wrong else "black",
            weight="bold" if wrong else "normal",
        )


def plot_gather(
    index: Sequence[int],
    table_rows: int,
    loaded: Sequence[int | None] | None = None,
    title: str | None = None,
):
    """Draw out[i] = table[index[i]]: table rows on the left, output rows on the right. Returns the Figure.

    loaded: optional, the table row each output row actually holds (None: not a table row);
    rows that differ from index[i] are drawn in red from where they really came.
    """
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one
    from matplotlib.patches import FancyArrowPatch, Rectangle

    picks = [int(row) for row in index]
    if any(not 0 <= row < table_rows for row in picks):
        raise ValueError(f"every index must be a table row in [0, {table_rows}), got {picks}")
    if loaded is not None and len(loaded) != len(picks):
        raise ValueError(f"loaded must have one entry per output row ({len(picks)}), got {len(loaded)}")
    height = max(table_rows, len(picks))
    figure, axes = plt.subplots(figsize=(5.0, 0.38 * height + 1.0))
    for row in range(table_rows):
        axes.add_patch(Rectangle((0, height - 1 - row), 2, 0.8, facecolor="#DDDDDD", edgecolor="grey"))
        axes.text(1, height - 0.6 - row, f"table row {row}", ha="center", va="center", fontsize=8)
    for out_row, pick in enumerate(picks):
        came_from = pick if loaded is None else loaded[out_row]
        wrong = came_from != pick
        colour = _WRONG if wrong else _COLOURS[out_row % len(_COLOURS)]
        axes.add_patch(Rectangle((5, height - 1 - out_row), 2, 0.8, facecolor=colour, alpha=0.55, edgecolor=colour))
        label = f"out row {out_row}" + ("" if not wrong else f" (should be {pick})")
        axes.text(6, height - 0.6 - out_row, label, ha="center", va="center", fontsize=8)
        if came_from is None:
            continue
        axes.add_patch(
            FancyArrowPatch(
                (2, height - 0.6 - came_from),
                (5, height - 0.6 - out_row),
                arrowstyle="-|>",
                mutation_scale=10,
                color=colour,
                linewidth=1.2,
            )
        )
    axes.set_xlim(-0.2, 7.2)
    axes.set_ylim(-0.4, height + 0.2)
    axes.set_axis_off()
    default = "what your kernel loaded" if loaded is not None else f"gather through the index table {picks}"
    axes.set_title(title or default, fontsize=9)
    figure.tight_layout()
    return figure


def offset_coded_pool(shape: Sequence[int], device=None):
    """A contiguous float32 pool [num_blocks, heads, block_size, head_dim] whose every element holds
    its own offset from the pool's first element: a value loaded from it names its address."""
    import torch

    if len(shape) != 4:
        raise ValueError(f"shape must be [num_blocks, heads, block_size, head_dim], got {tuple(shape)}")
    return torch.arange(math.prod(shape), dtype=torch.float32, device=device).view(*shape)


def plot_block(
    block_size: int,
    heads: int,
    head_dim: int,
    physical: int,
    head: int,
    rows: int,
    stored=None,
    title: str | None = None,
):
    """Draw block ``physical`` of a contiguous pool [*, heads, block_size, head_dim], for ``head``, as
    the [block_size, head_dim] grid of its elements' offsets; slots >= ``rows`` are hatched (masked).

    stored: optional [block_size, head_dim] tensor or nested list, what the kernel wrote into ``out``
    from an ``offset_coded_pool``: each cell then shows the offset the kernel really loaded (red
    where it differs; a masked row must hold 0, and NaN means never written). Returns the Figure.
    """
    import matplotlib.pyplot as plt  # only where a figure is drawn: grading never draws one

    if min(block_size, heads, head_dim) < 1 or not 0 <= head < heads or physical < 0:
        raise ValueError(f"need sizes >= 1, 0 <= head < heads, physical >= 0; got {block_size, heads, head_dim, head}")
    if not 0 <= rows <= block_size:
        raise ValueError(f"rows (slots holding tokens) must be in [0, {block_size}], got {rows}")
    values = None if stored is None else _stored_values(stored, block_size, head_dim)
    s_slot = head_dim
    s_head = block_size * s_slot
    s_block = heads * s_head
    base = physical * s_block + head * s_head
    figure, axes = plt.subplots(figsize=(1.6 + 0.95 * head_dim + 2.6, 0.62 * block_size + 1.4))
    for slot in range(block_size):
        y = block_size - 1 - slot
        masked = slot >= rows
        for column in range(head_dim):
            address = base + slot * s_slot + column
            got = None if values is None else values[slot][column]
            _draw_offset(axes, column, y, masked, address, got, with_stored=values is not None)
        note = "masked: no token" if masked else f"base + {slot} * {s_slot}"
        axes.text(-0.2, y + 0.45, f"slot {slot}: {note}", ha="right", va="center", fontsize=8)
    for column in range(head_dim):
        axes.text(column + 0.5, block_size + 0.1, f"+{column}", ha="center", va="bottom", fontsize=8)
    axes.text(
        head_dim / 2,
        block_size + 0.6,
        f"base = {physical} * s_block + {head} * s_head = {base}   "
        f"(s_block {s_block}, s_head {s_head}, s_slot {s_slot})",
        ha="center",
        va="bottom",
        fontsize=8,
    )
    axes.set_xlim(-3.2, head_dim + 0.2)
    axes.set_ylim(-0.2, block_size + 1.2)
    axes.set_axis_off()
    default = (
        "the offsets your kernel loaded (red: not the block's)"
        if values is not None
        else f"out[s, c] = pool[{physical}, {head}, s, c]: offsets slots[:, None] * s_slot + rd[None, :] from base"
    )
    axes.set_title(title or default, fontsize=9)
    figure.tight_layout()
    return figure


def _stored_values(stored, block_size: int, head_dim: int) -> list[list[float]]:
    """``stored`` (a tensor or nested list) as nested lists, refused unless it is [block_size, head_dim]."""
    values = stored.tolist() if hasattr(stored, "tolist") else [list(row) for row in stored]
    if len(values) != block_size or any(len(row) != head_dim for row in values):
        raise ValueError(f"stored must be [{block_size}, {head_dim}], what out holds")
    return values


def _offset_text(masked: bool, address: int, got, *, with_stored: bool) -> tuple[str, bool]:
    """(what a cell of the block says, whether it is wrong): its offset, or what the kernel stored there.

    A masked slot must hold 0 (shown empty); NaN means the kernel never wrote the cell.
    """
    if not with_stored:
        return ("" if masked else str(address)), False
    if isinstance(got, float) and math.isnan(got):
        return "-", True
    if masked:
        return ("" if got == 0 else f"{got:g}"), got != 0
    return f"{got:g}", got != address


def _draw_offset(axes, column: int, y: float, masked: bool, address: int, got, *, with_stored: bool) -> None:
    """One cell of the block: its offset (or what the kernel stored), red where wrong, hatched where masked."""
    from matplotlib.patches import Rectangle

    colour = _COLOURS[0]
    text, wrong = _offset_text(masked, address, got, with_stored=with_stored)
    axes.add_patch(
        Rectangle(
            (column, y),
            1,
            0.9,
            facecolor="white" if masked else colour,
            alpha=1.0 if masked else 0.45,
            edgecolor=_WRONG if wrong else colour,
            hatch="///" if masked else None,
            linewidth=2.5 if wrong else 1.0,
        )
    )
    axes.text(
        column + 0.5,
        y + 0.45,
        text,
        ha="center",
        va="center",
        fontsize=8,
        color=_WRONG if wrong else "black",
        weight="bold" if wrong else "normal",
    )
