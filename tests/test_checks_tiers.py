"""check_tiered_cache: the instructor's tiered cache passes (both write policies, random 31-bit seeds,
another correct design); wrong tiers (one mistake each, as subclasses of the instructor's class)
fail with a message naming the rule they broke; the student release says "not implemented yet"."""

from __future__ import annotations

import random

import pytest

from paged_helpers.checks import NotImplementedYet, check_tiered_cache
from paged_helpers.checks.tiers import host_tier as tiers

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
    return solution(NOTEBOOK, "TieredRadixCache"), solution("04_fork_and_copy_on_write", "PagedKVCache")


def _copy(self, source, source_index, target, target_index):
    for layer in range(len(self.cache.k_pool)):
        target[0][layer][target_index].copy_(source[0][layer][source_index])
        target[1][layer][target_index].copy_(source[1][layer][source_index])


def _host(self):
    return self.host_k_pool, self.host_v_pool


def _gpu(self):
    return self.cache.k_pool, self.cache.v_pool


def load_back_reusing_the_victims_block(self, slots):
    """Short of free blocks, it "recycles" the least recently used leaf's last block in place,
    without taking the leaf out of the tree."""
    blocks = []
    for _ in slots:
        if self.allocator.num_free:
            blocks.append(self.allocator.allocate())
            continue
        leaf = self.eviction_candidate()
        if leaf is None:
            self.evict(1)
            blocks.append(self.allocator.allocate())
        else:
            blocks.append(leaf.blocks[-1])
    for slot, block in zip(slots, blocks, strict=True):
        _copy(self, _host(self), slot, _gpu(self), block)
    for slot in slots:
        self.host.release(slot)
    return blocks


def host_slot_ignoring_pins(self):
    """When the host is full, it takes the least recently used entry's slot, pinned or not."""
    if self.host.num_free == 0:
        return self.host_entries.pop(next(iter(self.host_entries)))  # the slot keeps its count for the new entry
    return self.host.allocate()


def make_evict(offload_blocks):
    def evict(self, blocks_wanted):
        while self.allocator.num_free < blocks_wanted:
            leaf = self.eviction_candidate()
            if leaf is None:
                return
            keys = self.block_keys(self.path_tokens(leaf))[-len(leaf.blocks) :]
            for key, block in offload_blocks(self, list(zip(keys, leaf.blocks, strict=True))):
                self.offload(key, block)
            del leaf.parent.children[leaf.tokens[: self.block_size]]
            for block in leaf.blocks:
                self.allocator.release(block)

    return evict


def insert_never_writing_through(self, tokens, blocks):
    """Write-through that forgets the write: notebook 10's insert only (this class, the tiered cache,
    then notebook 10's RadixCache)."""
    return type(self).__mro__[2].insert(self, tokens, blocks)


def match_host_without_pins(self, tokens, gpu_blocks):
    slots = []
    for key in self.block_keys(tokens)[gpu_blocks:]:
        if key not in self.host_entries:
            break
        slots.append(self.host_entries[key])
    return slots


def offload_keys_only(self, key, block):
    """Copies the keys of a dirty block to the host, not its values."""
    if key in self.host_entries:
        self.host_entries.move_to_end(key)
        return self.host_entries[key]
    slot = self._host_slot()
    if slot is None:
        return None
    for layer in range(len(self.cache.k_pool)):
        self.host_k_pool[layer][slot].copy_(self.cache.k_pool[layer][block])
    self.host_entries[key] = slot
    return slot


def load_back_keeping_pins(self, slots):
    self.evict(len(slots))
    blocks = [self.allocator.allocate() for _ in slots]
    for slot, block in zip(slots, blocks, strict=True):
        _copy(self, _host(self), slot, _gpu(self), block)
    return blocks


def block_keys_of_token_tuples(self, tokens):
    """The keys notebook 11 used before its blocks were keyed by notebook 05's chain: whole-prefix tuples."""
    tokens = self._full_blocks(tokens)
    return [tokens[:end] for end in range(self.block_size, len(tokens) + 1, self.block_size)]


WRONG = {
    "load_back_into_a_held_block": dict(load_back=load_back_reusing_the_victims_block),
    "host_eviction_drops_a_pinned_slot": dict(_host_slot=host_slot_ignoring_pins),
    "write_back_loses_dirty_blocks": dict(
        evict=make_evict(lambda self, pairs: pairs if self.write_policy == "write-through" else [])
    ),
    "evict_offloads_the_first_block_only": dict(evict=make_evict(lambda self, pairs: pairs[:1])),
    "write_through_never_writes": dict(insert=insert_never_writing_through),
    "match_host_without_pins": dict(match_host=match_host_without_pins),
    "load_back_keeps_its_pins": dict(load_back=load_back_keeping_pins),
    "block_keys_not_the_chain": dict(block_keys=block_keys_of_token_tuples),
    "offload_copies_keys_only": dict(offload=offload_keys_only),
}


def test_right_implementation_passes(right, capsys):
    for seed in (0, 1, 2026):
        check_tiered_cache(*right, seed=seed)
    captured = capsys.readouterr()
    assert captured.err == ""
    # seeds other than the default print the hidden call's label between the name and the count
    passes = [line for line in captured.out.splitlines() if line.startswith("check_tiered_cache")]
    assert len(passes) == 3 and all(": 4 scenarios, " in line for line in passes)


def test_random_31_bit_seeds_pass(right):
    """The grader draws a secret 31-bit seed: any of them must pass correct work."""
    draw = random.Random()
    for _ in range(3):
        check_tiered_cache(*right, seed=draw.getrandbits(31))


def test_another_correct_design_passes(right):
    """Host slots taken over directly (no release and allocate), and load_back that frees a block per
    slot as it goes: other correct designs the check must not confuse with the rules' breakers."""

    def host_slot_reusing(self):
        if self.host.num_free:
            return self.host.allocate()
        victim = next((key for key, slot in self.host_entries.items() if self.host.refs[slot] == 1), None)
        return None if victim is None else self.host_entries.pop(victim)

    Other = type("Other", (right[0],), {"_host_slot": host_slot_reusing})
    for seed in (3, 77):
        check_tiered_cache(Other, right[1], seed=seed)


def test_scenarios_use_the_host_and_pin_under_pressure(right):
    """The check tests the tier only if blocks really go to the host and come back, and if a
    load-back really finds every host slot pinned."""
    seen = {"loaded": 0, "all_pinned": 0}

    class Counting(right[0]):
        def load_back(self, slots):
            seen["loaded"] += len(slots)
            return super().load_back(slots)

        def _host_slot(self):
            if self.host.num_free == 0 and all(self.host.refs[slot] > 1 for slot in self.host_entries.values()):
                seen["all_pinned"] += 1
            return super()._host_slot()

    for seed in (0, 12345):
        check_tiered_cache(Counting, right[1], seed=seed)
    assert seen["loaded"] >= 20 and seen["all_pinned"] >= 2, seen


def test_the_churning_host_fills(right):
    """In the two-at-a-time scenario the host is full at some point (its LRU drops entries)."""
    for seed in (0, 9, 2026):
        scenario = [s for s in tiers.scenarios(seed) if "churns" in s.name][0]
        server = tiers._run((right[0], right[1]), scenario, seed)
        assert server.host_slots < server.num_blocks
        assert len(server.tiered.host_entries) == server.host_slots, scenario.name


@pytest.mark.parametrize("bug", list(WRONG))
def test_check_names_the_bug(bug, right, failing_message, message_snapshot):
    message = failing_message(check_tiered_cache, type(bug, (right[0],), WRONG[bug]), right[1])
    assert message == message_snapshot


def test_release_says_not_implemented_yet(tmp_path, right):
    released = release_definition(tmp_path, NOTEBOOK, "TieredRadixCache", finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_tiered_cache(released, right[1])


def test_a_pin_outside_the_host_pool_is_named(right, failing_message):
    """A slot match_host returns is checked before it counts as a pin of the host pool."""
    tiered, cache = right

    def match_host_too_far(self, tokens, gpu_blocks):
        return [slot + len(self.host.refs) for slot in type(self).__mro__[1].match_host(self, tokens, gpu_blocks)]

    pins_too_far = type("PinsTooFar", (tiered,), {"match_host": match_host_too_far})
    message = failing_message(check_tiered_cache, pins_too_far, cache)
    assert "match_host pinning slots 0.." in message, message
