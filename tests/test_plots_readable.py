"""Issue 37's figures, read as a learner on a projector reads them (matplotlib Agg, dpi 100).

Notebook 08's timeline: memory held is a band and a line per time bin, not a barcode of every
step, and the legend lies outside both panels. Notebook 10's hit rates: no text under 9 pt, and the
workload's parameters and the legend below the axes. Notebook 09's prefill mask: the kernel's tile
of 16 queries by default, every colour named in a legend that covers no cell. (Notebook 07's walk:
tests/test_plots_kernel_walk.py.)
"""

from __future__ import annotations

import itertools

import pytest
from matplotlib.patches import Rectangle, StepPatch
from plot_support import (
    close_figures,  # noqa: F401 (autouse: closes each test's figures)
    legend_box,
    notebook_calls,
    notebook_constants,
    overlap,
    smallest_text,
    value,
)

from paged_helpers.plots import kernel_walk, radix_tree
from paged_helpers.plots.engine_timeline import HELD_BINS, held_over_time, plot_engine_timelines
from paged_helpers.serving.metrics import EngineMetrics, StepRecord

# --------------------------------------------------------------------------- 08: the timeline


def _metrics(times, held, stored, tokens_per_step=4):
    metrics = EngineMetrics(clock=lambda: 0.0)
    rows = enumerate(zip(times, held, stored, strict=True))
    metrics.timeline = [StepRecord(t, tokens_per_step * (i + 1), h, s, 1) for i, (t, h, s) in rows]
    metrics.tokens_generated = tokens_per_step * len(times)
    return metrics


@pytest.fixture(scope="module")
def engines():
    """Static slots flipping 2,048 / 1,024 every few steps for 900 steps (the barcode), paged ramping."""
    steps = 900
    static_held = [1024 if i % 7 in (3, 4) else 2048 for i in range(steps)]
    static = _metrics([0.0012 * i for i in range(steps)], static_held, [150 + i % 200 for i in range(steps)])
    paged_held = [min(2048, 16 * 8 * (1 + i // 3)) for i in range(120)]
    paged = _metrics([0.0045 * i for i in range(120)], paged_held, [h + 100 for h in paged_held])
    return {"static slots": static, "paged + prefix cache": paged}


def test_held_is_a_time_weighted_mean_with_its_range():
    records = _metrics([0.0, 1.0, 1.5, 4.0], [100, 300, 200, 999], [0, 0, 0, 0]).timeline
    edges, means, lows, highs = held_over_time(records, 2.0)
    assert edges == [0.0, 2.0, 4.0]
    # [0, 1): 100, [1, 1.5): 300, [1.5, 2): 200 -> 1.0 * 100 + 0.5 * 300 + 0.5 * 200 over 2 s
    assert means == pytest.approx([(100 + 150 + 100) / 2, 200])
    assert (lows, highs) == ([100, 200], [300, 200])
    with pytest.raises(ValueError, match="bin_seconds"):
        held_over_time(records, 0)


def test_timeline_draws_held_per_bin_not_per_step(engines):
    figure = plot_engine_timelines(engines, budget_tokens=2048)
    bottom = figure.axes[1]
    held = [patch for patch in bottom.patches if isinstance(patch, StepPatch)]
    assert len(held) == len(engines)
    for patch in held:
        values, edges, _ = patch.get_data()
        assert 1 <= len(values) <= HELD_BINS  # the static engine's 900 steps: one value per bin
        assert len(edges) == len(values) + 1
    static_values = held[0].get_data()[0]
    assert all(1024 < v < 2048 for v in static_values[1:-1]), "the mean lies between the slots' counts"
    # No line of the lower panel draws held memory step by step (the old barcode): what it draws
    # per step is the dotted 'tokens stored' only.
    assert all(line.get_linestyle() in (":", "--") for line in bottom.get_lines())


def test_timeline_legend_is_outside_both_panels(engines):
    figure = plot_engine_timelines(engines, budget_tokens=2048)
    legend, box = legend_box(figure)
    for axes in figure.axes:
        assert not overlap(box, axes.get_window_extent()), "the legend covers a panel"
        assert not overlap(box, axes.xaxis.label.get_window_extent()), "the legend covers an axis label"
    labels = [text.get_text() for text in legend.get_texts()]
    assert any(label.startswith("static slots:") and "tokens/s overall" in label for label in labels)
    assert any(label.startswith("held: mean per") for label in labels)
    assert "budget: 2048 token slots" in labels


def test_timeline_text_is_8_pt_or_more(engines):
    size, text = smallest_text(plot_engine_timelines(engines, budget_tokens=2048))
    assert size >= 8, f"{text!r} is {size} pt"


# --------------------------------------------------------------------------- 10: hit rates

BUDGETS = [22, 50, 79, 107, 135, 163, 192, 220]
RATES = {
    "flat + fcfs": [0.19, 0.21, 0.25, 0.33, 0.46, 0.59, 0.71, 0.71],
    "radix + fcfs": [0.19, 0.21, 0.25, 0.33, 0.45, 0.59, 0.71, 0.71],
    "radix + cache-aware": [0.21, 0.57, 0.71, 0.71, 0.71, 0.71, 0.71, 0.71],
}
PARAMETERS = {"conversations": 12, "turns": 6, "system_tokens": 32, "user_tokens": [8, 24],
              "reply_tokens": [16, 48], "vocab_size": 256, "seed": 0}  # fmt: skip


def test_hit_rate_text_is_9_pt_or_more():
    figure = radix_tree.plot_hit_rates(BUDGETS, RATES, PARAMETERS)
    size, text = smallest_text(figure)
    assert size >= 9, f"{text!r} is {size} pt"
    notes = [text for text in figure.axes[0].texts if text.get_text().startswith("workload:")]
    assert len(notes) == 1 and "reply_tokens [16, 48]" in notes[0].get_text()
    assert "vocab_size" not in notes[0].get_text()


def test_hit_rate_legend_and_workload_lie_below_the_axes():
    figure = radix_tree.plot_hit_rates(BUDGETS, RATES, PARAMETERS)
    legend, box = legend_box(figure)
    axes = figure.axes[0]
    note = next(text for text in axes.texts if text.get_text().startswith("workload:")).get_window_extent()
    boxes = {
        "legend": box,
        "workload": note,
        "axes": axes.get_window_extent(),
        "x label": axes.xaxis.label.get_window_extent(),
    }
    for (a, first), (b, second) in itertools.combinations(boxes.items(), 2):
        assert not overlap(first, second), f"the {a} overlaps the {b}"
    figure_box = figure.bbox
    assert figure_box.y0 <= box.y0 and box.y1 < note.y0, "the legend lies under the workload, inside the figure"
    assert [text.get_text() for text in legend.get_texts()] == list(RATES)


def test_hit_rate_without_parameters_still_draws():
    figure = radix_tree.plot_hit_rates(BUDGETS, RATES)
    assert not [text for text in figure.axes[0].texts if text.get_text().startswith("workload:")]
    assert smallest_text(figure)[0] >= 9


# --------------------------------------------------------------------------- 09: the prefill mask


def test_mask_cells_follow_the_kernel():
    start, new_tokens, block_size, tile = 5, 9, 4, 16
    cells = kernel_walk.prefill_mask_cells(start, new_tokens, block_size, tile)
    assert cells.shape == (16, 16)  # one tile of 16 queries; the 4 blocks the tile's loop reads
    for row, key in itertools.product(range(16), range(16)):
        if row >= new_tokens or key >= start + new_tokens:
            expected = kernel_walk.PADDING
        elif key > start + row:
            expected = kernel_walk.MASKED
        else:
            expected = kernel_walk.HISTORY if key < start else kernel_walk.CHUNK
        assert cells[row, key] == expected, (row, key)


def test_mask_draws_the_kernels_tile_of_16_by_default():
    import inspect

    assert inspect.signature(kernel_walk.plot_prefill_mask).parameters["tile"].default == kernel_walk.QUERY_TILE
    # notebook 09's launcher runs the kernel with TILE=QUERY_TILE: the picture's default is that number
    assert notebook_constants("09_paged_prefill_kernel")["QUERY_TILE"] == kernel_walk.QUERY_TILE == 16
    figure = kernel_walk.plot_prefill_mask(5, 9, 4)
    (image,) = figure.axes[0].images
    assert image.get_array().shape == (16, 16)
    frames = [p for p in figure.axes[0].patches if isinstance(p, Rectangle) and p.get_edgecolor()[:3] == (1, 0, 0)]
    assert [frame.get_height() for frame in frames] == [16]
    assert "1 tile of 16 queries" in figure.axes[0].get_title()


def test_mask_keeps_its_old_arguments():
    figure = kernel_walk.plot_prefill_mask(start=5, new_tokens=9, block_size=4, tile=4)
    (image,) = figure.axes[0].images
    assert image.get_array().shape == (12, 16)
    frames = [p for p in figure.axes[0].patches if isinstance(p, Rectangle) and p.get_edgecolor()[:3] == (1, 0, 0)]
    assert [frame.get_height() for frame in frames] == [4, 4, 4]
    with pytest.raises(ValueError, match="new_tokens"):
        kernel_walk.plot_prefill_mask(5, 0, 4)


@pytest.mark.parametrize(("start", "new_tokens", "block_size", "tile"), [(5, 9, 4, 16), (5, 9, 4, 4), (0, 20, 16, 16)])
def test_mask_legend_names_every_colour_and_covers_nothing(start, new_tokens, block_size, tile):
    from matplotlib.colors import to_hex

    figure = kernel_walk.plot_prefill_mask(start, new_tokens, block_size, tile)
    legend, box = legend_box(figure)
    axes = figure.axes[0]
    assert not overlap(box, axes.get_window_extent()), "the legend covers the mask"
    named = {text.get_text(): handle for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    cells = kernel_walk.prefill_mask_cells(start, new_tokens, block_size, tile)
    (image,) = axes.images
    for kind, meaning in kernel_walk.MASK_MEANINGS.items():
        assert meaning in named, f"no legend entry {meaning!r}"
        colour = to_hex(image.cmap(image.norm(kind)))
        assert to_hex(named[meaning].get_facecolor()) == colour, f"{meaning!r} names another colour"
        assert kind in cells or kind == kernel_walk.HISTORY  # every colour is in the picture (history if start > 0)
    assert any(text.startswith("key visible to the query") for text in named)
    assert any(text.startswith("masked: in the query's future") for text in named)
    assert any(text.startswith("padding / past the length") for text in named)
    size, text = smallest_text(figure)
    assert size >= 8, f"{text!r} is {size} pt"


def test_notebook_09_draws_the_kernels_tile():
    kernels_tile = notebook_constants("09_paged_prefill_kernel")["QUERY_TILE"]
    calls = notebook_calls("09_paged_prefill_kernel", "plot_prefill_mask")
    assert calls
    for call, constants in calls:
        tile = {k.arg: value(k.value, constants) for k in call.keywords}.get("tile", kernel_walk.QUERY_TILE)
        assert tile == kernels_tile
