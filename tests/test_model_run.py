"""The one driver of the model on a learner's cache (paged_helpers/checks/reading/model_run.py).

Every check that runs the tiny Qwen3 on the learner's ``PagedKVCache`` (notebooks 03, 04, 09, 10
and 11) stands on ``ModelRun``: these tests hold its rules once, on the course's own cache and on
wrong ones made from it, so that each check inherits them.
"""

from __future__ import annotations

import pytest
import torch

from paged_helpers.checkpoint import tiny_qwen3
from paged_helpers.checks.reading.model_run import ModelRun
from paged_helpers.checks.speaking.failure import CheckFailed

from conftest import solution
from lying_values import EqualsAnything

BLOCK, NUM_BLOCKS = 4, 8


def _run(cache_class=None) -> ModelRun:
    model = tiny_qwen3(seed=0)
    config = model.config
    PagedKVCache = cache_class or solution("04_fork_and_copy_on_write", "PagedKVCache")  # noqa: N806
    cache = PagedKVCache(config.num_hidden_layers, NUM_BLOCKS, BLOCK, config.num_key_value_heads, config.head_dim)
    return ModelRun(model, cache, NUM_BLOCKS)


def _right():
    return solution("04_fork_and_copy_on_write", "PagedKVCache")


def test_a_right_cache_gives_from_scratch_logits_through_a_fork_and_frees_everything():
    run = _run()
    run.create("a", "prefill")
    run.step({"a": [3, 1, 4, 1, 5, 9]}, "prefill", hint="no hint")
    run.fork("a", "b", "fork")
    logits = run.step({"a": [2], "b": [7]}, "decode", hint="no hint")
    assert logits.shape[:2] == (2, 1)
    assert run.tokens == {"a": [3, 1, 4, 1, 5, 9, 2], "b": [3, 1, 4, 1, 5, 9, 7]}
    run.free_all("leaked")
    assert run.tokens == {} and run.last == {}


def test_a_wrong_key_in_a_prefill_fails_naming_the_step_and_the_sequence():
    class FirstKeyLost(_right()):
        """Hands back the prompt's first key zeroed in layer 0 during a prefill."""

        def update(self, layer, k, v, positions):
            keys, values, key_positions = super().update(layer, k, v, positions)
            if layer == 0 and k.shape[2] > 1:
                keys = keys.clone()
                keys[:, :, 0] = 0
            return keys, values, key_positions

    run = _run(FirstKeyLost)
    run.create("a", "prefill")
    with pytest.raises(CheckFailed, match=r"prefill: the logits of 'a'"):
        run.step({"a": [3, 1, 4, 1, 5]}, "prefill", hint="the first key is lost")


def test_an_exception_from_reserve_is_a_message_naming_the_call_even_where_the_engine_evicts():
    class ReserveBreaks(_right()):
        def reserve(self, seq, new_tokens):
            raise KeyError(seq)

    run = _run(ReserveBreaks)
    run.create("a", "serving a")
    with pytest.raises(CheckFailed, match=r"serving a: reserve\('a', 3\) raised KeyError"):
        run.reserve("a", 3, "serving a", when_full=lambda: pytest.fail("a KeyError is no full pool"))


def test_a_full_pool_asks_the_engine_to_make_room_then_reserves_again():
    run = _run()
    run.create("hog", "filling the pool")
    run.reserve("hog", NUM_BLOCKS * BLOCK, "filling the pool")
    run.create("a", "serving a")
    evictions = []

    def evict():
        evictions.append(run.blocks_wanted("a", 5, "serving a"))
        run.free("hog", "evicting")

    run.reserve("a", 5, "serving a", when_full=evict)
    assert evictions == [2]  # nothing free, two blocks to add
    assert len(run.reads.table("a", "after")) == 2


def test_without_an_eviction_a_full_pool_is_a_failure():
    run = _run()
    run.create("hog", "filling the pool")
    run.reserve("hog", NUM_BLOCKS * BLOCK, "filling the pool")
    run.create("a", "serving a")
    with pytest.raises(CheckFailed, match=r"reserve\('a', 1\) raised MemoryError"):
        run.reserve("a", 1, "serving a")


def test_the_blocks_left_at_the_end_are_read_strictly():
    """An allocator whose num_free says it equals anything cannot hide a leak."""

    class LeakyLiar(_right()):
        def free(self, seq):
            self.tables.pop(seq)  # its blocks stay counted: a leak
            self.lengths.pop(seq)
            allocator = self.allocator

            class Lying(type(allocator)):
                @property
                def num_free(self):
                    return EqualsAnything(len(self.free))

            allocator.__class__ = Lying

    run = _run(LeakyLiar)
    run.create("a", "prefill")
    run.step({"a": [1, 2, 3]}, "prefill", hint="no hint")
    with pytest.raises(CheckFailed, match=r"allocator\.num_free"):
        run.free_all("leaked")


def test_create_holding_records_the_cached_prefix_and_the_prefill_starts_after_it():
    run = _run()
    run.create("first", "prefill")
    prompt = [5, 6, 7, 8, 9]
    run.step({"first": prompt}, "prefill", hint="no hint")
    block = run.reads.table("first", "after")[0]
    run.create_holding("second", [block], prompt[:BLOCK], "the first block", "reuse")
    assert run.reads.length("second", "after") == BLOCK
    run.step({"second": [11, 12]}, "prefill after reuse", hint="no hint")
    assert run.tokens["second"] == [5, 6, 7, 8, 11, 12]
    assert torch.isfinite(run.last["second"]).all()
