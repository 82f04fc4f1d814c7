"""Notebook 07's pictures: the block walk's arrow labels, and the online softmax state they feed."""

from __future__ import annotations

import ast
import math

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.patches import FancyArrowPatch  # noqa: E402
from plot_support import (  # noqa: E402
    close_figures,  # noqa: E402, F401 (autouse: closes each test's figures)
    notebook_calls,
    smallest_text,
    value,
)

from paged_helpers.plots.kernel_walk import SPLIT_K_EXAMPLE, plot_kernel_walk, text_boxes  # noqa: E402
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


# --------------------------------------------------------------------------- padding (issue 37)


def _padding_labels(figure):
    return [text for text in figure.axes[0].texts if text.get_gid() == "padding"]


def test_padding_entries_are_drawn_as_padding_without_an_arrow():
    # notebook 07's first picture: [5, 1, 7, 0], 11 tokens of blocks of 4: table[3] = 0 is padding
    figure = plot_kernel_walk([5, 1, 7, 0], 11, 4, num_blocks=12)
    figure.canvas.draw()
    (padding,) = _padding_labels(figure)
    assert padding.get_text() == "not read\ntable[3] = 0"
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert texts.count("padding") == 1 and "entry 3" in texts and "0: padding" in texts
    assert len([p for p in figure.axes[0].patches if isinstance(p, FancyArrowPatch)]) == 3  # none from padding
    row = sorted(_arrow_labels(figure) + [padding], key=lambda text: text.get_position()[0])
    boxes = text_boxes(row)
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:], strict=False)), "labels overlap"
    arrows = [patch for patch in figure.axes[0].patches if isinstance(patch, FancyArrowPatch)]
    assert all(arrow.get_window_extent().y1 < min(box.y0 for box in boxes) for arrow in arrows)


def test_a_block_zero_used_by_the_sequence_is_not_called_padding():
    figure = plot_kernel_walk([0, 3, 0, 0], 5, 4, num_blocks=6)
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert "0: padding" not in texts and "0" in texts
    assert [text.get_text() for text in _padding_labels(figure)] == ["not read\ntable[2] = 0", "not read\ntable[3] = 0"]


def test_split_k_example_never_reads_block_zero_and_shows_its_padding():
    table, length = SPLIT_K_EXAMPLE
    used = -(-length // 4)
    assert 0 not in table[:used], "a real entry names block 0, the block padding entries name"
    assert used < len(table) and set(table[used:]) == {0}, "the example's row is padded with block 0"
    figure = plot_kernel_walk(table, length, 4, num_blocks=12, splits=2)
    assert [label.get_text() for label in _arrow_labels(figure)] == [f"table[{i}] = {table[i]}" for i in range(used)]
    assert len(_padding_labels(figure)) == len(table) - used


@pytest.mark.parametrize(
    ("table", "length", "splits"), [([5, 1, 7, 0], 11, 1), (list(SPLIT_K_EXAMPLE[0]), SPLIT_K_EXAMPLE[1], 2)]
)
def test_walk_text_is_8_pt_or_more_at_the_notebooks_sizes(table, length, splits):
    figure = plot_kernel_walk(table, length, 4, num_blocks=12, splits=splits)
    size, text = smallest_text(figure)
    assert size >= 8, f"{text!r} is {size} pt"
    assert figure.get_size_inches()[0] * figure.dpi <= 1050, "wider than a 1280-pixel projector's notebook"


def test_notebook_07_split_k_picture_uses_block_zero_only_for_padding():
    constants_ok = False
    for call, constants in notebook_calls("07_paged_decode_kernel", "plot_kernel_walk"):
        if "splits" not in {keyword.arg for keyword in call.keywords}:
            continue  # the first picture: block_tables[0], whose entry 0 is padding (11 tokens)
        constants = {**constants, "SPLIT_K_EXAMPLE": SPLIT_K_EXAMPLE}
        args = []
        for node in call.args:
            args.extend(value(node.value, constants) if isinstance(node, ast.Starred) else [value(node, constants)])
        table, length, block_size = args[:3]
        assert 0 not in list(table)[: -(-length // block_size)], f"a real entry of {table} names block 0"
        constants_ok = True
    assert constants_ok, "notebook 07 draws no split-K picture"
