"""check_tier_aware_router: the instructor's router passes (visible and hidden streams, random 31-bit
seeds, another correct design); wrong routers (one mistake each, as subclasses of the instructor's)
fail with a message naming the mistake; each hidden kind catches, at every secret seed, every mistake
it can show; the student release says "not implemented yet"."""

from __future__ import annotations

import random

import pytest

from paged_helpers.checks import NotImplementedYet, check_tier_aware_router
from paged_helpers.checks.tiers import tier_routing

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
    return solution(NOTEBOOK, "TierAwareRouter")


def on_event_ignoring_removals(self, replica, kind, keys, medium="GPU"):
    if kind == "stored":
        self.held_on[replica][medium].update(keys)


def on_event_ignoring_the_medium(self, replica, kind, keys, medium="GPU"):
    """Every block into one set, as if the host were the GPU."""
    if kind == "stored":
        self.held_on[replica]["GPU"].update(keys)
    else:
        self.held_on[replica]["GPU"].difference_update(keys)


def on_event_removing_from_both_media(self, replica, kind, keys, medium="GPU"):
    if kind == "stored":
        self.held_on[replica][medium].update(keys)
    else:
        for held in self.held_on[replica].values():
            held.difference_update(keys)


def make_credit(combine):
    def overlap_credit(self, replica, keys):
        credit = 0.0
        for key in keys:
            weights = [weight for medium, weight in self.tier_weights.items() if key in self.held_on[replica][medium]]
            if not weights:
                break
            credit += combine(weights)
        return credit

    return overlap_credit


def credit_after_gaps(self, replica, keys):
    return sum(
        max((w for m, w in self.tier_weights.items() if key in self.held_on[replica][m]), default=0.0) for key in keys
    )


def credit_with_constant_weights(self, replica, keys):
    """0.8 written into the code instead of read from tier_weights."""
    credit = 0.0
    for key in keys:
        if key in self.held_on[replica]["GPU"]:
            credit += 1.0
        elif key in self.held_on[replica]["CPU"]:
            credit += 0.8
        else:
            break
    return credit


def cost_without_weight(self, replica, keys, decode_blocks):
    return (len(keys) - self.overlap_credit(replica, keys)) + decode_blocks[replica]


def cost_of_the_gpu_overlap(self, replica, keys, decode_blocks):
    """The CacheAwareRouter's cost, as if cost had not been overridden: GPU blocks only."""
    return self.overlap_weight * (len(keys) - self.overlap_blocks(replica, keys)) + decode_blocks[replica]


def choose_on_the_gpu_overlap(self, keys, decode_blocks):
    """A CacheAwareRouter whose choose computed the cost inline instead of calling self.cost."""
    costs = [
        self.overlap_weight * (len(keys) - self.overlap_blocks(r, keys)) + decode_blocks[r]
        for r in range(self.replicas)
    ]
    return min(range(self.replicas), key=lambda r: (costs[r], r))


WRONG = {
    "stale_events": dict(on_event=on_event_ignoring_removals),
    "medium_ignored": dict(on_event=on_event_ignoring_the_medium),
    "removal_from_both_media": dict(on_event=on_event_removing_from_both_media),
    "weights_added": dict(overlap_credit=make_credit(sum)),
    "smaller_weight": dict(overlap_credit=make_credit(min)),
    "credit_after_gaps": dict(overlap_credit=credit_after_gaps),
    "constant_weights": dict(overlap_credit=credit_with_constant_weights),
    "cost_without_weight": dict(cost=cost_without_weight),
    "cost_of_the_gpu_overlap": dict(cost=cost_of_the_gpu_overlap),
    "choose_on_the_gpu_overlap": dict(choose=choose_on_the_gpu_overlap),
}

ALL_KINDS = (
    "several replicas with host tiers",
    "a stronger overlap weight",
    "other tier weights",
    "one replica",
)
SEVERAL = ("several replicas with host tiers", "a stronger overlap weight", "other tier weights")
# Each wrong router -> the hidden kinds that catch it in every draw (a weight of 1 hides a cost without
# the weight; default tier weights hide constants; one replica has no choice to get wrong).
CAUGHT_BY = {
    "stale_events": ALL_KINDS,
    "medium_ignored": ALL_KINDS,
    "removal_from_both_media": ALL_KINDS,
    "weights_added": ALL_KINDS,
    "smaller_weight": ALL_KINDS,
    "credit_after_gaps": ALL_KINDS,
    "constant_weights": ("other tier weights",),
    "cost_without_weight": ("a stronger overlap weight", "one replica"),
    "cost_of_the_gpu_overlap": ALL_KINDS,
    "choose_on_the_gpu_overlap": SEVERAL,
}

# The visible check streams have default weights only (constants pass them: the hidden kind catches them).
VISIBLE_MISSES = {"constant_weights"}


def test_right_implementation_passes(right, capsys):
    draw = random.Random()
    for seed in (0, 1, 2026, *(draw.getrandbits(31) for _ in range(4))):
        check_tier_aware_router(right, seed=seed)
        check_tier_aware_router(right, seed=seed, hidden=True)
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "check_tier_aware_router: 3 event streams" in captured.out


def test_a_router_of_another_design_passes(right):
    """Per key, a dict from medium to True, and a credit that sums GPU blocks and host-only blocks
    separately: the same answers."""

    class Dicts(right):
        def __init__(self, replicas, overlap_weight=1.0, tier_weights=None):
            super().__init__(replicas, overlap_weight, *(() if tier_weights is None else (tier_weights,)))
            self.where = [dict() for _ in range(replicas)]

        def on_event(self, replica, kind, keys, medium="GPU"):
            super().on_event(replica, kind, keys, medium)
            for key in keys:
                media = self.where[replica].setdefault(key, set())
                (media.add if kind == "stored" else media.discard)(medium)

        def overlap_credit(self, replica, keys):
            on_gpu = on_host = 0
            for key in keys:
                media = self.where[replica].get(key, set())
                if not media:
                    break
                if "GPU" in media:
                    on_gpu += 1
                else:
                    on_host += 1
            return on_gpu * self.tier_weights["GPU"] + on_host * self.tier_weights["CPU"]

    for seed in (0, 99):
        check_tier_aware_router(Dicts, seed=seed)
        check_tier_aware_router(Dicts, seed=seed, hidden=True)


@pytest.mark.parametrize("bug", sorted(set(WRONG) - VISIBLE_MISSES))
def test_check_names_the_bug(bug, right, failing_message, message_snapshot):
    assert failing_message(check_tier_aware_router, type(bug, (right,), WRONG[bug])) == message_snapshot


def test_constant_weights_are_named_by_the_kind_that_changes_them(right, failing_message, message_snapshot):
    from paged_helpers.checks.tiers import tier_routing

    wrong = type("constant", (right,), WRONG["constant_weights"])
    hidden = {"other tier weights": tier_routing.STORY.hidden["other tier weights"]}
    from paged_helpers.checks.speaking.hidden import run_hidden_scenarios

    message = failing_message(run_hidden_scenarios, hidden, 5, wrong)
    assert message == message_snapshot


def test_right_router_passes_the_secret_seeds(right):
    assert set(ALL_KINDS) == set(tier_routing.STORY.hidden) and set(CAUGHT_BY) == set(WRONG)
    hidden_proof.passes_every_seed(check_tier_aware_router, right)


@pytest.mark.parametrize("bug", list(WRONG))
def test_hidden_call_fails_every_wrong_router_at_every_seed(bug, right, failing_message):
    """The hidden call fails each wrong router at every one of the SECRET_SEEDS, naming no number."""
    hidden_proof.fails_at_every_seed(check_tier_aware_router, type(bug, (right,), WRONG[bug]), failing_message)


@pytest.mark.parametrize("bug", list(WRONG))
def test_each_hidden_kind_catches_its_wrong_routers_in_every_draw(bug, right, failing_message):
    """Each kind of ``CAUGHT_BY[bug]``, run alone, fails the wrong router at every secret seed, and the
    message names that kind: no draw lets a kind miss a mistake it can show."""
    wrong = type(bug, (right,), WRONG[bug])
    hidden_proof.each_kind_catches(tier_routing.STORY.hidden, CAUGHT_BY[bug], wrong, failing_message)


def test_release_says_not_implemented_yet(tmp_path):
    released = release_definition(tmp_path, NOTEBOOK, "TierAwareRouter", finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_tier_aware_router(released)
