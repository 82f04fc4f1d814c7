"""check_engine: the instructor's engine (notebook 08) passes; realistic wrong engines fail with a
message that names the bug; the student release fails with "not implemented yet".

Wrong engines are subclasses of the instructor's ContinuousBatchingEngine that override one
method with one mistake. The watch and the parts name each bug (``whole.RUNNERS``, the parts as
served, before anything decides who scores it). Issue 37, no failure scored twice: the same mistakes
placed where a learner makes them, in the notebook's class that defines the method (``engine_with``),
cost only the cell that scores that method. A stage bug fails its stage check and leaves every
whole-engine part passing with a note; a bug only the whole engine sees (``_forward``, the step loop,
a stage mistake its stage check misses) passes every stage check and fails the whole-engine part,
visible and hidden; correct engines of other designs pass every part, proven, at the secret-like seeds.
"""

from __future__ import annotations

import contextlib
import io
import re

import pytest
import torch

from paged_helpers.checks import (
    NotImplementedYet,
    check_engine,
    check_engine_admission,
    check_engine_advance,
    check_engine_fork,
    check_engine_plan,
    check_engine_reserve,
)
from paged_helpers.serving import Sequence, sample_seed

from conftest import SECRET_SEEDS, solution
from engine_designs import advance_in_two_passes, reserve_evicting_everything
from lying_values import EqualsAnything, SaysEqual
from student_release import release_definition

NOTEBOOK = "08_continuous_batching"
EARLIER = ("02_block_allocator", "03_paged_kv_cache", "04_fork_and_copy_on_write", "05_prefix_caching")


def _right_engine():
    """The instructor's engine, for wrong engines that change one thing around its method."""
    return solution(NOTEBOOK, "ContinuousBatchingEngine")


@pytest.fixture(scope="module")
def right():
    return (
        solution(NOTEBOOK, "ContinuousBatchingEngine"),
        solution("04_fork_and_copy_on_write", "PagedKVCache"),
        solution("05_prefix_caching", "PrefixCache"),
    )


def _finish_without_free(self, seq, finished):
    self.running.remove(seq)
    samples = self.finished_samples[seq.request_id]
    samples[seq.sample_index] = seq.output
    if len(samples) == seq.n:
        finished[seq.request_id] = [samples[i] for i in range(seq.n)]


def _finish_in_finishing_order(self, seq, finished):
    """Reports a request's samples in the order they finished, not by sample index."""
    self.cache.free(seq.seq_id)
    self.running.remove(seq)
    samples = self.finished_samples[seq.request_id]
    samples[seq.sample_index] = seq.output
    if len(samples) == seq.n:
        finished[seq.request_id] = list(samples.values())
        del self.finished_samples[seq.request_id]


def _make_room_dropping_entries_in_use(self, blocks):
    """An eviction loop of the engine's own: pops the least recently used prefix entries, in use or not,
    until enough blocks are free. An entry a running sequence holds frees nothing, and its prefix is lost."""
    entries, allocator = self.prefix_cache.entries, self.cache.allocator
    while allocator.num_free < blocks and entries:
        _, block = entries.popitem(last=False)
        allocator.release(block)
    return allocator.num_free >= blocks


def _reserve_nothing(self, plan):
    return plan


def _reserve_or_wait(self, plan):
    """On MemoryError, leave the sequence out of this step and hope memory frees up."""
    kept = []
    for seq, count in plan:
        try:
            self.cache.reserve(seq.seq_id, count)
            kept.append((seq, count))
        except MemoryError:
            self._make_room(self.cache.allocator.num_free + 1)
    return kept


def _preempt_without_free(self, seq):
    seq.num_cached = 0
    self.running.remove(seq)
    self.waiting.appendleft(seq)
    self.metrics.record_preemption(seq)


def _preempt_uncounted(self, seq):
    self.cache.free(seq.seq_id)
    seq.num_cached = 0
    self.running.remove(seq)
    self.waiting.appendleft(seq)


@torch.no_grad()
def _forward_positions_from_zero(self, plan):
    logits = {}
    for count in sorted({count for _, count in plan}):
        group = [seq for seq, c in plan if c == count]
        tokens = torch.tensor([seq.tokens[seq.num_cached : seq.num_cached + count] for seq in group])
        positions = torch.arange(count).expand(len(group), count)  # forgot the offset num_cached
        self.cache.set_batch([seq.seq_id for seq in group])
        out = self.model(tokens, positions, self.cache)
        logits.update({seq.seq_id: out[row, -1] for row, seq in enumerate(group)})
    return logits


def _add_request_without_check(self, request_id, prompt, max_new_tokens, n=1, seed=0, temperature=0.0):
    self.request_seeds[request_id] = seed
    self.finished_samples[request_id] = {}
    self.waiting.append(
        Sequence(
            request_id,
            request_id,
            list(prompt),
            max_new_tokens,
            n=n,
            seed=sample_seed(seed, 0),
            temperature=temperature,
        )
    )


def _add_request_unforked(self, request_id, prompt, max_new_tokens, n=1, seed=0, temperature=0.0):
    """n independent sequences, each prefilling the prompt itself: no fork, no sharing."""
    self.request_seeds[request_id] = seed
    self.finished_samples[request_id] = {}
    for index in range(n):
        self.waiting.append(
            Sequence(
                f"{request_id}/{index}",
                request_id,
                list(prompt),
                max_new_tokens,
                n=n,
                sample_index=index,
                seed=sample_seed(seed, index),
                temperature=temperature,
                forked=True,
            )
        )


def _fork_with_parent_seed(self, parent):
    children = []
    for index in range(1, parent.n):
        child = Sequence(
            f"{parent.request_id}/{index}",
            parent.request_id,
            parent.prompt,
            parent.max_new_tokens,
            n=parent.n,
            sample_index=index,
            seed=parent.seed,
            temperature=parent.temperature,
            num_cached=parent.num_cached,
            forked=True,
        )
        self.cache.fork(parent.seq_id, child.seq_id)
        children.append(child)
    parent.forked = True
    self.running.extend(children)
    return children


def _make_room_without_eviction(self, blocks):
    return self.cache.allocator.num_free >= blocks


def _advance_without_remember(self, plan, logits):
    prefix_cache = self.prefix_cache

    class Forgetful:
        def remember(self, seq, tokens):
            pass

    self.prefix_cache = Forgetful()
    try:
        return _right_engine()._advance(self, plan, logits)
    finally:
        self.prefix_cache = prefix_cache


def _advance_sampling_every_chunk(self, plan, logits):
    """Samples after every chunk, also from the logits of a chunk in the middle of a prompt."""
    finished = {}
    for seq, count in plan:
        seq.num_cached += count
        if count > 1:
            self.prefix_cache.remember(seq.seq_id, seq.tokens[: seq.num_cached])
        seq.output.append(int(torch.argmax(logits[seq.seq_id])))
        self.metrics.record_token(seq)
        if seq.is_finished:
            self._finish(seq, finished)
    return finished


def _admit_unrecorded(self):
    """Admits correctly but never tells the metrics (record_admission forgotten)."""
    metrics = self.metrics
    self.metrics = type(metrics)()
    try:
        _right_engine()._admit(self)
    finally:
        self.metrics = metrics


def _reserve_preempting_oldest(self, plan):
    """Preempts running[0], the oldest, instead of the newest."""
    for seq, count in plan:
        while seq in self.running:
            try:
                self.cache.reserve(seq.seq_id, count)
                break
            except MemoryError:
                free_before = self.cache.allocator.num_free
                self._make_room(free_before + self.cache.blocks_needed(count) + 1)
                if self.cache.allocator.num_free == free_before:
                    self._preempt(self.running[0])
    return [(seq, count) for seq, count in plan if seq in self.running]


def _reserve_preempting_first(self, plan):
    """On MemoryError preempts at once, never asking the prefix cache to evict."""
    for seq, count in plan:
        while seq in self.running:
            try:
                self.cache.reserve(seq.seq_id, count)
                break
            except MemoryError:
                self._preempt(self.running[-1])
    return [(seq, count) for seq, count in plan if seq in self.running]


def _reserve_evicting_too_little(self, plan):
    """Asks the prefix cache for one block, forgetting that evict counts the blocks free in all."""
    for seq, count in plan:
        while seq in self.running:
            try:
                self.cache.reserve(seq.seq_id, count)
                break
            except MemoryError:
                free_before = self.cache.allocator.num_free
                self.prefix_cache.evict(1)
                if self.cache.allocator.num_free == free_before:
                    self._preempt(self.running[-1])
    return [(seq, count) for seq, count in plan if seq in self.running]


def _preempt_to_back(self, seq):
    """Puts the preempted sequence at the back of the queue, behind newer arrivals."""
    self.cache.free(seq.seq_id)
    seq.num_cached = 0
    self.running.remove(seq)
    self.waiting.append(seq)
    self.metrics.record_preemption(seq)


def _admit_newest_first(self):
    """Admits from the back of the queue (LIFO)."""
    while self.waiting:
        seq = self.waiting[-1]
        reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
        promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
        wanted = promised + self._blocks_to_come(seq) + len(self.cache.allocator.refs) // 100
        if self.running and not self._make_room(wanted):
            self.cache.free(seq.seq_id)
            break
        seq.num_cached = reused
        self.waiting.pop()
        self.running.append(seq)
        self.metrics.record_admission(seq, reused)


def _admit_if_own_blocks_fit(self):
    """Admits while the sequence's own blocks fit, forgetting what running prefills still need."""
    while self.waiting:
        seq = self.waiting[0]
        reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
        if self.running and not self._make_room(self._blocks_to_come(seq)):
            self.cache.free(seq.seq_id)
            break
        seq.num_cached = reused
        self.waiting.popleft()
        self.running.append(seq)
        self.metrics.record_admission(seq, reused)


def _admit_without_undo(self):
    """Leaves a refused sequence created in the cache (no cache.free after attach)."""
    while self.waiting:
        seq = self.waiting[0]
        reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
        promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
        wanted = promised + self._blocks_to_come(seq) + len(self.cache.allocator.refs) // 100
        if self.running and not self._make_room(wanted):
            break
        seq.num_cached = reused
        self.waiting.popleft()
        self.running.append(seq)
        self.metrics.record_admission(seq, reused)


def _admit_counting_refused_hits(self):
    """Records the admission (and its prefix hits) before knowing whether it sticks."""
    while self.waiting:
        seq = self.waiting[0]
        reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
        self.metrics.record_admission(seq, reused)
        promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
        wanted = promised + self._blocks_to_come(seq) + len(self.cache.allocator.refs) // 100
        if self.running and not self._make_room(wanted):
            self.cache.free(seq.seq_id)
            break
        seq.num_cached = reused
        self.waiting.popleft()
        self.running.append(seq)


def _plan_without_budget(self):
    """Every prefilling sequence gets a full chunk: the step's token budget is ignored."""
    plan = [(seq, 1) for seq in self.running if not seq.is_prefilling]
    plan += [(seq, min(self.chunk_size, seq.num_pending)) for seq in self.running if seq.is_prefilling]
    return plan


def _plan_without_chunks(self):
    """Prefills as much of a prompt as the budget allows: chunk_size is ignored."""
    plan = [(seq, 1) for seq in self.running if not seq.is_prefilling]
    budget = self.max_step_tokens - len(plan)
    for seq in self.running:
        if seq.is_prefilling and budget > 0:
            count = min(seq.num_pending, budget)
            plan.append((seq, count))
            budget -= count
    return plan


def _plan_prefill_first(self):
    """Prefill chunks first; decoders only with what is left of the budget."""
    plan, budget = [], self.max_step_tokens
    for seq in self.running:
        if seq.is_prefilling and budget > 0:
            count = min(self.chunk_size, seq.num_pending, budget)
            plan.append((seq, count))
            budget -= count
    for seq in self.running:
        if not seq.is_prefilling and budget > 0:
            plan.append((seq, 1))
            budget -= 1
    return plan


def _add_request_rejecting_busy(self, request_id, prompt, max_new_tokens, n=1, seed=0, temperature=0.0):
    """Refuses a request that does not fit the free blocks now, though it fits the pool."""
    needed = self.cache.blocks_needed(len(prompt) + max_new_tokens)
    if needed > self.cache.allocator.num_free:
        raise ValueError(f"request {request_id!r} does not fit")
    _right_engine().add_request(self, request_id, prompt, max_new_tokens, n, seed, temperature)


def _fork_by_shallow_copy(self, parent):
    """copy.copy(parent) for each sample: the children share the parent's output list."""
    import copy

    seed = self.request_seeds[parent.request_id]
    children = []
    for index in range(1, parent.n):
        child = copy.copy(parent)
        child.seq_id, child.sample_index, child.seed = f"{parent.request_id}/{index}", index, sample_seed(seed, index)
        child.forked = True
        self.cache.fork(parent.seq_id, child.seq_id)
        children.append(child)
    parent.forked = True
    self.running.extend(children)
    return children


WRONG = {
    "leaks_blocks_at_finish": dict(_finish=_finish_without_free),
    "no_reserve_before_forward": dict(_reserve=_reserve_nothing),
    "waits_instead_of_preempting": dict(_reserve=_reserve_or_wait),
    "preempt_keeps_blocks": dict(_preempt=_preempt_without_free),
    "preemption_not_counted": dict(_preempt=_preempt_uncounted),
    "chunk_positions_from_zero": dict(_forward=_forward_positions_from_zero),
    "accepts_impossible_request": dict(add_request=_add_request_without_check),
    "samples_without_fork": dict(add_request=_add_request_unforked),
    "samples_share_one_seed": dict(_fork_samples=_fork_with_parent_seed),
    "never_remembers_prefix": dict(_advance=_advance_without_remember),
    "samples_mid_prompt": dict(_advance=_advance_sampling_every_chunk),
    "never_evicts_prefix_cache": dict(_make_room=_make_room_without_eviction),
    "admissions_not_recorded": dict(_admit=_admit_unrecorded),
    "preempts_oldest": dict(_reserve=_reserve_preempting_oldest),
    "preempts_before_evicting": dict(_reserve=_reserve_preempting_first),
    "preempted_to_back_of_queue": dict(_preempt=_preempt_to_back),
    "evicts_too_little": dict(_reserve=_reserve_evicting_too_little),
    "admits_newest_first": dict(_admit=_admit_newest_first),
    "admits_without_room": dict(_admit=_admit_if_own_blocks_fit),
    "no_undo_after_refused_admission": dict(_admit=_admit_without_undo),
    "counts_hits_of_refused_admissions": dict(_admit=_admit_counting_refused_hits),
    "ignores_step_budget": dict(_plan=_plan_without_budget),
    "ignores_chunk_size": dict(_plan=_plan_without_chunks),
    "decoders_only_with_leftover_budget": dict(_plan=_plan_prefill_first),
    "rejects_requests_that_fit_later": dict(add_request=_add_request_rejecting_busy),
    "fork_by_shallow_copy": dict(_fork_samples=_fork_by_shallow_copy),
    "drops_prefix_entries_in_use": dict(_make_room=_make_room_dropping_entries_in_use),
}

# each wrong engine -> the part of check_engine whose workload shows its mistake
PART_OF = {
    "leaks_blocks_at_finish": "batching",
    "no_reserve_before_forward": "batching",
    "waits_instead_of_preempting": "preemption",
    "preempt_keeps_blocks": "preemption",
    "preemption_not_counted": "preemption",
    "chunk_positions_from_zero": "batching",
    "accepts_impossible_request": "rejection",
    "samples_without_fork": "sampling",
    "samples_share_one_seed": "sampling",
    "never_remembers_prefix": "batching",
    "samples_mid_prompt": "batching",
    "never_evicts_prefix_cache": "preemption",
    "admissions_not_recorded": "batching",
    "preempts_oldest": "preemption",
    "preempts_before_evicting": "preemption",
    "preempted_to_back_of_queue": "preemption",
    "evicts_too_little": "preemption",
    "admits_newest_first": "batching",
    "admits_without_room": "preemption",
    "no_undo_after_refused_admission": "preemption",
    "counts_hits_of_refused_admissions": "preemption",
    "ignores_step_budget": "batching",
    "ignores_chunk_size": "batching",
    "decoders_only_with_leftover_budget": "batching",
    "rejects_requests_that_fit_later": "rejection",
    "fork_by_shallow_copy": "sampling",
    "drops_prefix_entries_in_use": "preemption",
}


def test_every_wrong_engine_has_a_part():
    assert set(WRONG) == set(PART_OF)


@pytest.mark.parametrize("part", ["batching", "preemption", "rejection", "sampling"])
def test_right_engine_passes(part, right, capsys):
    check_engine(*right, parts=part)
    assert "not proven" not in capsys.readouterr().out  # proven, not excused


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_the_watch_names_the_bug(bug, right, failing_message, message_snapshot):
    """The part as served (``whole.RUNNERS``: the watch and the part's own rules, before ``check_engine``
    asks whether a stage check scores the failure) names each wrong engine's mistake."""
    from paged_helpers.checks.engine.whole import RUNNERS
    from paged_helpers.serving import one_thread

    engine, cache, prefix = right
    wrong = type(bug, (engine,), WRONG[bug])
    with one_thread():  # as check_engine serves
        message = failing_message(RUNNERS[PART_OF[bug]], wrong, cache, prefix)
    assert message == message_snapshot


def test_unknown_part_is_named(right):
    with pytest.raises(ValueError, match="parts must be"):
        check_engine(*right, parts="speed")


@pytest.mark.parametrize("part", ["batching", "preemption", "rejection", "sampling"])
def test_release_says_not_implemented_yet(tmp_path, right, part):
    released = release_definition(tmp_path, NOTEBOOK, "ContinuousBatchingEngine", finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_engine(released, right[1], right[2], parts=part)


def _prefix_cache_evicting_in_use(prefix_class):
    """A prefix cache whose evict drops the least recently used entries whether or not they are in use."""

    class EvictsInUse(prefix_class):
        def evict(self, blocks_wanted):
            allocator = self.cache.allocator
            for key in list(self.entries):
                if allocator.num_free >= blocks_wanted:
                    break
                allocator.release(self.entries.pop(key))

    return EvictsInUse


def test_eviction_of_blocks_in_use_is_named(right, failing_message):
    engine, cache, prefix = right
    message = failing_message(
        lambda *impl: check_engine(*impl, parts="preemption"), engine, cache, _prefix_cache_evicting_in_use(prefix)
    )
    assert "never evict blocks in use" in message and "reference count 1" in message, message


def test_eviction_workload_needs_eviction(right, failing_message):
    """The workload where only eviction lets the oldest request go on, on its own."""
    from paged_helpers.checks.engine import whole as engine_check

    engine, cache, prefix = right
    engine_check._part_eviction(engine, cache, prefix)
    wrong = type("preempts_before_evicting", (engine,), WRONG["preempts_before_evicting"])
    message = failing_message(engine_check._part_eviction, wrong, cache, prefix)
    assert "evict before preempting 'whole_pool'" in message and "could have been evicted" in message, message


def test_refusal_while_serving_names_the_rule(right, failing_message):
    """A request refused mid-workload (the pool is busy, not too small) is named as such, not as a crash."""
    from paged_helpers.checks.engine import whole as engine_check

    engine, cache, prefix = right
    wrong = type("rejects_requests_that_fit_later", (engine,), WRONG["rejects_requests_that_fit_later"])
    message = failing_message(engine_check._part_eviction, wrong, cache, prefix)
    assert "refuse only requests that can never fit" in message and "whole pool" in message, message


def test_preemption_ceiling_is_a_backstop(right, failing_message, monkeypatch):
    """Behind the rule 'admit only with room': an engine admitting without room preempts 18 times for 6
    requests (the instructor's engine: 7), past the ceiling of two per request."""
    from paged_helpers.checks.engine import rules as engine_rules

    engine, cache, prefix = right
    monkeypatch.setattr(engine_rules, "blocks_to_come", lambda cache, seq, scenario="": 0)  # the room rule sees no need
    wrong = type("admits_without_room", (engine,), WRONG["admits_without_room"])
    message = failing_message(lambda *impl: check_engine(*impl, parts="preemption"), wrong, cache, prefix)
    assert "at most 12 (two per request)" in message and "preemptions" in message, message


# ---------------------------------------------------------------- values that lie: read strictly


class LyingRefs(list):
    """The allocator's own list of reference counts (indexing, assignment: plain ints), but iterating
    it yields counts that say they equal anything, 0 included."""

    def __iter__(self):
        return (EqualsAnything(count) for count in list.__iter__(self))


def _cache_leaking_at_free(cache_class):
    """A cache whose free drops the table but never releases its blocks, behind an allocator whose
    refs and num_free say they equal anything: a leak that the old check's != comparisons missed."""

    class LeakingCache(cache_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            allocator = self.allocator
            allocator.refs = LyingRefs(allocator.refs)
            num_free = property(lambda a: EqualsAnything(len(a.free)))
            allocator.__class__ = type("LyingAllocator", (type(allocator),), {"num_free": num_free})

        def free(self, seq):
            self._table(seq)
            del self.tables[seq], self.lengths[seq]  # forgot: allocator.release(block) for each block

    return LeakingCache


def test_a_leak_behind_lying_refcounts_is_refused(right, failing_message):
    """Blocks leak at every free, hidden behind refcounts and a num_free that say they equal anything:
    the check reads the pool as plain ints and refuses it, naming what it read."""
    engine, cache, prefix = right
    message = failing_message(
        lambda *impl: check_engine(*impl, parts="batching"), engine, _cache_leaking_at_free(cache), prefix
    )
    assert "cache.allocator.refs" in message and "LyingRefs" in message, message


def _finish_reporting_agreeable_outputs(self, seq, finished):
    """The notebook's _finish, but each reported output is a list that says it equals anything."""
    self.cache.free(seq.seq_id)
    self.running.remove(seq)
    samples = self.finished_samples[seq.request_id]
    samples[seq.sample_index] = SaysEqual(seq.output)
    if len(samples) == seq.n:
        finished[seq.request_id] = [samples[i] for i in range(seq.n)]
        del self.finished_samples[seq.request_id]


def test_outputs_that_say_they_equal_anything_are_refused(right, failing_message):
    """Samples drawn mid-prompt (outputs differ from the solo runs), reported as lists that say they
    equal anything: the check reads what step() returns as plain lists of ints."""
    engine, cache, prefix = right
    wrong = type(
        "agreeable_outputs",
        (engine,),
        dict(_advance=_advance_sampling_every_chunk, _finish=_finish_reporting_agreeable_outputs),
    )
    message = failing_message(lambda *impl: check_engine(*impl, parts="batching"), wrong, cache, prefix)
    assert "what step() returned" in message and "SaysEqual" in message, message


def _step_ignoring_admission_errors(self):
    """The notebook's step(), but whatever _admit raises is ignored, a check's failure included."""
    try:
        self._admit()
    except Exception:
        pass
    plan = self._reserve(self._plan())
    logits = self._forward(plan)
    return self._advance(plan, logits)


def test_a_failure_caught_by_the_learners_code_still_fails(right, failing_message):
    """Admission from the back of the queue, behind a step() that catches every exception of _admit: the
    broken rule is kept by the watch and raised again once the learner's code returns."""
    engine, cache, prefix = right
    wrong = type(
        "admits_newest_first_quietly", (engine,), dict(_admit=_admit_newest_first, step=_step_ignoring_admission_errors)
    )
    message = failing_message(lambda *impl: check_engine(*impl, parts="batching"), wrong, cache, prefix)
    assert "admission order" in message and "front of `waiting`" in message, message


def test_an_engine_that_swaps_in_a_cache_of_its_own_is_refused(right, failing_message):
    """The rules read the pool through engine.cache: an engine that serves from a cache of its own
    (one the check does not watch, where its leaks would not show) fails, naming engine.cache."""
    engine, cache, prefix = right

    def __init__(self, model, given_cache, prefix_cache, **options):
        engine.__init__(self, model, given_cache, prefix_cache, **options)
        own = cache.__new__(cache)  # the notebook's cache class, not the check's watched subclass
        own.__dict__.update(given_cache.__dict__)
        self.cache = own

    swapping = type("swapping", (engine,), {"__init__": __init__})
    message = failing_message(lambda *impl: check_engine(*impl, parts="batching"), swapping, cache, prefix)
    assert "engine.cache and engine.prefix_cache" in message and "another object in their place" in message, message


# ---------------------------------------------------------------- issue 24: the hidden scenarios


def test_relabelling_keeps_every_shared_prefix():
    """The hidden workloads are the visible ones with token ids permuted: a prompt is never a strict prefix
    of another (so output tokens, which the permutation does not map, can never complete another's key),
    and two prompts share a prefix exactly as long before and after."""
    import random

    from paged_helpers.checks.engine import whole as engine_check

    workloads = [
        engine_check._batching_workload(),
        engine_check._pressure_workload(),
        engine_check._eviction_workload(8 * engine_check.BLOCK_SIZE),
    ]
    drawn = engine_check.Relabelled.draw(random.Random(5))
    assert sorted(drawn.relabel) == list(range(engine_check.VOCAB))
    for requests in workloads:
        prompts = [r.prompt for r in requests]
        for a in prompts:
            for b in prompts:
                if a is not b:
                    assert not (len(a) < len(b) and b[: len(a)] == a)
        relabelled = [r.prompt for r in drawn.requests(requests)]
        for (a, b), (x, y) in zip(
            [(a, b) for a in prompts for b in prompts], [(x, y) for x in relabelled for y in relabelled], strict=True
        ):
            shared = next((i for i, (s, t) in enumerate(zip(a, b, strict=False)) if s != t), min(len(a), len(b)))
            assert x[:shared] == y[:shared] and (shared == min(len(a), len(b)) or x[shared] != y[shared])


@pytest.mark.parametrize("part", ["batching", "preemption", "rejection", "sampling"])
def test_right_engine_passes_hidden_parts(part, right, capsys):
    import random

    for seed in (*SECRET_SEEDS, *(random.getrandbits(31) for _ in range(3))):
        check_engine(*right, parts=part, seed=seed, hidden=True)
        assert "not proven" not in capsys.readouterr().out, seed  # proven, not excused


def _hidden_runner(part, seed):
    """The hidden call of ``part`` at ``seed`` as it serves its workload: the part's runner on a relabelled
    workload, before ``check_engine`` asks whether a stage check scores a failure."""
    import random

    from paged_helpers.checks.engine.whole import RUNNERS, Relabelled
    from paged_helpers.checks.speaking.hidden import run_hidden_scenarios
    from paged_helpers.serving import one_thread

    def hidden_call(*classes):
        kind = {f"the {part} workload": lambda classes, rng: RUNNERS[part](*classes, Relabelled.draw(rng))}
        with one_thread():  # as check_engine serves
            run_hidden_scenarios(kind, random.Random(f"{part}/{seed}").getrandbits(31), classes)

    return hidden_call


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_every_hidden_draw_catches_each_wrong_engine_without_numbers(bug, right, failing_message):
    """Issue 36: every wrong engine fails the hidden workload of its part at every one of the SECRET_SEEDS
    (each part serves its visible workload's full size, relabelled, and the sampling request's n is fixed),
    and the message names the part's workload, none of its numbers."""
    engine, cache, prefix = right
    wrong = type(bug, (engine,), WRONG[bug])
    part = PART_OF[bug]
    for seed in SECRET_SEEDS:
        message = failing_message(_hidden_runner(part, seed), wrong, cache, prefix)
        assert "a hidden scenario failed" in message and f"the {part} workload" in message, f"seed {seed}: {message}"
        assert "expected:" not in message, f"seed {seed}: {message}"


# ---------------------------------------------------------------- issue 37: no failure scored twice

PARTS = ("batching", "preemption", "rejection", "sampling")
# Notebook 08's classes, each extending the one before; a learner writes each method in the one that defines it.
CHAIN = ("EngineBase", "EngineAdmission", "EnginePlanner", "EngineScheduler", "ContinuousBatchingEngine")
# Each stage check: the class its cell hands it, and the cell.
STAGE_CELLS = {
    "check_engine_admission": (check_engine_admission, "EngineAdmission", "test_engine_admission"),
    "check_engine_plan": (check_engine_plan, "EnginePlanner", "test_engine_plan"),
    "check_engine_reserve": (check_engine_reserve, "EngineScheduler", "test_engine_reserve"),
    "check_engine_fork": (check_engine_fork, "ContinuousBatchingEngine", "test_engine_fork"),
    "check_engine_advance": (check_engine_advance, "ContinuousBatchingEngine", "test_engine_advance"),
}


def _home(method):
    """The class of notebook 08 that defines ``method``."""
    return next(name for name in CHAIN if method in vars(solution(NOTEBOOK, name)))


def engine_with(methods):
    """Notebook 08's engine with ``methods`` written where a learner writes them: each in the notebook's
    class that defines it, every later class built on that one with its own methods as the notebook has
    them (as the notebook's cells build them, top to bottom). Returns that notebook's
    ContinuousBatchingEngine; the class each stage cell hands its check is in its ancestry."""
    klass = None
    for name in CHAIN:
        written = solution(NOTEBOOK, name)
        own = {method: body for method, body in methods.items() if _home(method) == name}
        if klass is None:
            klass = type(name, (written,), own)
        else:
            body = {key: value for key, value in vars(written).items() if key not in ("__dict__", "__weakref__")}
            klass = type(name, (klass,), {**body, **own})
    return klass


def _cell_class(engine, check_name):
    """The class the stage cell of ``check_name`` hands its check, in ``engine``'s notebook."""
    wanted = STAGE_CELLS[check_name][1]
    return next(klass for klass in engine.__mro__ if klass.__name__ == wanted)


def _shown(capsys, *classes, **options) -> str:
    """What check_engine printed (it must pass: a failure is raised)."""
    capsys.readouterr()
    check_engine(*classes, **options)
    return capsys.readouterr().out


# Each wrong engine of WRONG whose mistake a stage cell scores: the stage check that fails on it (the one
# its whole-engine note must name; another may fail too).
SCORED_BY = {
    "accepts_impossible_request": "check_engine_admission",
    "admissions_not_recorded": "check_engine_admission",
    "admits_newest_first": "check_engine_admission",
    "admits_without_room": "check_engine_admission",
    "counts_hits_of_refused_admissions": "check_engine_admission",
    "never_evicts_prefix_cache": "check_engine_admission",
    "no_undo_after_refused_admission": "check_engine_admission",
    "rejects_requests_that_fit_later": "check_engine_admission",
    "samples_without_fork": "check_engine_admission",
    "decoders_only_with_leftover_budget": "check_engine_plan",
    "ignores_chunk_size": "check_engine_plan",
    "ignores_step_budget": "check_engine_plan",
    "no_reserve_before_forward": "check_engine_reserve",
    "preempt_keeps_blocks": "check_engine_reserve",
    "preempted_to_back_of_queue": "check_engine_reserve",
    "preemption_not_counted": "check_engine_reserve",
    "preempts_before_evicting": "check_engine_reserve",
    "preempts_oldest": "check_engine_reserve",
    "waits_instead_of_preempting": "check_engine_reserve",
    "fork_by_shallow_copy": "check_engine_fork",
    "samples_share_one_seed": "check_engine_fork",
    "leaks_blocks_at_finish": "check_engine_advance",  # _finish does not free: _advance's finished sample stays
    "never_remembers_prefix": "check_engine_advance",
    "samples_mid_prompt": "check_engine_advance",
}


@torch.no_grad()
def _forward_logits_of_first_token(self, plan):
    """The notebook's _forward, but each chunk's logits taken at its first token, not its last."""
    logits = {}
    for count in sorted({count for _, count in plan}):
        group = [seq for seq, c in plan if c == count]
        starts = [seq.num_cached for seq in group]
        tokens = torch.tensor([seq.tokens[s : s + count] for seq, s in zip(group, starts, strict=True)])
        positions = torch.tensor([list(range(s, s + count)) for s in starts])
        self.cache.set_batch([seq.seq_id for seq in group])
        out = self.model(tokens, positions, self.cache)
        logits.update({seq.seq_id: out[row, 0] for row, seq in enumerate(group)})
    return logits


@torch.no_grad()
def _forward_one_batch_for_the_plan(self, plan):
    """Names the whole plan once (set_batch), then runs each group of equal counts under it."""
    logits = {}
    self.cache.set_batch([seq.seq_id for seq, _ in plan])
    for count in sorted({count for _, count in plan}):
        group = [seq for seq, c in plan if c == count]
        starts = [seq.num_cached for seq in group]
        tokens = torch.tensor([seq.tokens[s : s + count] for seq, s in zip(group, starts, strict=True)])
        positions = torch.tensor([list(range(s, s + count)) for s in starts])
        out = self.model(tokens, positions, self.cache)
        logits.update({seq.seq_id: out[row, -1] for row, seq in enumerate(group)})
    return logits


def _step_planning_before_admitting(self):
    """The notebook's step with two phases swapped: what was admitted waits a step for its first chunk."""
    plan = self._plan()
    self._admit()
    plan = self._reserve(plan)
    logits = self._forward(plan)
    return self._advance(plan, logits)


# Mistakes no stage check scores, each as the notebook's classes hold it: the methods and the part that
# fails. _forward (no stage runs it), the step loop, and two stage mistakes that their stage checks miss
# and only the whole engine catches (which is right, and stays).
WHOLE_ENGINE_ONLY = {
    "chunk_positions_from_zero": (dict(_forward=_forward_positions_from_zero), "batching"),
    "forward_logits_of_first_token": (dict(_forward=_forward_logits_of_first_token), "batching"),
    "forward_one_batch_for_the_plan": (dict(_forward=_forward_one_batch_for_the_plan), "batching"),
    "step_plans_before_admitting": (dict(step=_step_planning_before_admitting), "batching"),
    "drops_prefix_entries_in_use": (WRONG["drops_prefix_entries_in_use"], PART_OF["drops_prefix_entries_in_use"]),
    "evicts_too_little": (WRONG["evicts_too_little"], PART_OF["evicts_too_little"]),
}


def test_every_wrong_engine_is_scored_by_one_cell():
    assert set(SCORED_BY) | (set(WHOLE_ENGINE_ONLY) & set(WRONG)) == set(WRONG)
    assert not set(SCORED_BY) & set(WHOLE_ENGINE_ONLY)


@pytest.mark.parametrize("bug", sorted(SCORED_BY))
def test_a_stage_bug_costs_its_stage_cell_only(bug, right, failing_message, capsys):
    """(a) The mistake written in its stage's class fails that stage's check (its cell) and no whole-engine
    part: the part that breaks on it passes with a note naming the stage check and its cell, and saying the
    whole engine was not proven; the others pass."""
    _, cache, prefix = right
    engine = engine_with(WRONG[bug])
    scored_by = SCORED_BY[bug]
    check, _, cell = STAGE_CELLS[scored_by]
    failing_message(check, _cell_class(engine, scored_by), cache, prefix)
    broken = PART_OF[bug]
    for part in PARTS:
        shown = _shown(capsys, engine, cache, prefix, parts=part)
        if part == broken:
            assert f"the {part} part is not proven" in shown and scored_by in shown and cell in shown, shown
            assert "check_engine: " in shown and "Traceback" not in shown, shown


@pytest.mark.parametrize("bug", sorted(SCORED_BY))
def test_a_stage_bug_costs_no_hidden_whole_engine_part(bug, right, capsys):
    """(a), hidden: the part's hidden call passes too at every one of the SECRET_SEEDS, and its note names
    the stage, never a number of the hidden workload."""
    _, cache, prefix = right
    engine = engine_with(WRONG[bug])
    part = PART_OF[bug]
    for seed in SECRET_SEEDS:
        shown = _shown(capsys, engine, cache, prefix, parts=part, seed=seed, hidden=True)
        assert f"not proven, and not counted against you here. Your engine broke a rule on the hidden {part}" in shown
        assert SCORED_BY[bug] in shown, f"seed {seed}: {shown}"
        assert not re.search(r"\d", shown), f"seed {seed}: {shown}"


@pytest.mark.parametrize("bug", sorted(WHOLE_ENGINE_ONLY))
def test_a_bug_only_the_whole_engine_sees_fails_it(bug, right, failing_message, message_snapshot):
    """(b) Every stage check passes on the engine (each on the class its cell hands it), and the whole-engine
    part fails, naming the mistake, visible and hidden at every one of the SECRET_SEEDS (without numbers)."""
    _, cache, prefix = right
    methods, part = WHOLE_ENGINE_ONLY[bug]
    engine = engine_with(methods)
    for name, (check, _, _) in STAGE_CELLS.items():
        check(_cell_class(engine, name), cache, prefix)
    assert failing_message(lambda *impl: check_engine(*impl, parts=part), engine, cache, prefix) == message_snapshot
    for seed in SECRET_SEEDS:
        message = failing_message(
            lambda *impl, seed=seed: check_engine(*impl, parts=part, seed=seed, hidden=True), engine, cache, prefix
        )
        assert "a hidden scenario failed" in message and f"the {part} workload" in message, f"seed {seed}: {message}"
        assert "expected:" not in message, f"seed {seed}: {message}"


@pytest.mark.parametrize("bug", ["chunk_positions_from_zero", "forward_logits_of_first_token"])
def test_a_forward_bug_costs_the_batching_cell_only(bug, right, capsys):
    """_forward is scored in test_engine_batching (tested alone there, first): the other parts leave a failure
    it causes to that cell, as they leave a stage's failure to the stage's cell."""
    _, cache, prefix = right
    engine = engine_with(WHOLE_ENGINE_ONLY[bug][0])
    for part in PARTS[1:]:
        shown = _shown(capsys, engine, cache, prefix, parts=part)
        assert "not proven" in shown and "_forward alone (_forward; cell test_engine_batching" in shown, shown


def test_a_stage_method_the_engine_overrides_is_the_whole_engines_to_score(right, failing_message):
    """A stage cell scores the class it is handed: a mistake the engine's own class adds over a right
    EnginePlanner (whose cell passes) was scored by no stage, so the whole engine scores it."""
    engine, cache, prefix = right
    overriding = type("ContinuousBatchingEngine", (engine,), dict(_plan=_plan_without_chunks))
    check_engine_plan(_cell_class(overriding, "check_engine_plan"), cache, prefix)
    message = failing_message(lambda *impl: check_engine(*impl, parts="batching"), overriding, cache, prefix)
    assert "chunk size" in message and "not proven" not in message, message


def _plan_raising(self):
    raise KeyError("a planning bug of the learner's")


def test_an_exception_of_a_stage_method_is_its_cells_to_score(right, failing_message, capsys):
    """An exception (not a broken rule) escaping a stage's method: the stage's check fails on it, and each
    whole-engine part passes with a note."""
    _, cache, prefix = right
    engine = engine_with(dict(_plan=_plan_raising))
    message = failing_message(check_engine_plan, _cell_class(engine, "check_engine_plan"), cache, prefix)
    assert "raised KeyError" in message, message
    for part in PARTS:
        shown = _shown(capsys, engine, cache, prefix, parts=part)
        assert "not proven" in shown and "check_engine_plan (_plan; cell test_engine_plan" in shown, shown


def test_a_stage_that_fails_only_its_hidden_scenarios_is_named_so(right, capsys, monkeypatch):
    """A stage whose visible scenarios pass but whose hidden kinds fail loses its cell's points when graded:
    the whole engine leaves the failure to it too, and says how to see the hidden kinds' hint."""
    import dataclasses

    from paged_helpers.checks.engine import attribution

    _, cache, prefix = right
    stage = attribution.STAGES["plan"]
    monkeypatch.setitem(attribution.STAGES, "plan", dataclasses.replace(stage, visible=lambda classes: None))
    engine = engine_with(dict(_plan=_plan_without_chunks))
    shown = _shown(capsys, engine, cache, prefix, parts="batching")
    assert "its visible scenarios pass, its hidden ones fail" in shown, shown
    assert "check_engine_plan(EnginePlanner, PagedKVCache, PrefixCache, hidden=True)" in shown, shown


@torch.no_grad()
def _forward_one_sequence_at_a_time(self, plan):
    """Another correct _forward: a model call per chunk, each its own batch of one."""
    logits = {}
    for seq, count in plan:
        start = seq.num_cached
        self.cache.set_batch([seq.seq_id])
        tokens = torch.tensor([seq.tokens[start : start + count]])
        out = self.model(tokens, torch.arange(start, start + count)[None], self.cache)
        logits[seq.seq_id] = out[0, -1]
    return logits


def _admit_spare_rounded_up(self):
    """Another correct _admit: the spare 1% of the pool rounded up, the room made by evicting everything."""
    import math

    while self.waiting:
        seq = self.waiting[0]
        reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
        promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
        wanted = promised + self._blocks_to_come(seq) + math.ceil(len(self.cache.allocator.refs) / 100)
        if self.running and not self._make_room(wanted):
            self.cache.free(seq.seq_id)
            break
        seq.num_cached = reused
        self.waiting.popleft()
        self.running.append(seq)
        self.metrics.record_admission(seq, reused)


ANOTHER_DESIGN = dict(
    _forward=_forward_one_sequence_at_a_time,
    _admit=_admit_spare_rounded_up,
    _reserve=reserve_evicting_everything,
    _advance=advance_in_two_passes,
)


@pytest.mark.parametrize("part", PARTS)
def test_an_engine_of_another_design_is_proven_at_the_secret_seeds(part, right, capsys):
    """(c) A correct engine of another design passes every stage check and every part, visible and hidden at
    every one of the SECRET_SEEDS, proven: never a note."""
    _, cache, prefix = right
    engine = engine_with(ANOTHER_DESIGN)
    for name, (check, _, _) in STAGE_CELLS.items():
        check(_cell_class(engine, name), cache, prefix)
    for options in ({}, *({"seed": seed, "hidden": True} for seed in SECRET_SEEDS)):
        shown = _shown(capsys, engine, cache, prefix, parts=part, **options)
        assert "not proven" not in shown and "passed" in shown, f"{options}: {shown}"


def test_the_lab_and_the_grader_give_one_verdict(tmp_path, capsys):
    """The same verdict and the same words in one process (the lab) and across the grader's wire (the clean
    run: the checks on stand-ins, the learner's notebook in a process of its own), for a notebook whose
    _plan a stage cell scores (a note) and one whose _forward only the whole engine sees (a failure)."""
    import json
    import os
    import sys

    from paged_helpers.checks import CheckFailed
    from paged_helpers.learner_view.connection import LearnerProcess
    from paged_helpers.notebook_loader import load_from_notebook

    from conftest import NOTEBOOKS, ROOT

    learner_names = ("ContinuousBatchingEngine", "PagedKVCache", "PrefixCache")
    edits = {  # the notebook's line, the line with a mistake, the part, its verdict
        "plan": (
            "count = min(self.chunk_size, seq.num_pending, budget)",
            "count = min(seq.num_pending, budget)",
            "preemption",
            "passed",  # with a note: test_engine_plan scores it
        ),
        "forward": (
            "logits.update({seq.seq_id: out[row, -1]",
            "logits.update({seq.seq_id: out[row, 0]",
            "batching",
            "failed",
        ),
    }
    for earlier in EARLIER:
        (tmp_path / f"{earlier}.ipynb").write_bytes((NOTEBOOKS / f"{earlier}.ipynb").read_bytes())
    for name, (old, new, part, expected) in edits.items():
        folder = tmp_path / name
        folder.mkdir()
        for earlier in tmp_path.glob("*.ipynb"):
            (folder / earlier.name).write_bytes(earlier.read_bytes())
        notebook = json.loads((NOTEBOOKS / f"{NOTEBOOK}.ipynb").read_text(encoding="utf-8"))
        cells = [cell for cell in notebook["cells"] if old in "".join(cell["source"])]
        assert len(cells) == 1, f"{old!r}: the notebook changed, update the test"
        cells[0]["source"] = "".join(cells[0]["source"]).replace(old, new)
        path = folder / f"{NOTEBOOK}.ipynb"
        path.write_text(json.dumps(notebook), encoding="utf-8")

        def verdicts(classes, part):
            found = []
            for options in ({}, {"seed": 20260, "hidden": True}):
                capsys.readouterr()
                try:
                    check_engine(*classes, parts=part, **options)
                    found.append(("passed", capsys.readouterr().out))
                except CheckFailed as error:
                    found.append(("failed", str(error)))
            return found

        with contextlib.redirect_stdout(io.StringIO()):  # the loader's "using your ..." notes
            here = [load_from_notebook(NOTEBOOK, defined, search=[folder]) for defined in learner_names]
        in_the_lab = verdicts(here, part)
        host = [sys.executable, "-m", "paged_helpers.learner_view.host", str(path)]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with LearnerProcess(host, time_limit=300, cwd=str(ROOT), env=env) as learner:
            across = verdicts([learner.name(defined) for defined in learner_names], part)
        assert across == in_the_lab, f"{name}:\n{across}\n{in_the_lab}"
        assert [verdict for verdict, _ in in_the_lab] == [expected, expected], in_the_lab
