"""check_radix_cache and check_cache_aware_order: the instructor's code passes, realistic wrong
versions fail with a message naming the bug, and the student release says "not implemented yet".

Wrong radix caches are subclasses of the instructor's class (notebook 10) with one method
replaced by a version carrying exactly one mistake; wrong orders are small functions.
"""

from __future__ import annotations

import pytest

from paged_helpers.checks import NotImplementedYet, check_cache_aware_order, check_radix_cache
from paged_helpers.checks.radix import tree

import hidden_proof
from conftest import solution
from lying_values import EqualsAnything
from student_release import release_definition

NOTEBOOK = "10_radix_cache"
# Notebook 10 loads 02's allocator and 04's paged cache (which loads 03's and 02's in turn).
EARLIER = ("02_block_allocator", "03_paged_kv_cache", "04_fork_and_copy_on_write")


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "RadixCache"), solution("02_block_allocator", "BlockAllocator")


def _matching_blocks(self, child, tokens, done):
    """How many whole blocks of child's edge equal tokens from position done (as the solution walks)."""
    size, same = self.block_size, 0
    while (
        same < len(child.blocks)
        and done + (same + 1) * size <= len(tokens)
        and child.tokens[same * size : (same + 1) * size] == tokens[done + same * size : done + (same + 1) * size]
    ):
        same += 1
    return same


def make_match(split=True, whole_edge=False, stamp=True):
    def match(self, tokens):
        tokens, size, now = self._full_blocks(tokens), self.block_size, next(self.clock)
        node, blocks, done = self.root, [], 0
        while done < len(tokens):
            child = node.children.get(tokens[done : done + size])
            if child is None:
                break
            same = _matching_blocks(self, child, tokens, done)
            if same < len(child.blocks) and split:
                child = self._split(child, same)
            if stamp:
                child.last_used = now
            blocks += child.blocks if whole_edge else child.blocks[:same]
            done += same * size
            node = child
            if same * size < len(child.tokens):
                break
        return node, blocks

    return match


def split_swapping_blocks(self, node, blocks_kept):
    """Cuts the tokens right but gives each half the other half's blocks."""
    cut = blocks_kept * self.block_size
    upper = type(node)(node.tokens[:cut], node.blocks[-blocks_kept:], node.parent, node.last_used)
    upper.lock_count = node.lock_count
    node.parent.children[node.tokens[: self.block_size]] = upper
    upper.children[node.tokens[cut : cut + self.block_size]] = node
    node.tokens, node.blocks, node.parent = node.tokens[cut:], node.blocks[:-blocks_kept], upper
    return upper


def split_new_lower(self, node, blocks_kept):
    """Keeps the node object as the upper part and hangs a new node below it."""
    cut = blocks_kept * self.block_size
    lower = type(node)(node.tokens[cut:], node.blocks[blocks_kept:], node, node.last_used)
    lower.children, lower.lock_count = node.children, node.lock_count
    for child in lower.children.values():
        child.parent = lower
    node.tokens, node.blocks = node.tokens[:cut], node.blocks[:blocks_kept]
    node.children = {lower.tokens[: self.block_size]: lower}
    return node


def split_losing_the_lower_part(self, node, blocks_kept):
    """Puts the upper part in the parent's place but never hangs the node itself (the edge's tail) below it."""
    cut = blocks_kept * self.block_size
    upper = type(node)(node.tokens[:cut], node.blocks[:blocks_kept], node.parent, node.last_used)
    upper.lock_count = node.lock_count
    node.parent.children[node.tokens[: self.block_size]] = upper
    node.tokens, node.blocks, node.parent = node.tokens[cut:], node.blocks[blocks_kept:], upper
    return upper


def split_keeping_one_block_below(self, node, blocks_kept):
    """The lower part keeps only the first block after the cut: the rest of the edge is lost."""
    cut, size = blocks_kept * self.block_size, self.block_size
    upper = type(node)(node.tokens[:cut], node.blocks[:blocks_kept], node.parent, node.last_used)
    upper.lock_count = node.lock_count
    node.parent.children[node.tokens[:size]] = upper
    upper.children[node.tokens[cut : cut + size]] = node
    node.tokens, node.blocks = node.tokens[cut : cut + size], node.blocks[blocks_kept : blocks_kept + 1]
    node.parent = upper
    return upper


def split_without_lock_count(self, node, blocks_kept):
    upper = type(self).__mro__[1]._split(self, node, blocks_kept)
    upper.lock_count = 0
    return upper


def make_candidate(leaves_only=True, unlocked_only=True):
    def eviction_candidate(self):
        nodes, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            nodes.append(node)
        candidates = [
            node
            for node in nodes
            if (not leaves_only or not node.children) and (not unlocked_only or node.lock_count == 0)
        ]
        return min(candidates, key=lambda node: node.last_used, default=None)

    return eviction_candidate


def evict_everything(self, blocks_wanted):
    while (leaf := self.eviction_candidate()) is not None:
        del leaf.parent.children[leaf.tokens[: self.block_size]]
        for block in leaf.blocks:
            self.allocator.release(block)


def unlock_node_only(self, node):
    node.lock_count -= 1


def unlock_never(self, node):
    """The lock is taken but never given back."""


def make_insert(share=True):
    def insert(self, tokens, blocks):
        tokens = self._full_blocks(tokens)
        node, cached = self.match(tokens)
        first_new = len(cached)
        if first_new * self.block_size == len(tokens):
            return node
        leaf = type(self.root)(
            tokens[first_new * self.block_size :],
            blocks[first_new : len(tokens) // self.block_size],
            node,
            next(self.clock),
        )
        if share:
            for block in leaf.blocks:
                self.allocator.share(block)
        node.children[leaf.tokens[: self.block_size]] = leaf
        return leaf

    return insert


def insert_from_root(self, tokens, blocks):
    """Hangs the whole sequence under the root, replacing what was cached there."""
    tokens = self._full_blocks(tokens)
    leaf = type(self.root)(tokens, blocks[: len(tokens) // self.block_size], self.root, next(self.clock))
    for block in leaf.blocks:
        self.allocator.share(block)
    self.root.children[tokens[: self.block_size]] = leaf
    return leaf


WRONG = {
    "match_ignores_split_point": dict(match=make_match(split=False)),
    "match_takes_whole_edge": dict(match=make_match(split=False, whole_edge=True)),
    "split_swaps_blocks": dict(_split=split_swapping_blocks),
    "split_keeps_node_as_upper": dict(_split=split_new_lower),
    "split_forgets_lock_count": dict(_split=split_without_lock_count),
    "split_loses_lower_part": dict(_split=split_losing_the_lower_part),
    "split_loses_tail_blocks": dict(_split=split_keeping_one_block_below),
    "evicts_inner_node": dict(eviction_candidate=make_candidate(leaves_only=False)),
    "evicts_locked_node": dict(eviction_candidate=make_candidate(unlocked_only=False)),
    "evicts_everything": dict(evict=evict_everything),
    "lock_never_released": dict(unlock=unlock_never),
    "unlock_forgets_ancestors": dict(unlock=unlock_node_only),
    "match_does_not_stamp": dict(match=make_match(stamp=False)),
    "insert_without_share": dict(insert=make_insert(share=False)),
    "insert_ignores_cached_prefix": dict(insert=insert_from_root),
}


def test_right_implementation_passes(right):
    for seed in (0, 1, 2026):
        check_radix_cache(*right, seed=seed)


def test_pressure_scenario_evicts(right):
    """The pool-under-pressure scenario is only a test of eviction if evict really runs in it."""
    calls = []

    class Counting(right[0]):
        def evict(self, blocks_wanted):
            calls.append(blocks_wanted)
            super().evict(blocks_wanted)

    check_radix_cache(Counting, right[1])
    assert len(calls) > 10


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_check_names_the_bug(bug, right, failing_message, message_snapshot):
    wrong = type(bug, (right[0],), WRONG[bug])
    message = failing_message(check_radix_cache, wrong, right[1])
    assert message == message_snapshot
    if bug.startswith("split_loses"):  # a split that loses its tail, not blamed on evict
        assert "evict" not in message, message


def test_check_is_quiet(right, capsys):
    check_radix_cache(*right)
    check_cache_aware_order(solution(NOTEBOOK, "cache_aware_order"))
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.splitlines() == ["check_radix_cache: 5 scenarios", "check_cache_aware_order: 5 queues"]


def order_ascending(waiting, cached_tokens, waited, max_wait):
    return sorted(waiting, key=lambda r: cached_tokens[r])


def order_without_guard(waiting, cached_tokens, waited, max_wait):
    return sorted(waiting, key=lambda r: -cached_tokens[r])


def order_ties_by_id(waiting, cached_tokens, waited, max_wait):
    starving = [r for r in waiting if waited[r] >= max_wait]
    return starving + sorted((r for r in waiting if r not in starving), key=lambda r: (-cached_tokens[r], r))


def order_starving_by_cache(waiting, cached_tokens, waited, max_wait):
    starving = sorted((r for r in waiting if waited[r] >= max_wait), key=lambda r: -cached_tokens[r])
    return starving + sorted((r for r in waiting if r not in starving), key=lambda r: -cached_tokens[r])


def order_guard_off_by_one(waiting, cached_tokens, waited, max_wait):
    starving = [r for r in waiting if waited[r] > max_wait]
    return starving + sorted((r for r in waiting if r not in starving), key=lambda r: -cached_tokens[r])


def order_in_place(waiting, cached_tokens, waited, max_wait):
    starving = [r for r in waiting if waited[r] >= max_wait]
    waiting.sort(key=lambda r: (r not in starving, 0 if r in starving else -cached_tokens[r]))
    return waiting


def order_drops_starving(waiting, cached_tokens, waited, max_wait):
    return sorted((r for r in waiting if waited[r] < max_wait), key=lambda r: -cached_tokens[r])


WRONG_ORDERS = [
    order_ascending,
    order_without_guard,
    order_ties_by_id,
    order_starving_by_cache,
    order_guard_off_by_one,
    order_in_place,
    order_drops_starving,
]


@pytest.mark.parametrize("wrong", WRONG_ORDERS, ids=lambda f: f.__name__)
def test_order_check_names_the_bug(wrong, failing_message, message_snapshot):
    assert failing_message(check_cache_aware_order, wrong) == message_snapshot


# Each wrong order -> the hidden queues that catch it in every draw (a queue of one request catches only
# an order that drops it; a queue with no starving request, only the slips that show without one).
LONG, STARVING, ONE, MIXED = (
    "a long queue with many ties in cached tokens",
    "a queue where several requests starve",
    "a queue of one request",
    "a mixed queue",
)
CAUGHT_BY = {
    order_ascending: (LONG, STARVING, MIXED),
    order_without_guard: (STARVING, MIXED),
    order_ties_by_id: (LONG, MIXED),
    order_starving_by_cache: (STARVING, MIXED),
    order_guard_off_by_one: (STARVING, MIXED),
    order_in_place: (LONG, STARVING, MIXED),
    order_drops_starving: (STARVING, ONE, MIXED),
}


def test_right_order_passes_the_secret_seeds():
    assert {LONG, STARVING, ONE, MIXED} == set(tree.ORDER_STORY.hidden) and set(CAUGHT_BY) == set(WRONG_ORDERS)
    hidden_proof.passes_every_seed(check_cache_aware_order, solution(NOTEBOOK, "cache_aware_order"))


@pytest.mark.parametrize("wrong", WRONG_ORDERS, ids=lambda f: f.__name__)
def test_hidden_queues_fail_every_wrong_order_at_every_seed(wrong, failing_message):
    """Issue 36: every draw holds each kind of queue at its full size, with its starving requests (one of
    them waited exactly max_wait rounds where it matters): each wrong order fails the hidden call at every
    one of the SECRET_SEEDS, and each kind of ``CAUGHT_BY`` run alone fails it too, naming that kind."""
    hidden_proof.fails_at_every_seed(check_cache_aware_order, wrong, failing_message)
    hidden_proof.each_kind_catches(tree.ORDER_STORY.hidden, CAUGHT_BY[wrong], wrong, failing_message)


def test_release_says_not_implemented_yet(tmp_path, right):
    released = release_definition(tmp_path, NOTEBOOK, "RadixCache", finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_radix_cache(released, right[1])
    order = release_definition(tmp_path, NOTEBOOK, "cache_aware_order", finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_cache_aware_order(order)


def test_the_tree_is_read_strictly(right, failing_message, monkeypatch):
    """A lock that is never released, hidden behind a lock_count that says it equals anything: the
    check reads the tree's counts, tokens and blocks as plain values and refuses it, naming it."""

    namespace = right[0].__init__.__globals__  # the notebook's module: where insert and split make nodes

    class HidingNode(namespace["RadixNode"]):
        lock_count = property(
            lambda node: EqualsAnything(node.__dict__["count"]),
            lambda node, value: node.__dict__.__setitem__("count", value),
        )

    monkeypatch.setitem(namespace, "RadixNode", HidingNode)
    never_unlocks = type("NeverUnlocks", (right[0],), {"unlock": unlock_never})
    message = failing_message(check_radix_cache, never_unlocks, right[1])
    assert "node.lock_count" in message and "EqualsAnything" in message, message


def test_hidden_queues_fail_an_order_that_only_knows_the_visible_answers():
    """Issue 24: the visible queues are public (``ORDER_CASES``); an order replaying their answers
    passes them, and the hidden queues drawn from the grader's secret seed fail it."""
    import random

    from paged_helpers.checks import CheckFailed, check_cache_aware_order
    from paged_helpers.checks.radix.tree import ORDER_CASES

    answers = {
        (tuple(w), tuple(sorted(c.items())), tuple(sorted(t.items())), m): e for _, w, c, t, m, e, _ in ORDER_CASES
    }

    def replayed(waiting, cached, waited, max_wait=4):
        key = (tuple(waiting), tuple(sorted(cached.items())), tuple(sorted(waited.items())), max_wait)
        return list(answers.get(key, waiting))

    check_cache_aware_order(replayed)
    for seed in (random.getrandbits(31) for _ in range(5)):
        with pytest.raises(CheckFailed, match="a hidden scenario failed"):
            check_cache_aware_order(replayed, seed=seed, hidden=True)


def test_an_allocator_handing_out_a_block_outside_the_pool_is_named(right, failing_message):
    """A block id the learner's allocator returns is checked before the check records what it writes there."""
    radix, allocator = right

    class HandsOutTooFar(allocator):
        def allocate(self):
            super().allocate()
            return len(self.refs)

    message = failing_message(check_radix_cache, radix, HandsOutTooFar)
    assert "allocator.allocate() returning a block id in 0.." in message, message
