"""`python run.py system`: the ablation on one workload and one KV budget, small and fast.

The table's shape and its claims run with the reference functions standing in for the kernels
(same signatures, no interpreter time); one end-to-end run goes through run.py with the
instructor's kernels from notebooks 07 and 09 on two requests.
"""

from __future__ import annotations

import json

import pytest

import run
from paged_helpers.demos import DEMOS, system
from paged_helpers.reference import paged_decode_reference, paged_prefill_reference

from conftest import solution


@pytest.fixture(scope="module")
def classes():
    return (
        solution("08_continuous_batching", "ContinuousBatchingEngine"),
        solution("04_fork_and_copy_on_write", "PagedKVCache"),
        solution("05_prefix_caching", "PrefixCache"),
    )


@pytest.fixture(scope="module")
def table(classes):
    return system.ablation(*classes, paged_decode_reference, paged_prefill_reference)


def test_system_is_a_discovered_demo():
    assert DEMOS["system"] == "system"


def test_every_switch_keeps_the_outputs(table):
    assert list(table["rows"]) == list(system.ROWS)
    assert table["outputs_identical"] and all(row["outputs_match_static"] for row in table["rows"].values())
    json.dumps(table)


def test_the_rows_show_what_each_switch_buys(table):
    rows = table["rows"]
    static, paged, prefix = rows["static slots"], rows["paged"], rows["paged + prefix"]
    assert paged["peak_concurrent"] > static["peak_concurrent"]
    assert paged["mean_kv_utilisation"] > 2 * static["mean_kv_utilisation"]
    assert static["prefill_tokens_saved"] == paged["prefill_tokens_saved"] == 0 < prefix["prefill_tokens_saved"]
    for row in rows.values():
        assert row["kv_used_at_peak_tokens"] <= row["peak_kv_held_tokens"] <= table["kv_budget_tokens"]


def test_interpreter_timings_are_labelled(table):
    text = system.format_table(table)
    if table["device"] != "cuda":
        assert "(interp.)" in text.splitlines()[4] and "Triton interpreter" in text.splitlines()[-1]


def test_a_shared_block_is_held_once(classes):
    _, cache_class, _ = classes
    cache = cache_class(1, 8, 4, 1, 2)
    cache.create("a")
    cache.reserve("a", 6)
    cache.lengths["a"] = 6
    cache.fork("a", "b")
    assert system.kv_reading(cache, 4) == (8, 6)


def test_run_system_end_to_end_on_the_kernels(capsys):
    assert run.main(["system", "--requests", "2"]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    result = json.loads(out.out.strip().splitlines()[-1])
    assert result["outputs_identical"] and result["requests"] == 2
    assert "paged + prefix + kernels" in out.out
