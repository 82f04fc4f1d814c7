"""The shared pool-invariant reader and the small helpers the checks share (report, scratch)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest

from paged_helpers.checks import CheckFailed, NotImplementedYet
from paged_helpers.checks.reading.calls import expect_raise
from paged_helpers.checks.reading.ledger import Ledger, ceil_div, expect_all_free, expect_pool_matches, read_pool
from paged_helpers.checks.reading.snapshot import CacheSnapshot, expect_refused
from paged_helpers.pool_invariant import PoolReading


def test_a_consistent_pool_has_no_problem():
    reading = read_pool(SimpleNamespace(refs=[1, 0, 2, 0], free=deque([3, 1]), num_free=2))
    assert reading.twice_on_free_list() == reading.free_but_referenced() == reading.lost() == []
    assert reading.num_free_agrees()
    assert [reading.block_problem(b) for b in range(4)] == [""] * 4


def test_each_broken_rule_is_named():
    reading = PoolReading(refs=(0, 1, 0, -1), free=(1, 1), num_free=3)
    assert reading.twice_on_free_list() == [1]
    assert reading.free_but_referenced() == [1]
    assert reading.lost() == [0, 2]
    assert not reading.num_free_agrees()
    assert reading.block_problem(0) == "refcount 0 but not on the free list (leaked)"
    assert reading.block_problem(1) == "on the free list 2 times"
    assert reading.block_problem(3) == "refcount -1 is negative"


def test_ceil_div_rounds_up():
    assert [ceil_div(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_a_snapshot_lists_what_changed():
    cache = SimpleNamespace(
        tables={"a": [0]}, lengths={"a": 3}, allocator=SimpleNamespace(refs=[1, 0], free=deque([1]))
    )
    before = CacheSnapshot.of(cache)
    cache.tables["a"].append(1)
    cache.tables["b"] = []
    cache.allocator.refs[1] = 1
    cache.allocator.free.clear()
    assert before.changes(CacheSnapshot.of(cache)) == [
        "tables: 'a': [0] -> [0, 1], 'b': absent -> []",
        "reference counts: block 1: 0 -> 1",
        "free list: [1] -> []",
    ]
    assert before.changes(before) == []


def test_expect_raise_returns_the_error_or_names_what_was_missing():
    def refuses():
        raise MemoryError("full")

    assert isinstance(expect_raise(MemoryError, "reserve", refuses, scenario="s", hint="h"), MemoryError)
    with pytest.raises(CheckFailed, match=r"(?s)expected: MemoryError from reserve.*got:      no exception"):
        expect_raise(MemoryError, "reserve", lambda: None, scenario="s", hint="h")
    with pytest.raises(CheckFailed, match="got:      KeyError"):
        expect_raise(MemoryError, "reserve", {}.__getitem__, "x", scenario="s", hint="h")

    def unfinished():
        raise NotImplementedError

    with pytest.raises(NotImplementedYet):
        expect_raise(MemoryError, "reserve", unfinished, scenario="s", hint="h")


def test_one_logit_tolerance_policy_and_nan_never_passes():
    import torch

    from paged_helpers.checks.reading.scratch import (
        CPU_TOLERANCE,
        GPU_TOLERANCE,
        logit_gap,
        logit_tolerance,
        logits_match,
    )

    assert logit_tolerance("cpu") == CPU_TOLERANCE < GPU_TOLERANCE == logit_tolerance(torch.device("cuda", 0))
    expected = torch.zeros(5)
    assert logit_gap(expected + 1e-6, expected) == pytest.approx(1e-6)
    assert logits_match(logit_gap(expected + 1e-6, expected), "cpu")
    assert not logits_match(logit_gap(expected + 1e-3, expected), "cpu")
    broken = expected.clone()
    broken[2] = float("nan")
    assert not logits_match(logit_gap(broken, expected), "cpu")


def test_the_pool_must_match_who_holds_each_block():
    ledger = Ledger(4)
    ledger.tables.update({"a": [0, 2], "b": [2]})
    holders = ledger.holders()
    assert holders == [["a"], [], ["a", "b"], []]
    ledger.hold("an entry", [2])
    assert ledger.holders()[2] == ["a", "b", "an entry"]
    assert ledger.holders({"c": [1]}) == [[], ["c"], ["an entry"], []]
    with pytest.raises(AssertionError, match="outside the pool"):
        ledger.hold("a stray entry", [4])
    right = SimpleNamespace(refs=[1, 0, 2, 0], free=deque([3, 1]), num_free=2)
    assert expect_pool_matches(right, holders, "s", lambda *_: "h").refs == (1, 0, 2, 0)
    over = SimpleNamespace(refs=[1, 0, 3, 0], free=deque([3, 1]), num_free=2)
    with pytest.raises(CheckFailed, match=r"(?s)s: the reference count of block 2.*refcount 2 .*refcount 3.*hint: 2 3"):
        expect_pool_matches(over, holders, "s", lambda block, who, count: f"{block} {count}")
    lost = SimpleNamespace(refs=[1, 0, 2, 0], free=deque([3]), num_free=1)
    with pytest.raises(CheckFailed, match=r"block\(s\) \[1\] have count 0 but are not on the free list"):
        expect_pool_matches(lost, holders, "s", lambda *_: "h")
    miscounted = SimpleNamespace(refs=[1, 0, 2, 0], free=deque([3, 1]), num_free=3)
    with pytest.raises(CheckFailed, match="s: allocator.num_free"):
        expect_pool_matches(miscounted, holders, "s", lambda *_: "h")


def test_a_refusal_must_change_nothing():
    allocator = SimpleNamespace(refs=[1, 0], free=deque([1]))
    cache = SimpleNamespace(tables={"a": [0]}, lengths={"a": 4}, allocator=allocator)

    def refuses():
        raise MemoryError("full")

    def takes_a_block_then_refuses():
        cache.tables["a"].append(cache.allocator.free.popleft())
        cache.allocator.refs[1] = 1
        raise MemoryError("full")

    expect_refused(MemoryError, "reserve", refuses, cache=cache, scenario="s", hint="h", changed_hint="c")
    seen = []

    def kept(before, after):
        seen.append((before, after))
        return f"kept {len(after.tables['a']) - len(before.tables['a'])}"

    with pytest.raises(CheckFailed, match=r"(?s)MemoryError, but the cache changed first: tables: .*hint: kept 1"):
        expect_refused(
            MemoryError,
            "reserve",
            takes_a_block_then_refuses,
            cache=cache,
            scenario="s",
            hint="h",
            changed_hint=kept,
        )
    assert len(seen) == 1


def test_all_blocks_free_names_the_ones_still_used():
    expect_all_free(SimpleNamespace(refs=[0, 0], num_free=2), 2, "s", "h")
    with pytest.raises(CheckFailed, match=r"(?s)all 2 blocks free.*1 free; block\(s\) \[1\] still counted as used"):
        expect_all_free(SimpleNamespace(refs=[0, 1], num_free=1), 2, "s", "h")


def test_logits_through_a_cache_against_a_from_scratch_run():
    import torch

    from paged_helpers.checks.reading.scratch import expect_from_scratch

    model = SimpleNamespace(device=torch.device("cpu"), logits_from_scratch=lambda seqs: [torch.zeros(len(seqs[0]), 5)])
    asked = []

    def hint():
        asked.append(1)
        return "the diagnosis"

    expect_from_scratch(model, [1, 2, 3], torch.zeros(2, 5), scenario="s", hint=hint)
    assert asked == []  # the diagnosis runs only on a mismatch
    mismatch = r"(?s)running its 3 tokens from scratch.*max \|difference\| 0.01.*the diagnosis"
    with pytest.raises(CheckFailed, match=mismatch):
        expect_from_scratch(model, [1, 2, 3], torch.full((1, 5), 0.01), scenario="s", hint=hint)
