"""The stranded-entries picture of notebook 05 draws what its numbers say."""

from __future__ import annotations

import pytest

from paged_helpers.plots.prefix_eviction import ROOT_FIRST, TAIL_FIRST, entry_fates, reusable_tokens


def test_root_first_strands_the_later_blocks():
    lru, fates = entry_fates(ROOT_FIRST, blocks=3, dropped=1)
    assert lru == [0, 1, 2]
    assert fates == {0: "dropped", 1: "stranded", 2: "stranded"}
    assert reusable_tokens(fates, block_size=4) == 0


def test_tail_first_keeps_a_reusable_prefix():
    lru, fates = entry_fates(TAIL_FIRST, blocks=3, dropped=1)
    assert lru == [2, 1, 0]
    assert fates == {0: "kept", 1: "kept", 2: "dropped"}
    assert reusable_tokens(fates, block_size=4) == 8


def test_bad_order_is_refused():
    with pytest.raises(ValueError, match="order must be"):
        entry_fates("random")


def test_the_figure_draws():
    import matplotlib

    matplotlib.use("Agg")
    from paged_helpers.plots.prefix_eviction import plot_eviction_orders

    figure = plot_eviction_orders()
    texts = [text.get_text() for text in figure.axes[0].texts]
    assert any("re-attach reuses 0 tokens" in text for text in texts)
    assert any("re-attach reuses 8 tokens" in text for text in texts)
