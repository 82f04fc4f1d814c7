"""check_kv_router: the instructor's router passes (visible and hidden streams, random 31-bit seeds);
wrong routers fail with a message naming the bug (stale events above all); the student release
says "not implemented yet"."""

from __future__ import annotations

import random

import pytest

from paged_helpers.checks import NotImplementedYet, check_kv_router
from paged_helpers.checks.tiers import routing

import hidden_proof
from conftest import solution
from student_release import release_definition

NOTEBOOK = "11_cache_tiers_and_routing"
EARLIER = (
    "02_block_allocator",
    "03_paged_kv_cache",
    "04_fork_and_copy_on_write",
    "05_prefix_caching",
    "10_radix_cache",
)


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "CacheAwareRouter")


def on_event_ignoring_removals(self, replica, kind, keys):
    if kind == "stored":
        self.held[replica].update(keys)


def overlap_counting_every_held_key(self, replica, keys):
    return sum(key in self.held[replica] for key in keys)


def cost_without_weight(self, replica, keys, decode_blocks):
    return (len(keys) - self.overlap_blocks(replica, keys)) + decode_blocks[replica]


def cost_counting_overlap(self, replica, keys, decode_blocks):
    """Rewards overlap instead of charging the blocks left to prefill (the same argmin only by luck)."""
    return -self.overlap_weight * self.overlap_blocks(replica, keys) + decode_blocks[replica] + 100


def choose_last_of_ties(self, keys, decode_blocks):
    costs = [self.cost(replica, keys, decode_blocks) for replica in range(self.replicas)]
    return max(replica for replica in range(self.replicas) if costs[replica] == min(costs))


WRONG = {
    "stale_events": dict(on_event=on_event_ignoring_removals),
    "overlap_not_a_prefix": dict(overlap_blocks=overlap_counting_every_held_key),
    "cost_without_weight": dict(cost=cost_without_weight),
    "cost_counting_overlap": dict(cost=cost_counting_overlap),
    "ties_to_the_last": dict(choose=choose_last_of_ties),
}


def test_right_implementation_passes(right, capsys):
    draw = random.Random()
    for seed in (0, 1, 2026, *(draw.getrandbits(31) for _ in range(5))):
        check_kv_router(right, seed=seed)
        check_kv_router(right, seed=seed, hidden=True)
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "check_kv_router: 3 event streams" in captured.out


def test_a_router_of_another_design_passes(right):
    """A router that keeps a per-replica count of each key (stored twice, removed once: still held?
    no: a replica's removal removes the block) and recomputes overlap by walking: the same answers."""

    class Dicts(right):
        def __init__(self, replicas, overlap_weight=1.0):
            super().__init__(replicas, overlap_weight)
            self.held = [dict() for _ in range(replicas)]

        def on_event(self, replica, kind, keys):
            for key in keys:
                if kind == "stored":
                    self.held[replica][key] = True
                else:
                    self.held[replica].pop(key, None)

    for seed in (0, 99):
        check_kv_router(Dicts, seed=seed)


@pytest.mark.parametrize("bug", list(WRONG))
def test_check_names_the_bug(bug, right, failing_message, message_snapshot):
    assert failing_message(check_kv_router, type(bug, (right,), WRONG[bug])) == message_snapshot


def test_hidden_streams_catch_stale_events_without_numbers(right, failing_message):
    wrong = type("stale", (right,), {"on_event": on_event_ignoring_removals})
    message = failing_message(lambda router: check_kv_router(router, seed=random.getrandbits(31), hidden=True), wrong)
    assert "a hidden scenario failed" in message and "a 'removed' event means" in message, message


# Each wrong router -> the hidden kinds that catch it in every draw: all but the ones that cannot (a
# weight of 1 hides a cost without the weight; one replica has no ties).
ALL_KINDS = ("many replicas", "a router that weighs load only", "long prompts, a strong overlap weight", "one replica")
CAUGHT_BY = {
    "stale_events": ALL_KINDS,
    "overlap_not_a_prefix": ALL_KINDS,
    "cost_without_weight": ("a router that weighs load only", "long prompts, a strong overlap weight", "one replica"),
    "cost_counting_overlap": ALL_KINDS,
    "ties_to_the_last": ("many replicas", "a router that weighs load only", "long prompts, a strong overlap weight"),
}


def test_right_router_passes_the_secret_seeds(right):
    assert set(ALL_KINDS) == set(routing.STORY.hidden) and set(CAUGHT_BY) == set(WRONG)
    hidden_proof.passes_every_seed(check_kv_router, right)


@pytest.mark.parametrize("bug", list(WRONG))
def test_hidden_call_fails_every_wrong_router_at_every_seed(bug, right, failing_message):
    """Issue 36: the hidden call fails each wrong router at every one of the SECRET_SEEDS, naming no number."""
    hidden_proof.fails_at_every_seed(check_kv_router, type(bug, (right,), WRONG[bug]), failing_message)


@pytest.mark.parametrize("bug", list(WRONG))
def test_each_hidden_kind_catches_its_wrong_routers_in_every_draw(bug, right, failing_message):
    """Issue 36: no draw lets a kind miss a mistake it can show (a stream with no block held after a gap,
    no tie for the lowest cost, or the one weight of 1 among the kind's weights): each kind of
    ``CAUGHT_BY[bug]``, run alone, fails the wrong router at every seed, and the message names that kind."""
    wrong = type(bug, (right,), WRONG[bug])
    hidden_proof.each_kind_catches(routing.STORY.hidden, CAUGHT_BY[bug], wrong, failing_message)


def test_release_says_not_implemented_yet(tmp_path):
    released = release_definition(tmp_path, NOTEBOOK, "CacheAwareRouter", finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_kv_router(released)
