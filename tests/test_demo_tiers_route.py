"""`python run.py tiers` and `python run.py route`, small: the JSON line, the rows, what the tables
must show for the course's solutions (a host tier that holds everything recovers every evicted
history; routing with one replica is the same under every policy; the cache-aware router beats round
robin with several), the stated cost model, and the ShareGPT-shaped chats."""

from __future__ import annotations

import json

import pytest
import torch

import run
from paged_helpers import workloads
from paged_helpers.demos import DEMOS
from paged_helpers.demos import route as route_demo
from paged_helpers.demos import tiers as tiers_demo
from paged_helpers.demos.cost_model import COST_MODEL, measured_host_to_gpu

from conftest import solution


@pytest.fixture(scope="module")
def classes():
    return {
        "TieredRadixCache": solution("11_cache_tiers_and_routing", "TieredRadixCache"),
        "CacheAwareRouter": solution("11_cache_tiers_and_routing", "CacheAwareRouter"),
        "RadixCache": solution("10_radix_cache", "RadixCache"),
        "PagedKVCache": solution("04_fork_and_copy_on_write", "PagedKVCache"),
    }


def test_both_are_discovered_demos():
    assert DEMOS["tiers"] == "tiers" and DEMOS["route"] == "route"


def test_run_tiers_small(capsys):
    argv = ["tiers", "--conversations", "4", "--turns", "3", "--gpu-blocks", "32"]
    assert run.main(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""
    result = json.loads(out.out.strip().splitlines()[-1])
    rows = result["rows"]
    assert [(row["host_blocks"], row["policy"]) for row in rows[:3]] == [
        (0, "none"),
        (16, "write-back"),
        (16, "write-through"),
    ]
    assert rows[-1]["host_blocks"] == 256  # 8 x the GPU pool
    assert "cost model (stated, not measured)" in out.out and "loads/writes" in out.out
    assert all(row["hit_rate"] >= rows[0]["hit_rate"] - 1e-9 for row in rows)
    assert rows[0]["host_writes"] == 0 and rows[0]["host_loads"] == 0
    measured = result["measured_host_to_gpu_bytes_per_s"]
    assert (measured is not None) == torch.cuda.is_available()
    assert all(("load_ms_measured" in row) == (measured is not None) for row in rows)


def test_a_host_that_holds_everything_recovers_every_evicted_history(classes):
    """With a host as large as every chat's history, every whole block of every previous turn comes
    back (GPU or host): the hit rate is what a pool with room for everything gets."""
    chats = workloads.multi_turn_chats(conversations=6, turns=4, seed=3)
    args = (classes["TieredRadixCache"], classes["RadixCache"], classes["PagedKVCache"], chats)
    rows = tiers_demo.sweep(*args, gpu_blocks=24, multiples=(0, 16))
    roomy = tiers_demo.serve_one(classes, chats, 1000, 0, "none", 16, 4)
    assert rows[0].hit_rate < roomy.hit_rate
    for row in rows[1:]:
        assert row.run.cached_tokens == roomy.run.cached_tokens, row.policy
        assert row.loads > 0 and row.writes > 0


def test_write_through_writes_every_block_and_a_small_host_churns(classes):
    chats = workloads.multi_turn_chats(conversations=8, turns=5, seed=0)
    args = (classes["TieredRadixCache"], classes["RadixCache"], classes["PagedKVCache"], chats)
    rows = {(row.host_blocks, row.policy): row for row in tiers_demo.sweep(*args, gpu_blocks=32, multiples=(0.5,))}
    back, through = rows[(16, "write-back")], rows[(16, "write-through")]
    assert through.writes > back.writes
    assert through.loads / through.writes < 0.1  # most writes never come back


def test_run_route_small(capsys):
    argv = ["route", "--conversations", "6", "--turns", "3", "--replicas", "1", "2", "--blocks", "24"]
    assert run.main(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""
    result = json.loads(out.out.strip().splitlines()[-1])
    runs = result["runs"]
    assert [(r["replicas"], r["policy"]) for r in runs[:4]] == [
        (1, "round robin"),
        (1, "least loaded"),
        (1, "cache-aware"),
        (1, "stale events"),
    ]
    one = [r for r in runs if r["replicas"] == 1]
    assert len({(r["hit_rate"], r["prefill_tokens"]) for r in one}) == 1  # one replica: routing changes nothing
    assert all(r["ttft_ms_p90"] >= r["ttft_ms_mean"] * 0.5 for r in runs)


def test_cache_aware_routing_beats_round_robin_with_eight_replicas(classes):
    chats = workloads.multi_turn_chats(conversations=24, turns=6, seed=0)
    runs = route_demo.compare(
        classes["RadixCache"], classes["PagedKVCache"], classes["CacheAwareRouter"], chats, replica_counts=(8,)
    )
    by = {run.policy: run for run in runs}
    assert by["cache-aware"].hit_rate > by["round robin"].hit_rate + 0.1
    assert by["cache-aware"].ttft_ms() < by["round robin"].ttft_ms()
    assert by["cache-aware"].prefill_tokens == sum(by["cache-aware"].prefill_by_replica)


def test_events_reach_the_router_as_the_trees_change(classes):
    """The router hears 'stored' for every block a replica's tree gains and 'removed' for every block it
    loses: its picture of each replica equals the tree at the end."""
    heard = []

    class Listening(classes["CacheAwareRouter"]):
        def on_event(self, replica, kind, keys):
            heard.append((replica, kind, len(keys)))
            super().on_event(replica, kind, keys)

    chats = workloads.multi_turn_chats(conversations=6, turns=4, seed=1)
    router = Listening(2)
    run_ = route_demo.RouteRun("cache-aware", 2)
    route_demo.serve_routed(chats, classes["RadixCache"], classes["PagedKVCache"], router, run_, 20, 16, 2, COST_MODEL)
    assert {kind for _, kind, _ in heard} == {"stored", "removed"}


def test_the_cost_model_is_stated():
    assert COST_MODEL.block_bytes() == 2 * 36 * 8 * 128 * 16 * 2
    assert COST_MODEL.transfer_s(1, COST_MODEL.pcie_bytes_per_s) < COST_MODEL.prefill_s(16)
    text = COST_MODEL.describe()
    assert "stated, not measured" in text and "MFU" in text


def test_the_copy_is_measured_only_where_a_gpu_is():
    measured = measured_host_to_gpu(COST_MODEL.block_bytes(), blocks=8, repeats=2)
    if torch.cuda.is_available():
        assert measured > 1e9  # any host link of a CUDA machine moves more than a GB/s
    else:
        assert measured is None


def test_sharegpt_shaped_chats_follow_the_trace():
    trace = workloads.length_trace("sharegpt")
    chats = workloads.trace_chats("sharegpt", conversations=5, turns=3, system_tokens=8, seed=4)
    pairs = set(zip(trace.input_tokens, trace.output_tokens, strict=True))
    for chat in chats.turns:
        assert all(later[: len(earlier)] == earlier for earlier, later in zip(chat, chat[1:], strict=False))
        first_user = len(chat[0]) - 8
        assert any(user == first_user for user, _ in pairs)
    assert chats == workloads.trace_chats("sharegpt", conversations=5, turns=3, system_tokens=8, seed=4)
    with pytest.raises(ValueError, match="workload must be one of"):
        workloads.trace_chats("nonesuch")
