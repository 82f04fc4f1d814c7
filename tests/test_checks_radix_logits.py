"""check_radix_logits: the instructor's radix cache gives from-scratch logits on the tiny Qwen3, and
wrong radix caches (one mistake each, as subclasses of the instructor's class) fail with a message
that names what the learner's code handed out, before any logit is compared."""

from __future__ import annotations

import random

import pytest
import test_checks_radix as structural

from paged_helpers.checks import NotImplementedYet, check_radix_logits
from paged_helpers.checks.radix.on_the_model import scenarios as radix_logits

from conftest import solution
from lying_values import SaysEqual
from student_release import release_definition

NOTEBOOK = "10_radix_cache"
# Notebook 10 loads 02's allocator and 04's paged cache (which loads 03's and 02's in turn).
EARLIER = ("02_block_allocator", "03_paged_kv_cache", "04_fork_and_copy_on_write")


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "RadixCache"), solution("04_fork_and_copy_on_write", "PagedKVCache")


def evict_keeping_the_leaf(self, blocks_wanted):
    """Releases the blocks of the least recently used leaf but leaves the node in the tree."""
    released = set()
    while self.allocator.num_free < blocks_wanted:
        leaf = next(
            (
                leaf
                for leaf in sorted(self.leaves(), key=lambda leaf: leaf.last_used)
                if not leaf.lock_count and id(leaf) not in released
            ),
            None,
        )
        if leaf is None:
            return
        released.add(id(leaf))
        for block in leaf.blocks:
            self.allocator.release(block)


WRONG = {
    "split_swaps_blocks": structural.WRONG["split_swaps_blocks"],
    "match_takes_whole_edge": structural.WRONG["match_takes_whole_edge"],
    "insert_without_share": structural.WRONG["insert_without_share"],
    "evict_keeps_the_leaf": dict(evict=evict_keeping_the_leaf),
    "lock_never_released": structural.WRONG["lock_never_released"],
}


def test_right_implementation_passes(right, capsys):
    for seed in (0, 1, 2026):
        check_radix_logits(*right, seed=seed)
    captured = capsys.readouterr()
    assert captured.err == ""
    # seeds other than the default print the hidden call's label between the name and the count
    passes = [line for line in captured.out.splitlines() if line.startswith("check_radix_logits")]
    assert len(passes) == 3 and all(": 3 scenarios" in line for line in passes), captured.out


def test_scenarios_reuse_split_and_evict(right):
    """The check is only a test of reuse, splits and eviction if those happen in it."""
    calls = {"evict": 0, "reused": 0}

    class Counting(right[0]):
        def evict(self, blocks_wanted):
            calls["evict"] += 1
            super().evict(blocks_wanted)

        def match(self, tokens):
            node, blocks = super().match(tokens)
            calls["reused"] += len(blocks)
            return node, blocks

    check_radix_logits(Counting, right[1])
    assert calls["evict"] >= 3 and calls["reused"] >= 20


# Seeds whose three chats need more than 18 blocks while two requests run side by side: with a pool
# of 18 the instructor's own solution failed them ("reserve ... after evict raised MemoryError").
TIGHT_SEEDS = (12345,)


def test_a_pool_sized_from_the_workload_serves_any_eviction_order(right):
    """The pressure scenario's pool is sized for any correct cache, not only for least-recently-used
    eviction: a cache that evicts the most recently used unlocked leaf first passes too."""

    class MostRecentFirst(right[0]):
        def eviction_candidate(self):
            unlocked = [leaf for leaf in self.leaves() if leaf.lock_count == 0]
            return max(unlocked, key=lambda leaf: leaf.last_used, default=None)

    for seed in TIGHT_SEEDS:
        check_radix_logits(right[0], right[1], seed=seed)
        check_radix_logits(MostRecentFirst, right[1], seed=seed)


def test_every_pool_is_feasible_and_the_pressure_pool_forces_evictions():
    """The account behind each pool, over many seeds (the plans only: no model runs). Every pool holds
    what the requests running at once hold; the pools without pressure never run short (their reuse
    is compared with a brute force that counts every prompt served as cached); the pool under
    pressure is smaller than a tree that never evicts would need, nearly always."""
    draw = random.Random(2026)
    pressure_forced = 0
    seeds = [draw.randrange(2**31) for _ in range(500)]
    for seed in seeds:
        rng = random.Random(seed)
        chat, branches, pressure = (make(rng) for make in radix_logits.SCENARIOS)
        for scenario in (chat, branches, pressure):
            held, unevicted, tree = radix_logits._account(scenario.plan)
            assert scenario.pool >= held, (seed, scenario.name)
            assert f"(pool of {scenario.pool})" in scenario.name
        for scenario in (chat, branches):
            assert scenario.pool >= radix_logits._account(scenario.plan)[1], (seed, scenario.name)
        pressure_forced += radix_logits._account(pressure.plan)[2] > pressure.pool
    assert pressure_forced >= 0.95 * len(seeds), f"evictions forced at {pressure_forced} of {len(seeds)} seeds"


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_check_names_the_bug(bug, right, failing_message, message_snapshot):
    message = failing_message(check_radix_logits, type(bug, (right[0],), WRONG[bug]), right[1])
    assert message == message_snapshot


def test_release_says_not_implemented_yet(tmp_path, right):
    released = release_definition(tmp_path, NOTEBOOK, "RadixCache", finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_radix_logits(released, right[1])


def test_the_pool_is_read_strictly(right, failing_message):
    """The check reads refcounts as plain ints: a list that says it equals anything is refused, not trusted."""

    class Sneaky(right[1]):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # refs stays the allocator's own list (in its __dict__); readers get it wrapped
            wrapped = property(lambda allocator: SaysEqual(allocator.__dict__["refs"]))
            self.allocator.__class__ = type("SneakyAllocator", (type(self.allocator),), {"refs": wrapped})

    message = failing_message(check_radix_logits, right[0], Sneaky)
    assert "allocator.refs" in message and "SaysEqual" in message, message
