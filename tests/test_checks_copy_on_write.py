"""check_copy_on_write and check_fork_logits: the instructor's cache passes, realistic wrong ones fail
with a message that names the bug, and the student release fails with "not implemented yet".

Each wrong implementation is a small subclass of the instructor's class (notebook 04) that
changes one thing, the way a learner's mistake would.
"""

from __future__ import annotations

import pytest

from paged_helpers.checks import NotImplementedYet, check_copy_on_write, check_fork_logits

from conftest import solution
from student_release import release_definition

NOTEBOOK = "04_fork_and_copy_on_write"


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "PagedKVCache")


def notebook_03_class(cls):
    """The class notebook 04 extends (the learner's notebook 03 cache)."""
    return cls.__bases__[0]


def copying_reserve(pools_of, release=True, only_shared=True, check_room=True, whole_table=False):
    """A reserve with copy-on-write, with one step changed by the arguments (to build wrong versions)."""

    def reserve(self, seq, new_tokens):
        base = notebook_03_class(type(self).__mro__[1])
        table, start = self.tables[seq], self.lengths[seq]
        end = start + new_tokens
        first = 0 if whole_table else start // self.block_size
        indices = range(first, min(len(table), self.blocks_needed(end))) if new_tokens else range(0)
        copies = [i for i in indices if self.allocator.refs[table[i]] > 1 or not only_shared]
        if check_room and len(copies) + self.blocks_to_add(seq, new_tokens) > self.allocator.num_free:
            raise MemoryError("pool exhausted")
        for index in copies:
            fresh = self.allocator.allocate()
            for pool in pools_of(self):
                pool[fresh].copy_(pool[table[index]])
            if release:
                self.allocator.release(table[index])
            table[index] = fresh
        base.reserve(self, seq, new_tokens)

    return reserve


def copy_after_append(self, seq, new_tokens):
    """Appends the missing blocks first, then copies the table's last block if it is shared: when a write
    runs from the shared partial block into a new one, the last block is the fresh one and nothing is copied."""
    base = notebook_03_class(type(self).__mro__[1])
    base.reserve(self, seq, new_tokens)
    table = self.tables[seq]
    if table and self.allocator.refs[table[-1]] > 1:
        fresh = self.allocator.allocate()
        for pool in both_pools(self):
            pool[fresh].copy_(pool[table[-1]])
        self.allocator.release(table[-1])
        table[-1] = fresh


def blocks_to_copy_at_length_only(self, seq, new_tokens):
    """Looks only at the block holding position `length`: enough while the table ends there, wrong once room
    reserved before a fork puts a second shared block in the write's way."""
    table, index = self.tables[seq], self.lengths[seq] // self.block_size
    if new_tokens and index < len(table) and self.allocator.refs[table[index]] > 1:
        return [index]
    return []


def both_pools(cache):
    return cache.k_pool + cache.v_pool


def wrong(right, name, **methods):
    return type(name, (right,), methods)


@pytest.fixture(scope="module")
def wrong_caches(right):
    base03 = notebook_03_class(right)

    def aliased_fork(self, parent, child):
        self.create(child)
        self.tables[child] = self.tables[parent]
        self.lengths[child] = self.lengths[parent]
        for block in self.tables[child]:
            self.allocator.share(block)

    def unshared_fork(self, parent, child):
        self.create(child)
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]

    return {
        "no_copy_on_write": wrong(right, "NoCopyOnWrite", reserve=lambda self, seq, n: base03.reserve(self, seq, n)),
        "keys_only": wrong(right, "KeysOnly", reserve=copying_reserve(lambda c: c.k_pool)),
        "first_layer_only": wrong(
            right, "FirstLayerOnly", reserve=copying_reserve(lambda c: [c.k_pool[0], c.v_pool[0]])
        ),
        "old_block_kept": wrong(right, "OldBlockKept", reserve=copying_reserve(both_pools, release=False)),
        "aliased_table": wrong(right, "AliasedTable", fork=aliased_fork),
        "fork_without_share": wrong(right, "ForkWithoutShare", fork=unshared_fork),
        "copy_then_check": wrong(right, "CopyThenCheck", reserve=copying_reserve(both_pools, check_room=False)),
        "copies_unshared": wrong(right, "CopiesUnshared", reserve=copying_reserve(both_pools, only_shared=False)),
        "copy_after_append": wrong(right, "CopyAfterAppend", reserve=copy_after_append),
        "copies_block_at_length_only": wrong(
            right, "CopiesBlockAtLengthOnly", blocks_to_copy=blocks_to_copy_at_length_only
        ),
        "copies_whole_table": wrong(right, "CopiesWholeTable", reserve=copying_reserve(both_pools, whole_table=True)),
    }


def test_right_implementation_passes(right):
    for seed in (0, 1, 2026):
        check_copy_on_write(right, seed=seed)


def test_right_implementation_gives_exact_fork_logits(right, capsys):
    check_fork_logits(right)
    out = capsys.readouterr()
    assert out.out.startswith("check_fork_logits: running on "), out.out
    assert out.err == ""


COPY_ON_WRITE_BUGS = [
    "aliased_table",
    "copies_block_at_length_only",
    "copies_unshared",
    "copies_whole_table",
    "copy_after_append",
    "copy_then_check",
    "first_layer_only",
    "fork_without_share",
    "keys_only",
    "no_copy_on_write",
    "old_block_kept",
]


@pytest.mark.parametrize("bug", COPY_ON_WRITE_BUGS)
def test_check_copy_on_write_names_the_bug(bug, wrong_caches, failing_message, message_snapshot):
    first = failing_message(check_copy_on_write, wrong_caches[bug])
    message = failing_message(check_copy_on_write, wrong_caches[bug])  # tiered hints: change shown now
    assert ("more_hint()" in first) == ("the change (same failure again):" in message)
    assert message == message_snapshot


FORK_LOGITS_BUGS = [
    "aliased_table",
    "first_layer_only",
    "fork_without_share",
    "keys_only",
    "no_copy_on_write",
    "old_block_kept",
]


@pytest.mark.parametrize("bug", FORK_LOGITS_BUGS)
def test_check_fork_logits_names_the_bug(bug, wrong_caches, failing_message, message_snapshot):
    first = failing_message(check_fork_logits, wrong_caches[bug])
    message = failing_message(check_fork_logits, wrong_caches[bug])  # tiered hints: change shown now
    assert ("more_hint()" in first) == ("the change (same failure again):" in message)
    assert message == message_snapshot


@pytest.fixture
def released(tmp_path):
    """Notebook 04 as students receive it, beside finished notebooks 02 and 03."""
    return release_definition(tmp_path, NOTEBOOK, "PagedKVCache", finished=("02_block_allocator", "03_paged_kv_cache"))


@pytest.mark.parametrize("check", [check_copy_on_write, check_fork_logits])
def test_release_says_not_implemented_yet(check, released):
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check(released)


@pytest.fixture
def in_bfloat16(monkeypatch):
    """check_fork_logits with its model in bfloat16, as gpu-check runs it; returns a cache-class wrapper."""
    import torch

    from paged_helpers.checks import copy_on_write

    original = copy_on_write.tiny_qwen3
    monkeypatch.setattr(copy_on_write, "tiny_qwen3", lambda *a, **k: original(*a, **{**k, "dtype": torch.bfloat16}))

    def wrap(cache_class):
        class CacheInBfloat16(cache_class):
            def __init__(self, *args, **kwargs):
                kwargs.setdefault("dtype", torch.bfloat16)
                super().__init__(*args, **kwargs)

        return CacheInBfloat16

    return wrap


def test_fork_logits_in_bfloat16_passes_the_right_cache(right, in_bfloat16):
    check_fork_logits(in_bfloat16(right))


@pytest.mark.parametrize("bug", ["no_copy_on_write", "keys_only", "first_layer_only"])
def test_fork_logits_in_bfloat16_still_catches_wrong_logits(bug, wrong_caches, in_bfloat16, failing_message):
    """bfloat16's wider tolerance (rounding of the logits) is still far below what a data bug does."""
    assert "logits" in failing_message(check_fork_logits, in_bfloat16(wrong_caches[bug]))
