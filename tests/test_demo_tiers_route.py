"""`python run.py tiers` and `python run.py route`, small: the JSON line, the rows, what the tables
must show for the course's solutions (a host tier that holds everything recovers every evicted
history; routing with one replica is the same under every policy; the cache-aware router beats round
robin with several), how the demos' pieces behave (keys, events of both media, the baselines, the
reuse filter, the workloads, the figure), the stated cost model, and the ShareGPT-shaped chats.
The comparisons notebook 11's prose states are in test_notebook11_numbers.py."""

from __future__ import annotations

import json

import pytest
import torch

import run
from paged_helpers import workloads
from paged_helpers.checks.tiers import keys
from paged_helpers.demos import DEMOS, routed_fleet
from paged_helpers.demos import route as route_demo
from paged_helpers.demos import tiers as tiers_demo
from paged_helpers.demos.cost_model import COST_MODEL, measured_host_to_gpu

from conftest import solution


@pytest.fixture(scope="module")
def classes():
    return {
        "TieredRadixCache": solution("11_cache_tiers_and_routing", "TieredRadixCache"),
        "CacheAwareRouter": solution("11_cache_tiers_and_routing", "CacheAwareRouter"),
        "TierAwareRouter": solution("11_cache_tiers_and_routing", "TierAwareRouter"),
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
    rows = tiers_demo.sweep(*args, gpu_blocks=24, multiples=(0, 16), policies=tiers_demo.POLICIES)
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
    assert [(r["replicas"], r["policy"]) for r in runs[: len(route_demo.POLICIES)]] == [
        (1, policy) for policy in route_demo.POLICIES
    ]
    one = [r for r in runs if r["replicas"] == 1]
    assert len({(r["hit_rate"], r["prefill_tokens"]) for r in one}) == 1  # one replica: routing changes nothing
    assert all(r["ttft_ms_p90"] >= r["ttft_ms_mean"] * 0.5 for r in runs)


def test_cache_aware_routing_beats_round_robin_with_eight_replicas(classes):
    chats = workloads.multi_turn_chats(conversations=24, turns=6, seed=0)
    runs = route_demo.compare(classes, chats, replica_counts=(8,))
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
    made = []

    def make(replicas):
        made.append(Listening(replicas))
        return made[-1]

    run_ = route_demo.RouteRun("cache-aware", 2)
    route_demo.serve_routed(chats, classes, route_demo.Policy(make), run_, 20, 16, 2, COST_MODEL)
    assert {kind for _, kind, _ in heard} == {"stored", "removed"}
    assert [made[0].held[replica] for replica in range(2)] == [holds["GPU"] for holds in run_.final_holds]


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


def test_the_demos_keys_are_notebook_05s_chain_and_the_tiered_caches_keys(classes):
    """The router's keys (routed_fleet.block_keys), a tree's keys (routed_fleet.tree_keys) and the learner's host
    entries (TieredRadixCache.block_keys, given code on notebook 05's block_hashes) agree."""
    block_hashes = solution("05_prefix_caching", "block_hashes")
    tokens = list(range(3, 70))
    assert routed_fleet.block_keys(tokens, 16) == [digest.hex() for digest in block_hashes(tokens, 16)]
    cache = classes["PagedKVCache"](num_blocks=12, block_size=4, **routed_fleet.BOOKKEEPING_SHAPE)
    tiered = classes["TieredRadixCache"](cache, 8, "write-through")
    server = tiers_demo.TieredServer(tiered, cache)
    prompt = tokens[:18]
    server.start("a", prompt)
    cache.lengths["a"] = len(prompt)
    server.prefilled("a", prompt)
    assert routed_fleet.tree_keys(tiered) == set(routed_fleet.block_keys(prompt, 4)) == set(tiered.host_entries)
    assert routed_fleet.tree_keys(tiered, keys.seeded_root("other")).isdisjoint(routed_fleet.tree_keys(tiered))


def test_replicas_seeded_each_their_own_way_give_least_loaded_exactly(classes):
    chats = workloads.multi_turn_chats(conversations=8, turns=3, seed=2)
    runs = route_demo.compare(
        classes, chats, replica_counts=(2, 4), names=(route_demo.LEAST_LOADED, route_demo.SEEDED), blocks=24
    )
    by = {(run.policy, run.replicas): run for run in runs}
    for replicas in (2, 4):
        seeded, loaded = by[route_demo.SEEDED, replicas], by[route_demo.LEAST_LOADED, replicas]
        assert (seeded.cached_tokens, seeded.prefill_by_replica) == (loaded.cached_tokens, loaded.prefill_by_replica)


def test_session_affinity_keeps_a_session_on_its_first_replica():
    router = route_demo.SessionAffinity(3)
    assert router.place(7, ["k"], [5, 0, 2]) == 1  # least loaded at its first request
    assert router.place(7, ["k"], [0, 9, 0]) == 1  # then its home, whatever the load
    assert router.place(8, ["k"], [0, 9, 0]) == 0


def test_the_approximate_router_forgets_what_it_routed_after_its_ttl(classes):
    router = route_demo.approximate(classes["CacheAwareRouter"], ttl_rounds=2)(2, 1.0)
    router.tick(0)
    keys = ["a", "b", "c"]
    assert router.choose(keys, [0, 1]) == 0  # nothing known: the lighter replica
    router.on_event(1, "stored", keys)  # events are not heard
    router.tick(1)
    assert router.overlap_blocks(0, keys) == 3 and router.overlap_blocks(1, keys) == 0
    assert router.choose(keys, [2, 0]) == 0  # 2 blocks of load against 3 to prefill: it follows its guess
    router.tick(4)  # the last route was at round 1: gone at round 3
    assert router.overlap_blocks(0, keys) == 0


def test_tiered_replicas_report_both_media_and_the_tier_aware_router_tracks_them(classes):
    chats = workloads.multi_turn_chats(conversations=6, turns=4, seed=3)
    heard, made = [], []

    class Listening(classes["TierAwareRouter"]):
        def on_event(self, replica, kind, keys, medium="GPU"):
            heard.append((kind, medium))
            super().on_event(replica, kind, keys, medium)

    def make(replicas):
        made.append(Listening(replicas))
        return made[-1]

    run_ = route_demo.RouteRun("tier-aware", 2)
    route_demo.serve_routed(
        chats, classes, route_demo.Policy(make, hears="all"), run_, 20, 16, 2, COST_MODEL, host_blocks=12
    )
    assert set(heard) == {("stored", "GPU"), ("removed", "GPU"), ("stored", "CPU"), ("removed", "CPU")}
    assert run_.host_tokens > 0
    assert [made[0].held_on[replica] for replica in range(2)] == run_.final_holds


def test_the_tier_aware_router_beats_gpu_events_only_with_host_tiers(classes):
    chats = workloads.multi_turn_chats(conversations=12, turns=5, seed=4)
    runs = route_demo.compare(
        classes, chats, replica_counts=(4,), names=route_demo.TIERED_POLICIES, blocks=32, host_blocks=64
    )
    by = {run.policy: run for run in runs}
    assert by[route_demo.TIER_AWARE].hit_rate > by[route_demo.CACHE_AWARE].hit_rate


def test_admission_after_reuse_refuses_a_block_asked_for_once(classes):
    admitting = tiers_demo.admitting_after_reuse(classes["TieredRadixCache"], 2)
    cache = classes["PagedKVCache"](num_blocks=8, block_size=4, **routed_fleet.BOOKKEEPING_SHAPE)
    tiered = tiers_demo.counting(admitting)(cache, 8, "write-through")
    server = tiers_demo.TieredServer(tiered, cache)
    prompt = list(range(13))
    for turn in ("first", "second"):
        server.start(turn, prompt)
        cache.lengths[turn] = len(prompt)
        server.prefilled(turn, prompt)
        server.finish(turn)
        if turn == "first":
            assert tiered.writes == 0 and tiered.refused == 3 and not tiered.host_entries
    assert tiered.writes == 3 and set(tiered.host_entries) == set(routed_fleet.block_keys(prompt, 4))
    with pytest.raises(ValueError, match="store_threshold"):
        tiers_demo.admitting_after_reuse(classes["TieredRadixCache"], 1)


def test_selective_write_through_writes_less_than_write_through(classes):
    chats = workloads.multi_turn_chats(conversations=8, turns=5, seed=0)
    args = (classes["TieredRadixCache"], classes["RadixCache"], classes["PagedKVCache"], chats)
    rows = {(row.host_blocks, row.policy): row for row in tiers_demo.sweep(*args, gpu_blocks=32, multiples=(1,))}
    assert rows[(32, tiers_demo.SELECTIVE)].writes < rows[(32, "write-through")].writes


def test_the_workloads_of_the_demos():
    documents = route_demo.document_sessions(sessions=10, questions=3, documents=4, document_tokens=32, seed=1)
    assert documents.requests == 30 and documents == route_demo.document_sessions(10, 3, 4, 32, seed=1)
    for session in documents.turns:  # the questions of a session share the system prompt and one document
        assert len({tuple(prompt[: 32 + 32]) for prompt in session}) == 1
    chats = workloads.multi_turn_chats(conversations=3, turns=2, seed=0)
    mixed = tiers_demo.with_one_off_prompts(chats, clients=2, prompts=4, tokens=(20, 30), seed=0)
    assert mixed.turns[:3] == chats.turns and [len(session) for session in mixed.turns[3:]] == [4, 4]
    system = chats.turns[0][0][:32]
    assert all(prompt[:32] == system and 52 <= len(prompt) <= 62 for prompt in mixed.turns[3])
    with pytest.raises(ValueError):
        route_demo.document_sessions(sessions=0)


def test_run_route_with_host_tiers_and_seeded_replicas(capsys):
    argv = ["route", "--conversations", "4", "--turns", "3", "--replicas", "2", "--blocks", "24"]
    assert run.main([*argv, "--host-blocks", "24"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["policy"] for r in result["runs"]] == list(route_demo.TIERED_POLICIES)
    assert result["host_blocks_per_replica"] == 24
    assert run.main([*argv, "--seeded", "--workload", "documents"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["runs"][-1]["policy"] == route_demo.SEEDED and result["workload"] == "document_sessions"


def test_run_tiers_with_one_off_clients(capsys):
    argv = ["tiers", "--conversations", "3", "--turns", "3", "--gpu-blocks", "24", "--one-off-clients", "2"]
    assert run.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {row["policy"] for row in result["rows"]} == {"none", *tiers_demo.ALL_POLICIES}
    assert result["parameters"]["one_off_clients"] == 2


def test_the_figure_draws_both_sweeps(classes):
    import matplotlib

    matplotlib.use("Agg")
    from paged_helpers.plots import tiers_routing

    chats = workloads.multi_turn_chats(conversations=4, turns=3, seed=0)
    rows = tiers_demo.sweep(
        classes["TieredRadixCache"], classes["RadixCache"], classes["PagedKVCache"], chats, 24, multiples=(0, 1, 2)
    )
    runs = route_demo.compare(classes, chats, replica_counts=(1, 2), names=(route_demo.LEAST_LOADED,), blocks=24)
    host, replicas = tiers_demo.series(rows), route_demo.series(runs)
    assert set(host) == set(tiers_demo.ALL_POLICIES) and all(points[0][0] == 0 for points in host.values())
    figure = tiers_routing.plot_tiers_and_routing(host, replicas, gpu_blocks=24, title="t")
    assert len(figure.axes) == 4
    assert [text.get_text() for text in figure.axes[0].get_xticklabels()] == ["none", "1x", "2x"]
    matplotlib.pyplot.close(figure)
