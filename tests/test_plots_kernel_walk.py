"""Notebook 07's pictures: the block walk's arrow labels, and the online softmax state they feed."""

from __future__ import annotations

import math

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.patches import FancyArrowPatch  # noqa: E402

from paged_helpers.plots.kernel_walk import plot_kernel_walk, text_boxes  # noqa: E402
from paged_helpers.plots.online_softmax import (  # noqa: E402
    EXAMPLE_SCORES,
    EXAMPLE_VALUES,
    online_softmax_steps,
    plot_online_softmax,
)


def _arrow_labels(figure):
    return [text for text in figure.axes[0].texts if text.get_text().startswith("table[")]


@pytest.mark.parametrize(
    ("table", "length", "splits", "num_blocks"),
    [([5, 1, 7, 0], 11, 1, 12), ([5, 1, 7, 0, 3, 2], 21, 2, 12), (list(range(29, -1, -1)), 117, 3, None)],
)
def test_every_arrow_names_its_table_entry_and_crosses_no_label(table, length, splits, num_blocks):
    figure = plot_kernel_walk(table, length, 4, num_blocks=num_blocks, splits=splits)
    figure.canvas.draw()
    used = -(-length // 4)
    labels = _arrow_labels(figure)
    assert [label.get_text() for label in labels] == [f"table[{i}] = {table[i]}" for i in range(used)]
    boxes = text_boxes(labels)
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:], strict=False)), "arrow labels overlap"
    arrows = [patch for patch in figure.axes[0].patches if isinstance(patch, FancyArrowPatch)]
    assert len(arrows) == used
    lowest_label = min(box.y0 for box in boxes)
    assert all(arrow.get_window_extent().y1 < lowest_label for arrow in arrows), "an arrow crosses a label"
    steps = [text.get_text() for text in figure.axes[0].texts if "step" in text.get_text()]
    assert steps[0] == ("step 0" if splits == 1 else "s0 step 0")  # the loop counts from 0


def test_online_softmax_state_is_exact_after_every_block():
    steps = online_softmax_steps(EXAMPLE_SCORES, EXAMPLE_VALUES, 4)
    assert [step.block for step in steps] == [0, 1, 2, 3]
    for step in steps:
        seen = EXAMPLE_SCORES[: 4 * (step.block + 1)]
        weights = [math.exp(score - step.m) for score in seen]
        assert step.m == max(seen)
        assert step.alpha == pytest.approx(math.exp(step.m_old - step.m))
        assert step.l == pytest.approx(sum(weights))
        assert step.output == pytest.approx(
            sum(w * v for w, v in zip(weights, EXAMPLE_VALUES, strict=False)) / sum(weights)
        )
    # The example the notebook's prose describes: m grows at block 2 only (after block 0).
    assert [step.alpha == 1 for step in steps[1:]] == [True, False, True]
    assert steps[2].l < steps[2].l_old  # the rescale shrinks what was summed before


def test_online_softmax_figure_marks_where_m_grows():
    figure = plot_online_softmax()
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert any(text.startswith("m grows 1 → 2.5") for text in texts)
    assert sum(text == "m stays: α = 1" for text in texts) == 2
    with pytest.raises(ValueError, match="same, non-zero length"):
        online_softmax_steps([1.0], [], 4)
