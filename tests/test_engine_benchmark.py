"""`python run.py engine`: static slots against the learner's paged engine, a small fast smoke.

The full benchmark (48 requests) takes seconds; these tests shrink the workload and check the
shape of the report, that both engines produce the same outputs, that the paged engine runs
more requests at once in the same memory, and that nothing is written to stderr.
"""

from __future__ import annotations

import io
import json

import matplotlib
import pytest

import run
from paged_helpers.demos.engine import compare_engines, format_table
from paged_helpers.serving import ProgressBar

from conftest import NOTEBOOKS, solution

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def learner_classes():
    return (
        solution("08_continuous_batching", "ContinuousBatchingEngine"),
        solution("04_fork_and_copy_on_write", "PagedKVCache"),
        solution("05_prefix_caching", "PrefixCache"),
    )


@pytest.fixture(scope="module")
def small_run(learner_classes):
    return compare_engines(*learner_classes, requests=20, progress=False)


def test_same_outputs_more_concurrency_same_memory(small_run):
    table, static, paged = small_run
    assert table["outputs_match"] is True
    assert table["kv_budget_tokens"] == table["paged_blocks"] * table["block_size"]
    assert table["static_peak_concurrent"] == table["static_slots"]
    assert table["paged_peak_concurrent"] > 2 * table["static_peak_concurrent"]
    assert table["prefill_tokens_saved"] > 0
    assert max(r.kv_tokens_reserved for r in paged.timeline) <= table["kv_budget_tokens"]
    assert static.tokens_generated == paged.tokens_generated
    assert table["throughput_ratio"] > 0


def test_table_text_names_every_figure(small_run):
    text = format_table(small_run[0])
    for words in (
        "requests served concurrently at peak",
        "tokens per second",
        "prefill tokens saved",
        "throughput ratio",
    ):
        assert words in text


def test_run_py_engine_prints_table_then_json(capsys, tmp_path):
    plot = tmp_path / "engine.png"
    assert run.main(["engine", "--impl", str(NOTEBOOKS), "--requests", "6", "--plot", str(plot)]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert "serving [" in out.out and "throughput ratio" in out.out
    result = json.loads(out.out.strip().splitlines()[-1])
    assert result["requests"] == 6 and result["outputs_match"] is True
    assert plot.stat().st_size > 0


def test_capacity_too_small_is_named(learner_classes):
    with pytest.raises(ValueError, match="capacity=64 is too small"):
        compare_engines(*learner_classes, requests=4, capacity=64, progress=False)


def test_progress_bar_redraws_only_on_change():
    stream = io.StringIO()
    bar = ProgressBar(4, "demo", width=4, stream=stream)
    for done in (0, 0, 1, 1, 4):
        bar.update(done)
    bar.close()
    assert stream.getvalue() == "\rdemo [....] 0/4\rdemo [#...] 1/4\rdemo [####] 4/4\n"


def test_timeline_plot_has_both_panels(small_run):
    from paged_helpers.plots.engine_timeline import plot_engine_timelines

    table, static, paged = small_run
    figure = plot_engine_timelines(
        {"static": static, "paged": paged}, budget_tokens=table["kv_budget_tokens"]
    )
    assert len(figure.axes) == 2
