"""check_paged_kv_cache: the instructor's cache passes; realistic wrong ones fail with a message that
names the bug; the student release fails with "not implemented yet".

Each wrong cache is a small subclass of the instructor's (notebook 03) that changes one method
the way a learner's slip would.
"""

from __future__ import annotations

import pytest
import torch

from paged_helpers.checks import NotImplementedYet, check_paged_kv_cache

from conftest import solution
from student_release import release_definition

NOTEBOOK = "03_paged_kv_cache"


@pytest.fixture(scope="module")
def right():
    return solution(NOTEBOOK, "PagedKVCache")


@pytest.mark.parametrize("seed", [0, 1, 2026])
def test_the_instructor_solution_passes_silently(right, seed, capsys):
    check_paged_kv_cache(right, seed=seed)
    assert capsys.readouterr().err == ""


def write_and_gather(cache, layer, k, v, positions, blocks, offsets, gather=None):
    """The second half of update with the write location given: used to build wrong updates."""
    cache.k_pool[layer][blocks, :, offsets] = k.transpose(1, 2)
    cache.v_pool[layer][blocks, :, offsets] = v.transpose(1, 2)
    if layer == len(cache.k_pool) - 1:
        for row, seq in enumerate(cache.batch):
            cache.lengths[seq] = max(cache.lengths[seq], int(positions[row].max()) + 1)
    span = int(positions.max()) + 1
    logical = torch.arange(span, device=k.device)
    gather_blocks = cache.table_tensor[:, logical // cache.block_size] if gather is None else gather(logical)
    keys = cache.k_pool[layer][gather_blocks, :, logical % cache.block_size]
    values = cache.v_pool[layer][gather_blocks, :, logical % cache.block_size]
    return keys.transpose(1, 2), values.transpose(1, 2), logical


def rows_of(k):
    return torch.arange(k.shape[0])[:, None]


# --------------------------------------------------------------------------- the wrong caches


def blocks_needed_rounds_down(base):
    class Cache(base):
        def blocks_needed(self, tokens):
            return tokens // self.block_size

    return Cache


def blocks_needed_one_too_many_on_a_boundary(base):
    class Cache(base):
        def blocks_needed(self, tokens):
            return tokens // self.block_size + 1

    return Cache


def reserve_appends_on_top(base):
    class Cache(base):
        def reserve(self, seq, new_tokens):
            for _ in range(self.blocks_needed(new_tokens)):
                self.tables[seq].append(self.allocator.allocate())

    return Cache


def reserve_keeps_half_reserved_blocks(base):
    class Cache(base):
        def reserve(self, seq, new_tokens):
            table = self.tables[seq]
            while len(table) < self.blocks_needed(self.lengths[seq] + new_tokens):
                table.append(self.allocator.allocate())

    return Cache


def reserve_silently_gives_up(base):
    class Cache(base):
        def reserve(self, seq, new_tokens):
            if self.blocks_to_add(seq, new_tokens) > self.allocator.num_free:
                return
            super().reserve(seq, new_tokens)

    return Cache


def reserve_refuses_an_exact_fit(base):
    class Cache(base):
        def reserve(self, seq, new_tokens):
            missing = self.blocks_to_add(seq, new_tokens)
            if missing and missing >= self.allocator.num_free:
                raise MemoryError("pool exhausted")
            super().reserve(seq, new_tokens)

    return Cache


def update_indexes_the_table_by_position(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            blocks = self.table_tensor[rows_of(k), positions]
            return write_and_gather(self, layer, k, v, positions, blocks, positions % self.block_size)

    return Cache


def update_ignores_the_block_table(base):
    """Contiguous addressing: block p // block_size, as if each sequence owned blocks 0, 1, 2, ..."""

    class Cache(base):
        def update(self, layer, k, v, positions):
            blocks = positions // self.block_size
            return write_and_gather(
                self,
                layer,
                k,
                v,
                positions,
                blocks,
                positions % self.block_size,
                gather=lambda logical: (logical // self.block_size).expand(k.shape[0], -1),
            )

    return Cache


def update_offset_with_the_wrong_divisor(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            blocks = self.table_tensor[rows_of(k), positions // self.block_size]
            offsets = positions % self.k_pool[layer].shape[1]  # kv_heads, not block_size
            return write_and_gather(self, layer, k, v, positions, blocks, offsets)

    return Cache


def update_uses_the_first_row_for_every_sequence(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            blocks = self.table_tensor[rows_of(k), positions // self.block_size]
            return write_and_gather(
                self,
                layer,
                k,
                v,
                positions,
                blocks,
                positions % self.block_size,
                gather=lambda logical: self.table_tensor[:1, logical // self.block_size].expand(k.shape[0], -1),
            )

    return Cache


def update_returns_only_the_new_tokens(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            super().update(layer, k, v, positions)
            return k, v, positions[0]

    return Cache


def update_forgets_to_transpose_the_history(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            keys, values, key_positions = super().update(layer, k, v, positions)
            return keys.transpose(1, 2), values.transpose(1, 2), key_positions

    return Cache


def lengths_never_committed(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            saved = dict(self.lengths)
            reply = super().update(layer, k, v, positions)
            self.lengths.update(saved)
            return reply

    return Cache


def lengths_from_the_batch_maximum(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            reply = super().update(layer, k, v, positions)
            if layer == len(self.k_pool) - 1:
                for seq in self.batch:
                    self.lengths[seq] = int(positions.max()) + 1
            return reply

    return Cache


def lengths_counted_at_every_layer(base):
    class Cache(base):
        def update(self, layer, k, v, positions):
            saved = dict(self.lengths)
            reply = super().update(layer, k, v, positions)
            self.lengths.update(saved)
            for seq in self.batch:
                self.lengths[seq] += positions.shape[-1]
            return reply

    return Cache


def set_batch_pads_with_minus_one(base):
    class Cache(base):
        def set_batch(self, seqs):
            self.batch = list(seqs)
            width = max(len(self.tables[s]) for s in self.batch)
            rows = [self.tables[s] + [-1] * (width - len(self.tables[s])) for s in self.batch]
            self.table_tensor = torch.tensor(rows, dtype=torch.long)

    return Cache


def set_batch_width_of_the_first_table(base):
    class Cache(base):
        def set_batch(self, seqs):
            self.batch = list(seqs)
            width = len(self.tables[self.batch[0]])
            rows = [(self.tables[s] + [0] * width)[:width] for s in self.batch]
            self.table_tensor = torch.tensor(rows, dtype=torch.long)

    return Cache


def set_batch_rows_in_sorted_order(base):
    class Cache(base):
        def set_batch(self, seqs):
            super().set_batch(sorted(seqs))
            self.batch = list(seqs)

    return Cache


def truncate_keeps_a_block_past_the_boundary(base):
    class Cache(base):
        def truncate(self, seq, length):
            keep = length // self.block_size + 1
            for block in self.tables[seq][keep:]:
                self.allocator.release(block)
            del self.tables[seq][keep:]
            self.lengths[seq] = length

    return Cache


def truncate_forgets_to_release(base):
    class Cache(base):
        def truncate(self, seq, length):
            del self.tables[seq][self.blocks_needed(length) :]
            self.lengths[seq] = length

    return Cache


def truncate_releases_one_block_too_few(base):
    """An off-by-one in the release loop: the first block past the cut leaves the table but is never released."""

    class Cache(base):
        def truncate(self, seq, length):
            keep = self.blocks_needed(length)
            for block in self.tables[seq][keep + 1 :]:
                self.allocator.release(block)
            del self.tables[seq][keep:]
            self.lengths[seq] = length

    return Cache


def reserve_reallocates_the_table(base):
    """Gives the table back and allocates a whole new one of the right size: the written blocks move away."""

    class Cache(base):
        def reserve(self, seq, new_tokens):
            needed = self.blocks_needed(self.lengths[seq] + new_tokens)
            if needed - len(self.tables[seq]) > self.allocator.num_free:
                raise MemoryError("pool exhausted")
            for block in self.tables[seq]:
                self.allocator.release(block)
            self.tables[seq] = [self.allocator.allocate() for _ in range(needed)]

    return Cache


def free_forgets_to_release(base):
    class Cache(base):
        def free(self, seq):
            del self.tables[seq], self.lengths[seq]

    return Cache


def free_keeps_the_table(base):
    class Cache(base):
        def free(self, seq):
            for block in self.tables[seq]:
                self.allocator.release(block)
            self.tables[seq] = []

    return Cache


def reserve_counts_the_blocks_it_holds(base):
    """Compares the whole table's blocks, not the missing ones, with the free pool."""

    class Cache(base):
        def reserve(self, seq, new_tokens):
            if self.blocks_needed(self.lengths[seq] + new_tokens) > self.allocator.num_free:
                raise MemoryError("pool exhausted")
            super().reserve(seq, new_tokens)

    return Cache


def reserve_ignores_the_partial_block(base):
    """Counts blocks for the new tokens alone, as if the partial last block had no room left."""

    class Cache(base):
        def reserve(self, seq, new_tokens):
            if self.blocks_needed(new_tokens) > self.allocator.num_free:
                raise MemoryError("pool exhausted")
            super().reserve(seq, new_tokens)

    return Cache


def create_overwrites_an_existing_sequence(base):
    class Cache(base):
        def create(self, seq):
            self.tables[seq], self.lengths[seq] = [], 0

    return Cache


WRONG = [
    blocks_needed_rounds_down,
    blocks_needed_one_too_many_on_a_boundary,
    reserve_appends_on_top,
    reserve_keeps_half_reserved_blocks,
    reserve_silently_gives_up,
    reserve_refuses_an_exact_fit,
    reserve_counts_the_blocks_it_holds,
    reserve_ignores_the_partial_block,
    update_indexes_the_table_by_position,
    update_ignores_the_block_table,
    update_offset_with_the_wrong_divisor,
    update_uses_the_first_row_for_every_sequence,
    update_returns_only_the_new_tokens,
    update_forgets_to_transpose_the_history,
    lengths_never_committed,
    lengths_from_the_batch_maximum,
    lengths_counted_at_every_layer,
    set_batch_pads_with_minus_one,
    set_batch_width_of_the_first_table,
    set_batch_rows_in_sorted_order,
    truncate_keeps_a_block_past_the_boundary,
    truncate_forgets_to_release,
    truncate_releases_one_block_too_few,
    reserve_reallocates_the_table,
    free_forgets_to_release,
    free_keeps_the_table,
    create_overwrites_an_existing_sequence,
]


@pytest.mark.parametrize("make_wrong", WRONG, ids=lambda f: f.__name__)
def test_a_wrong_cache_fails_with_a_message_naming_the_bug(right, make_wrong, failing_message, message_snapshot):
    """The snapshot is the second failure, whose two-tier hints show the concrete change."""
    first = failing_message(check_paged_kv_cache, make_wrong(right))
    message = failing_message(check_paged_kv_cache, make_wrong(right))
    assert message == message_snapshot
    assert ("more_hint()" in first) == ("the change (same failure again):" in message)


REFUSED_FIT_CAUSES = {
    reserve_counts_the_blocks_it_holds: "already holds do not come from the pool",
    reserve_ignores_the_partial_block: "room left in the table's partial last block",
    reserve_refuses_an_exact_fit: "needs exactly the free blocks fits",
}


@pytest.mark.parametrize("make_wrong", list(REFUSED_FIT_CAUSES), ids=lambda f: f.__name__)
def test_a_refused_fit_names_its_own_cause_only(right, make_wrong, failing_message):
    """Three miscounts make reserve refuse a fit; probing tells them apart (issue 11: 03's room check)."""
    message = failing_message(check_paged_kv_cache, make_wrong(right))
    for wrong, cause in REFUSED_FIT_CAUSES.items():
        assert (cause in message) == (wrong is make_wrong), f"{cause!r} for {make_wrong.__name__}:\n{message}"
    assert "not >=" not in message  # the first failure names the idea, not the line


def test_the_student_release_says_not_implemented_yet(tmp_path):
    cache_class = release_definition(tmp_path, NOTEBOOK, "PagedKVCache", finished=("02_block_allocator",))
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_paged_kv_cache(cache_class)


def test_reserve_is_all_or_nothing_in_the_solution(right):
    cache = right(1, 4, 2, 1, 2)
    cache.create("a")
    cache.reserve("a", 3)
    with pytest.raises(MemoryError, match="needs 3 more block"):
        cache.reserve("a", 10)
    assert cache.tables["a"] == [0, 1] and cache.allocator.num_free == 2


def test_the_model_stage_alone_catches_a_batch_that_reads_the_wrong_history(right):
    """The tiny Qwen3 run is a check of its own: a gather bug shows up as wrong logits there."""
    import random

    from paged_helpers.checks import CheckFailed
    from paged_helpers.checks.paged_cache.scenarios import play_model_story

    with pytest.raises(CheckFailed, match=r"(?s)decode step 1.*the logits of .*from scratch"):
        play_model_story(update_uses_the_first_row_for_every_sequence(right), random.Random(0), 4)


# --------------------------------------------------------------------------- issue 12: hidden scenario kinds


def test_hidden_scenarios_catch_a_truncate_that_keeps_a_block():
    right = solution("03_paged_kv_cache", "PagedKVCache")

    class KeepsOneBlock(right):
        def truncate(self, seq, length):
            super().truncate(seq, max(length, 1))
            self.lengths[seq] = length

    check_paged_kv_cache(KeepsOneBlock, seed=0)  # the visible scenarios never truncate to 0
    messages = []
    for seed in range(99000, 99006):
        check_paged_kv_cache(right, seed=seed, hidden=True)
        try:
            check_paged_kv_cache(KeepsOneBlock, seed=seed, hidden=True)
        except AssertionError as error:
            messages.append((seed, str(error)))
    assert messages, "no hidden scenario truncated a sequence to 0"
    seed, message = messages[0]
    assert message.startswith("a hidden scenario failed:") and str(seed) not in message, message
    assert "expected:" not in message


def test_tensor_comparisons_ignore_a_lying_mode_or_subclass():
    """A torch function mode the learner's code left active, or a tensor subclass, cannot answer for torch."""
    from torch.overrides import TorchFunctionMode

    from paged_helpers.checks.reading.scratch import logit_gap
    from paged_helpers.checks.reading.strict import odd_value, strict_allclose, strict_equal

    class SaysClose(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("allclose", "equal", "max", "isnan", "any"):
                return torch.tensor(True) if func.__name__ in ("isnan", "any") else True
            return func(*args, **(kwargs or {}))

    a, b = torch.zeros(3), torch.ones(3)
    mode = SaysClose()
    mode.__enter__()
    try:
        assert torch.allclose(a, b)  # what a check used to see
        assert not strict_allclose(a, b, atol=1e-6, rtol=0)
        assert not strict_equal(a, b)
        assert logit_gap(a, b) == 1.0
    finally:
        mode.__exit__(None, None, None)

    class Lying(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") in ("allclose", "equal"):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    lying = b.as_subclass(Lying)
    assert not strict_allclose(lying, a, atol=1e-6, rtol=0) and "subclass" in odd_value(lying)
