"""Notebook 11's prose against its own numbers.

The measured cells of notebook 11 run the route and tiers demos at fixed defaults (seed 0). This test
runs the same calls (``SETUP`` is checked against the cells' source), then checks

* every number the prose ("What the tables show", the questions' rubrics) quotes from those tables,
  against the run, as the prose prints it;
* every comparison the prose states, at seed 0;
* the comparisons the prose states without a caveat, again at seeds 1 to 3: they are seed-robust;
* the ones it says depend on the seed, that they do: their sign changes across seeds 0 to 3 (the
  stale-events router against yours on chats; selective against write-through at 4x with one-off
  prompts) or at seed 5 (write-back against selective write-through at 2x with one-off prompts).

Seed-robust (hold at seeds 0 to 7 when this was written, asserted here at 0 to 3): one replica is the
same under every policy; session affinity first on chats at 4 and 8 replicas, with the lowest mean
TTFT at 8; the cache-aware router above round robin and least loaded on chats at 4 and 8; hashes
seeded per replica equal least loaded; on documents, the cache-aware router first at 4 and 8 and the
stale router below it at 2, 4 and 8; with host tiers, tier-aware above GPU-only at 2, 4 and 8,
session affinity first at 4 and 8, and the host lifting the GPU-only router at 8; write-back above
write-through below 4x, equal from 4x, 8x no better than 4x; selective write-through writing less
than write-through everywhere, below write-back everywhere, below write-through at 4x; with one-off
prompts, selective above write-through at 2x and below write-back at 4x. Seed-dependent: the stale
router against yours on chats (the gap stays under 0.07); with one-off prompts, write-back against
selective at 2x and selective against write-through at 4x.
"""

from __future__ import annotations

import functools

import nbformat
import pytest

from paged_helpers import workloads
from paged_helpers.demos import route as route_demo
from paged_helpers.demos import tiers as tiers_demo

from conftest import NOTEBOOKS, solution

NOTEBOOK = NOTEBOOKS / "11_cache_tiers_and_routing.ipynb"
ROBUST_SEEDS = (1, 2, 3)

# The demo calls of the notebook's measured cells, as they appear in their source.
SETUP = (
    "ph.workloads.multi_turn_chats(conversations=24, turns=6, seed=0)",
    "route_demo.document_sessions(sessions=48, questions=4, seed=0)",
    "route_demo.compare(classes, chats, names=(*route_demo.POLICIES, route_demo.SEEDED))",
    "route_demo.compare(classes, documents)",
    "replica_counts=(2, 4, 8), names=route_demo.TIERED_POLICIES",
    "host_blocks=96",
    "ph.workloads.multi_turn_chats(conversations=12, turns=6, seed=0)",
    "tiers_demo.sweep(TieredRadixCache, RadixCache, PagedKVCache, tier_chats, gpu_blocks=48)",
    "tiers_demo.with_one_off_prompts(tier_chats, clients=4, prompts=6, seed=0)",
    "multiples=(0, 0.5, 2, 4)",
)


def _classes() -> dict:
    return {
        "PagedKVCache": solution("04_fork_and_copy_on_write", "PagedKVCache"),
        "RadixCache": solution("10_radix_cache", "RadixCache"),
        "CacheAwareRouter": solution("11_cache_tiers_and_routing", "CacheAwareRouter"),
        "TieredRadixCache": solution("11_cache_tiers_and_routing", "TieredRadixCache"),
        "TierAwareRouter": solution("11_cache_tiers_and_routing", "TierAwareRouter"),
    }


@functools.cache
def routing(seed: int) -> dict:
    """The routing tables of the notebook's cells at ``seed``: (policy, replicas) -> run, per table."""
    classes = _classes()
    chats = workloads.multi_turn_chats(conversations=24, turns=6, seed=seed)
    documents = route_demo.document_sessions(sessions=48, questions=4, seed=seed)
    names = (*route_demo.POLICIES, route_demo.SEEDED)
    tables = {
        "chats": route_demo.compare(classes, chats, names=names, seed=seed),
        "documents": route_demo.compare(classes, documents, seed=seed),
        "tiered": route_demo.compare(
            classes, chats, replica_counts=(2, 4, 8), names=route_demo.TIERED_POLICIES, host_blocks=96, seed=seed
        ),
    }
    return {name: {(run.policy, run.replicas): run for run in runs} for name, runs in tables.items()}


@functools.cache
def host_tier(seed: int) -> dict:
    """The host-tier tables of the notebook's cell at ``seed``: (host blocks, policy) -> row, per table."""
    classes = _classes()
    args = (classes["TieredRadixCache"], classes["RadixCache"], classes["PagedKVCache"])
    chats = workloads.multi_turn_chats(conversations=12, turns=6, seed=seed)
    mixed = tiers_demo.with_one_off_prompts(chats, clients=4, prompts=6, seed=seed)
    tables = {
        "chats": tiers_demo.sweep(*args, chats, gpu_blocks=48),
        "mixed": tiers_demo.sweep(*args, mixed, gpu_blocks=48, multiples=(0, 0.5, 2, 4)),
    }
    return {name: {(row.host_blocks, row.policy): row for row in rows} for name, rows in tables.items()}


def hit(table: dict, *key) -> float:
    return table[key].hit_rate


CA, STALE, SESSION = route_demo.CACHE_AWARE, route_demo.STALE, route_demo.SESSION
RR, LL, APPROX = route_demo.ROUND_ROBIN, route_demo.LEAST_LOADED, route_demo.APPROXIMATE
WB, WT, SEL = "write-back", "write-through", tiers_demo.SELECTIVE


# --- the comparisons the prose states without a caveat ---------------------------------------------------
def _one_replica_is_the_same(seed: int) -> bool:
    tables = routing(seed)
    return all(
        len({(run.hit_rate, run.prefill_tokens) for (_, count), run in tables[name].items() if count == 1}) == 1
        for name in ("chats", "documents")
    )


ROBUST = {
    "one replica: every policy the same (chats, documents)": _one_replica_is_the_same,
    "chats: session affinity first at 4 and 8 replicas": lambda s: all(
        hit(routing(s)["chats"], SESSION, n) > hit(routing(s)["chats"], p, n)
        for n in (4, 8)
        for p in route_demo.POLICIES
        if p != SESSION
    ),
    "chats: session affinity's mean TTFT the lowest at 8": lambda s: all(
        routing(s)["chats"][SESSION, 8].ttft_ms() < routing(s)["chats"][p, 8].ttft_ms()
        for p in route_demo.POLICIES
        if p != SESSION
    ),
    "chats: cache-aware above round robin and least loaded at 4 and 8": lambda s: all(
        hit(routing(s)["chats"], CA, n) > max(hit(routing(s)["chats"], RR, n), hit(routing(s)["chats"], LL, n))
        for n in (4, 8)
    ),
    "chats: cache-aware's mean TTFT below round robin's at 8": lambda s: (
        routing(s)["chats"][CA, 8].ttft_ms() < routing(s)["chats"][RR, 8].ttft_ms()
    ),
    "chats: stale events within 0.07 of cache-aware": lambda s: all(
        abs(hit(routing(s)["chats"], STALE, n) - hit(routing(s)["chats"], CA, n)) < 0.07 for n in (2, 4, 8)
    ),
    "chats: hashes seeded per replica give least loaded's numbers exactly": lambda s: all(
        routing(s)["chats"][route_demo.SEEDED, n].prefill_by_replica == routing(s)["chats"][LL, n].prefill_by_replica
        for n in route_demo.REPLICA_COUNTS
    ),
    "documents: cache-aware first at 4 and 8": lambda s: all(
        hit(routing(s)["documents"], CA, n) > hit(routing(s)["documents"], p, n)
        for n in (4, 8)
        for p in route_demo.POLICIES
        if p != CA
    ),
    "documents: stale events below cache-aware at 2, 4 and 8": lambda s: all(
        hit(routing(s)["documents"], STALE, n) < hit(routing(s)["documents"], CA, n) for n in (2, 4, 8)
    ),
    "documents: session affinity below cache-aware at 8": lambda s: (
        hit(routing(s)["documents"], SESSION, 8) < hit(routing(s)["documents"], CA, 8)
    ),
    "host tiers: tier-aware above GPU-only at 2, 4 and 8": lambda s: all(
        hit(routing(s)["tiered"], route_demo.TIER_AWARE, n) > hit(routing(s)["tiered"], CA, n) for n in (2, 4, 8)
    ),
    "host tiers: they lift the GPU-only router at 8": lambda s: (
        hit(routing(s)["tiered"], CA, 8) > hit(routing(s)["chats"], CA, 8)
    ),
    "host tiers: session affinity first at 4 and 8": lambda s: all(
        hit(routing(s)["tiered"], SESSION, n) > hit(routing(s)["tiered"], p, n)
        for n in (4, 8)
        for p in route_demo.TIERED_POLICIES
        if p != SESSION
    ),
    "host tier: at 0.5x write-back above write-through above selective": lambda s: (
        hit(host_tier(s)["chats"], 24, WB) > hit(host_tier(s)["chats"], 24, WT) > hit(host_tier(s)["chats"], 24, SEL)
    ),
    "host tier: every host size below 4x, write-back above write-through": lambda s: all(
        hit(host_tier(s)["chats"], size, WB) > hit(host_tier(s)["chats"], size, WT) for size in (24, 48, 96)
    ),
    "host tier: from 4x write-back and write-through equal, 8x no better": lambda s: (
        hit(host_tier(s)["chats"], 192, WB)
        == hit(host_tier(s)["chats"], 192, WT)
        == hit(host_tier(s)["chats"], 384, WB)
        == hit(host_tier(s)["chats"], 384, WT)
    ),
    "host tier: selective writes fewer blocks than write-through at every size": lambda s: all(
        host_tier(s)["chats"][size, SEL].writes < host_tier(s)["chats"][size, WT].writes
        for size in (24, 48, 96, 192, 384)
    ),
    "host tier: selective below write-back at every size": lambda s: all(
        hit(host_tier(s)["chats"], size, SEL) < hit(host_tier(s)["chats"], size, WB) for size in (24, 48, 96, 192)
    ),
    "host tier: selective below write-through at 4x": lambda s: (
        hit(host_tier(s)["chats"], 192, SEL) < hit(host_tier(s)["chats"], 192, WT)
    ),
    "one-off prompts: at 2x selective above write-through, with fewer writes": lambda s: (
        hit(host_tier(s)["mixed"], 96, SEL) > hit(host_tier(s)["mixed"], 96, WT)
        and host_tier(s)["mixed"][96, SEL].writes < host_tier(s)["mixed"][96, WT].writes
    ),
    "one-off prompts: at 4x selective below write-back": lambda s: (
        hit(host_tier(s)["mixed"], 192, SEL) < hit(host_tier(s)["mixed"], 192, WB)
    ),
}


@pytest.mark.parametrize("claim", list(ROBUST))
def test_the_default_run_supports_the_claim(claim):
    assert ROBUST[claim](0), claim


@pytest.mark.parametrize("seed", ROBUST_SEEDS)
def test_the_claims_stated_without_a_caveat_hold_on_other_seeds(seed):
    failed = [claim for claim, holds in ROBUST.items() if not holds(seed)]
    assert not failed, f"seed {seed}: {failed}"


def test_the_claims_said_to_depend_on_the_seed_do():
    """The stale router is ahead of yours on chats at every replica count at seed 0, as the prose says,
    and behind at some count on another seed; with one-off prompts, write-back sits between selective
    and write-through at 2x at seed 0 and comes first at seed 5, and at 4x selective is behind
    write-through at seed 0 and ahead on another seed."""
    chats = routing(0)["chats"]
    assert all(hit(chats, STALE, n) > hit(chats, CA, n) for n in (2, 4, 8))
    assert any(
        hit(routing(s)["chats"], STALE, n) < hit(routing(s)["chats"], CA, n) for s in ROBUST_SEEDS for n in (2, 4, 8)
    )
    mixed = host_tier(0)["mixed"]
    assert hit(mixed, 96, SEL) > hit(mixed, 96, WB) > hit(mixed, 96, WT)
    assert hit(host_tier(5)["mixed"], 96, WB) > hit(host_tier(5)["mixed"], 96, SEL)
    assert hit(mixed, 192, SEL) < hit(mixed, 192, WT)
    assert any(hit(host_tier(s)["mixed"], 192, SEL) > hit(host_tier(s)["mixed"], 192, WT) for s in ROBUST_SEEDS)


# --- the numbers the prose quotes --------------------------------------------------------------------------
def _quoted() -> dict[str, str]:
    """Each number the prose quotes (as printed there) -> what it is, computed from the seed-0 run."""
    r, h = routing(0), host_tier(0)
    chats, documents, tiered = r["chats"], r["documents"], r["tiered"]
    tier_chats, mixed = h["chats"], h["mixed"]
    found = {}

    def rate(value: float, what: str) -> None:
        found[f"{value:.3f}"] = what

    rate(hit(chats, CA, 1), "chats, one replica")
    for n in (4, 8):
        rate(hit(chats, SESSION, n), f"chats, session affinity at {n}")
    for name in (CA, APPROX, RR, LL):
        rate(hit(chats, name, 8), f"chats, {name} at 8")
    for n in (2, 4, 8):
        rate(hit(chats, STALE, n), f"chats, stale at {n}")
        rate(hit(chats, CA, n), f"chats, cache-aware at {n}")
        rate(hit(documents, STALE, n), f"documents, stale at {n}")
        rate(hit(documents, CA, n), f"documents, cache-aware at {n}")
        rate(hit(tiered, route_demo.TIER_AWARE, n), f"host tiers, tier-aware at {n}")
        rate(hit(tiered, CA, n), f"host tiers, GPU-only at {n}")
    rate(hit(documents, CA, 1), "documents, one replica")
    rate(hit(documents, SESSION, 8), "documents, session affinity at 8")
    rate(hit(documents, APPROX, 8), "documents, approximate at 8")
    rate(hit(tiered, SESSION, 4), "host tiers, session affinity at 4")
    rate(hit(tiered, SESSION, 8), "host tiers, session affinity at 8")
    rate(hit(tier_chats, 0, "none"), "host tier: none")
    for policy in (WB, WT, SEL):
        rate(hit(tier_chats, 24, policy), f"host tier: {policy} at 0.5x")
    rate(hit(tier_chats, 96, WB), "host tier: write-back at 2x")
    rate(hit(tier_chats, 96, WT), "host tier: write-through at 2x")
    rate(hit(tier_chats, 192, WB), "host tier: 4x")
    rate(hit(tier_chats, 192, SEL), "host tier: selective at 4x")
    for policy in (WB, WT, SEL):
        rate(hit(mixed, 96, policy), f"one-off prompts: {policy} at 2x")
        rate(hit(mixed, 192, policy), f"one-off prompts: {policy} at 4x")
    found[f"{tier_chats[24, WT].writes:,}"] = "write-through's writes at 0.5x"
    found[f"loads back {tier_chats[24, WT].loads}."] = "write-through's loads at 0.5x"
    found[f"{tier_chats[24, SEL].writes} against {tier_chats[24, WT].writes:,} at 0.5x"] = "writes at 0.5x"
    found[f"{tier_chats[48, SEL].writes} against {tier_chats[48, WT].writes} at"] = "writes at 1x"
    found[f"{mixed[96, SEL].writes} writes against {mixed[96, WT].writes}"] = "one-off prompts: writes at 2x"
    found[f"({chats[SESSION, 8].ttft_ms():.1f} ms"] = "session affinity's TTFT at 8"
    found[f"{chats[CA, 8].ttft_ms():.1f} for the"] = "cache-aware's TTFT at 8"
    found[f"{chats[RR, 8].ttft_ms():.1f} for round robin"] = "round robin's TTFT at 8"
    found[f"the {tier_chats[192, WB].loads} blocks loaded back"] = "loads at 4x"
    return found


def _cell(cell_id: str) -> str:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    return next(cell.source for cell in notebook.cells if cell.get("id") == cell_id)


def test_the_prose_quotes_the_default_run():
    prose = " ".join(_cell("tiers-18").split())  # line breaks inside a phrase do not matter
    missing = [f"{number} ({what})" for number, what in _quoted().items() if number not in prose]
    assert not missing, "the prose does not quote the run's numbers: " + "; ".join(missing)
    # "write-through has written more than twice as many blocks" (Q1) at 0.5x
    rows = host_tier(0)["chats"]
    assert rows[24, WT].writes > 2 * rows[24, WB].writes


def test_the_rubrics_quote_the_default_run():
    r, h = routing(0), host_tier(0)
    q1 = " ".join(_cell("tiers-19").split())
    rows = h["chats"]
    for number in (
        f"{rows[24, WB].hit_rate:.3f} against {rows[24, WT].hit_rate:.3f}",
        f"{rows[24, WB].writes} writes against {rows[24, WT].writes:,}",
        f"{rows[24, WB].loads} loads against {rows[24, WT].loads}",
        f"{rows[192, WT].hit_rate:.3f} against {rows[192, SEL].hit_rate:.3f}",
        f"{h['mixed'][96, SEL].hit_rate:.3f} against write-through's {h['mixed'][96, WT].hit_rate:.3f}",
    ):
        assert number in q1, number
    q2 = " ".join(_cell("tiers-21").split())
    chats, documents = r["chats"], r["documents"]
    for number in (
        f"{chats[SESSION, 8].hit_rate:.3f} against {chats[CA, 8].hit_rate:.3f}",
        f"{documents[CA, 8].hit_rate:.3f} against {documents[SESSION, 8].hit_rate:.3f}",
        f"{documents[STALE, 8].hit_rate:.3f} against {documents[CA, 8].hit_rate:.3f}",
        f"from {chats[CA, 8].hit_rate:.3f} to",
        f"from {chats[CA, 8].ttft_ms():.1f} to",
        f"from {chats[CA, 8].imbalance:.2f} to",
    ):
        assert number in q2, number


def test_the_rubric_of_q2_quotes_the_runs_at_other_weights():
    classes = _classes()
    chats = workloads.multi_turn_chats(conversations=24, turns=6, seed=0)
    q2 = " ".join(_cell("tiers-21").split())
    heavier = {
        weight: route_demo.compare(classes, chats, replica_counts=(8,), names=(CA,), overlap_weight=weight)[0]
        for weight in (2.0, 8.0)
    }
    two, eight = heavier[2.0], heavier[8.0]
    assert f"to {two.hit_rate:.3f}, the mean TTFT" in q2
    assert f"to {two.ttft_ms():.1f} ms, the imbalance" in q2 and f"to {two.imbalance:.2f}" in q2
    assert f"{eight.hit_rate:.3f} with an imbalance of {eight.imbalance:.2f}" in q2


def test_the_notebook_cells_make_the_calls_this_test_makes():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = " ".join(" ".join(cell.source.split()) for cell in notebook.cells if cell.cell_type == "code")
    missing = [call for call in SETUP if call not in code]
    assert not missing, missing
