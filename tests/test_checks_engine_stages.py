"""The stage checks of notebook 08 (admission, planning, reserve/evict/preempt, fork): the
instructor's stage classes pass; realistic wrong ones fail with a message naming the rule; the
student release says "not implemented yet".

Wrong stages are subclasses of the instructor's class for that stage with one method replaced;
most replacements are the wrong engines of test_checks_engine, whose whole-engine failures the
end-to-end check leaves to these checks (issue 37: scored once, in the stage's cell). The hidden draws
redrawn until they show their kind's mistakes stop after a bounded number of draws.
"""

from __future__ import annotations

import random

import pytest
import test_checks_engine as wrong_engines
from test_checks_engine import EARLIER, NOTEBOOK

from paged_helpers.checks import (
    NotImplementedYet,
    check_engine_admission,
    check_engine_fork,
    check_engine_plan,
    check_engine_reserve,
)
from paged_helpers.serving import Sequence

from conftest import SECRET_SEEDS, solution
from engine_designs import reserve_evicting_everything
from lying_values import EqualsAnything
from student_release import release_definition

STAGES = {
    "admission": (check_engine_admission, "EngineAdmission"),
    "plan": (check_engine_plan, "EnginePlanner"),
    "reserve": (check_engine_reserve, "EngineScheduler"),
    "fork": (check_engine_fork, "ContinuousBatchingEngine"),
}


def _partners():
    return solution("04_fork_and_copy_on_write", "PagedKVCache"), solution("05_prefix_caching", "PrefixCache")


def _add_request_with_request_seed(self, request_id, prompt, max_new_tokens, n=1, seed=0, temperature=0.0):
    """Seeds sample 0 with the request's seed instead of sample_seed(seed, 0)."""
    pool = len(self.cache.allocator.refs)
    if self.cache.blocks_needed(len(prompt) + max_new_tokens) > pool:
        raise ValueError(f"request {request_id!r} can never fit")
    self.request_seeds[request_id] = seed
    self.finished_samples[request_id] = {}
    self.waiting.append(
        Sequence(request_id, request_id, list(prompt), max_new_tokens, n=n, seed=seed, temperature=temperature)
    )


def _admit_waiting_for_room_when_idle(self):
    """Applies the room check even when nothing runs: a request the size of the pool never starts."""
    while self.waiting:
        seq = self.waiting[0]
        reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
        promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
        wanted = promised + self._blocks_to_come(seq) + len(self.cache.allocator.refs) // 100
        if not self._make_room(wanted):
            self.cache.free(seq.seq_id)
            break
        seq.num_cached = reused
        self.waiting.popleft()
        self.running.append(seq)
        self.metrics.record_admission(seq, reused)


def _admit_without_spare(self):
    """Admits while the blocks to come fit exactly, keeping no 1% spare for the decoders."""
    while self.waiting:
        seq = self.waiting[0]
        reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
        promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
        if self.running and not self._make_room(promised + self._blocks_to_come(seq)):
            self.cache.free(seq.seq_id)
            break
        seq.num_cached = reused
        self.waiting.popleft()
        self.running.append(seq)
        self.metrics.record_admission(seq, reused)


def _plan_advancing_num_cached(self):
    """Counts the chunk as computed while planning it."""
    plan = solution(NOTEBOOK, "EnginePlanner")._plan(self)
    for seq, count in plan:
        seq.num_cached += count
    return plan


def _plan_newest_prefill_first(self):
    """Gives the budget to the newest prefills first."""
    plan = [(seq, 1) for seq in self.running if not seq.is_prefilling]
    budget = self.max_step_tokens - len(plan)
    for seq in reversed(self.running):
        if seq.is_prefilling and budget > 0:
            count = min(self.chunk_size, seq.num_pending, budget)
            plan.append((seq, count))
            budget -= count
    return plan


def _fork_without_cache_fork(self, parent):
    """Samples created empty in the cache: they would recompute the prompt they should share."""
    seed = self.request_seeds[parent.request_id]
    children = []
    for index in range(1, parent.n):
        child = Sequence(
            f"{parent.request_id}/{index}",
            parent.request_id,
            parent.prompt,
            parent.max_new_tokens,
            n=parent.n,
            sample_index=index,
            seed=wrong_engines.sample_seed(seed, index),
            temperature=parent.temperature,
            num_cached=parent.num_cached,
            forked=True,
        )
        self.cache.create(child.seq_id)
        children.append(child)
    parent.forked = True
    self.running.extend(children)
    return children


def _fork_not_running(self, parent):
    """Returns the samples but forgets to put them in the running batch."""
    children = solution(NOTEBOOK, "ContinuousBatchingEngine")._fork_samples(self, parent)
    for child in children:
        self.running.remove(child)
    return children


def _fork_leaving_parent_unforked(self, parent):
    children = solution(NOTEBOOK, "ContinuousBatchingEngine")._fork_samples(self, parent)
    parent.forked = False
    return children


E = wrong_engines
WRONG = {
    # stage, method overrides
    "accepts_impossible_request": ("admission", dict(add_request=E._add_request_without_check)),
    "rejects_requests_that_fit_later": ("admission", dict(add_request=E._add_request_rejecting_busy)),
    "sample_zero_with_request_seed": ("admission", dict(add_request=_add_request_with_request_seed)),
    "admits_newest_first": ("admission", dict(_admit=E._admit_newest_first)),
    "no_undo_after_refused_admission": ("admission", dict(_admit=E._admit_without_undo)),
    "admits_without_room": ("admission", dict(_admit=E._admit_if_own_blocks_fit)),
    "admission_never_evicts": ("admission", dict(_make_room=E._make_room_without_eviction)),
    "counts_hits_of_refused_admissions": ("admission", dict(_admit=E._admit_counting_refused_hits)),
    "admissions_not_recorded": ("admission", dict(_admit=E._admit_unrecorded)),
    "idle_engine_waits_for_room": ("admission", dict(_admit=_admit_waiting_for_room_when_idle)),
    "admits_without_spare": ("admission", dict(_admit=_admit_without_spare)),
    "ignores_step_budget": ("plan", dict(_plan=E._plan_without_budget)),
    "ignores_chunk_size": ("plan", dict(_plan=E._plan_without_chunks)),
    "decoders_only_with_leftover_budget": ("plan", dict(_plan=E._plan_prefill_first)),
    "newest_prefill_first": ("plan", dict(_plan=_plan_newest_prefill_first)),
    "plan_advances_num_cached": ("plan", dict(_plan=_plan_advancing_num_cached)),
    "no_reserve": ("reserve", dict(_reserve=E._reserve_nothing)),
    "waits_instead_of_preempting": ("reserve", dict(_reserve=E._reserve_or_wait)),
    "preempts_oldest": ("reserve", dict(_reserve=E._reserve_preempting_oldest)),
    "preempts_before_evicting": ("reserve", dict(_reserve=E._reserve_preempting_first)),
    "preempted_to_back_of_queue": ("reserve", dict(_preempt=E._preempt_to_back)),
    "preempt_keeps_blocks": ("reserve", dict(_preempt=E._preempt_without_free)),
    "preemption_not_counted": ("reserve", dict(_preempt=E._preempt_uncounted)),
    "fork_by_shallow_copy": ("fork", dict(_fork_samples=E._fork_by_shallow_copy)),
    "samples_share_one_seed": ("fork", dict(_fork_samples=E._fork_with_parent_seed)),
    "fork_without_cache_fork": ("fork", dict(_fork_samples=_fork_without_cache_fork)),
    "forked_samples_not_running": ("fork", dict(_fork_samples=_fork_not_running)),
    "parent_left_unforked": ("fork", dict(_fork_samples=_fork_leaving_parent_unforked)),
    "samples_reported_in_finishing_order": ("fork", dict(_finish=E._finish_in_finishing_order)),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_right_stage_passes(stage):
    check, name = STAGES[stage]
    check(solution(NOTEBOOK, name), *_partners())


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_stage_check_names_the_rule(bug, failing_message, message_snapshot):
    stage, methods = WRONG[bug]
    check, name = STAGES[stage]
    wrong = type(bug, (solution(NOTEBOOK, name),), methods)
    assert failing_message(check, wrong, *_partners()) == message_snapshot


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_release_says_not_implemented_yet(tmp_path, stage):
    check, name = STAGES[stage]
    released = release_definition(tmp_path, NOTEBOOK, name, finished=EARLIER)
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check(released, *_partners())


def _admit_forgetting_the_hit(self):
    """Admits without setting num_cached to what attach reused (the cached prefix would be computed
    again), behind a num_cached that says it equals anything; records num_cached as the hit."""
    while self.waiting:
        seq = self.waiting[0]
        self.prefix_cache.attach(seq.seq_id, seq.tokens)
        promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
        wanted = promised + self._blocks_to_come(seq) + len(self.cache.allocator.refs) // 100
        if self.running and not self._make_room(wanted):
            self.cache.free(seq.seq_id)
            break
        seq.num_cached = EqualsAnything(0)  # forgot: = reused
        self.waiting.popleft()
        self.running.append(seq)
        self.metrics.record_admission(seq, seq.num_cached)


def test_a_num_cached_that_lies_is_refused(failing_message):
    """The rule "admitting 'a': num_cached equals the tokens attach returned", broken behind a num_cached
    that says it equals anything: the check reads num_cached as a plain int and refuses it."""
    wrong = type("forgets_the_hit", (solution(NOTEBOOK, "EngineAdmission"),), dict(_admit=_admit_forgetting_the_hit))
    message = failing_message(check_engine_admission, wrong, *_partners())
    assert "seq.num_cached of 'a'" in message and "EqualsAnything" in message, message


# --------------------------------------------------------------------------- issue 25: the spare 1%, rounded either way


def _admit_keeping_spare(rounding):
    """The instructor's admission with the 1% spare rounded by ``rounding`` (the notebook accepts any)."""

    def _admit(self):
        while self.waiting:
            seq = self.waiting[0]
            reused = self.prefix_cache.attach(seq.seq_id, seq.tokens)
            promised = sum(self._blocks_to_come(s) for s in self.running if s.is_prefilling)
            spare = rounding(len(self.cache.allocator.refs) / 100)
            if self.running and not self._make_room(promised + self._blocks_to_come(seq) + spare):
                self.cache.free(seq.seq_id)
                break
            seq.num_cached = reused
            self.waiting.popleft()
            self.running.append(seq)
            self.metrics.record_admission(seq, reused)

    return _admit


@pytest.mark.parametrize("rounding", ["floor", "ceil", "round"])
def test_the_spare_may_be_rounded_down_or_up(rounding):
    import math

    how = {"floor": math.floor, "ceil": math.ceil, "round": round}[rounding]
    stage = type(f"spare_{rounding}", (solution(NOTEBOOK, "EngineAdmission"),), dict(_admit=_admit_keeping_spare(how)))
    check_engine_admission(stage, *_partners())


def test_too_small_a_spare_is_named_with_its_count(failing_message):
    """Keeping no spare in a pool of 100 (where 1% is 1 block however it is rounded) fails, naming the
    spare block count the rule asked for and the pool it is 1% of."""
    stage = type("no_spare", (solution(NOTEBOOK, "EngineAdmission"),), dict(_admit=_admit_keeping_spare(lambda _: 0)))
    message = failing_message(check_engine_admission, stage, *_partners())
    assert "kept spare (1 of its 100 blocks, rounded down; rounding up is accepted too)" in message, message


# --------------------------------------------------------------------------- issue 24: the hidden scenarios

# Issue 36: the grader draws a fresh secret seed for every submission, so a wrong stage must fail the
# hidden call at every seed: the edges of the seed space, and the 31-bit SECRET_SEEDS.
HIDDEN_SEEDS = (1, 2026, 1_234_567_891, 2**31 - 1, *SECRET_SEEDS)

KIND_NAMES = {
    "queue": "a queue behind a cached prompt: admission in order, eviction, the first that does not fit",
    "idle": "an idle engine admitting a request of the whole pool",
    "front door": "the front door: a request too long for the pool, one of exactly the pool, one that fits later",
    "spare": "two prompts that fill the pool but leave less than its 1% spare",
    "batch": "a running batch of decoders, prefills and readmitted sequences",
    "another batch": "another running batch, with its own chunk size and budget",
    "room": "a pool with room for every planned chunk",
    "evict": "a pool that runs short, where evicting the cached prompt is enough",
    "preempt": "a pool that runs short with several sequences running: someone is preempted",
    "fork": "forking a request whose prompt was just prefilled",
    "finish order": "a request whose samples finish out of order",
}
# Each wrong stage -> the hidden kinds that catch it in every draw (a kind not named may catch it in some).
CAUGHT_BY = {
    "accepts_impossible_request": ("front door",),
    "rejects_requests_that_fit_later": ("front door", "idle"),
    "sample_zero_with_request_seed": ("front door", "queue", "idle", "spare"),
    "admits_newest_first": ("queue", "spare"),
    "no_undo_after_refused_admission": ("queue", "spare"),
    "admits_without_room": ("queue", "spare"),
    "admission_never_evicts": ("queue",),
    "counts_hits_of_refused_admissions": ("queue",),
    "admissions_not_recorded": ("queue",),
    "idle_engine_waits_for_room": ("idle",),
    "admits_without_spare": ("spare",),
    "ignores_step_budget": ("batch", "another batch"),
    "ignores_chunk_size": ("batch", "another batch"),
    "decoders_only_with_leftover_budget": ("batch", "another batch"),
    "newest_prefill_first": ("batch", "another batch"),
    "plan_advances_num_cached": ("batch", "another batch"),
    "no_reserve": ("room", "evict", "preempt"),
    "waits_instead_of_preempting": ("evict", "preempt"),
    "preempts_oldest": ("preempt",),
    "preempts_before_evicting": ("evict",),
    "preempted_to_back_of_queue": ("preempt",),
    "preempt_keeps_blocks": ("preempt",),
    "preemption_not_counted": ("preempt",),
    "fork_by_shallow_copy": ("fork",),
    "samples_share_one_seed": ("fork",),
    "fork_without_cache_fork": ("fork",),
    "forked_samples_not_running": ("fork", "finish order"),
    "parent_left_unforked": ("fork",),
    "samples_reported_in_finishing_order": ("finish order",),
}


def _hidden_call(check, seed):
    """``check`` as the hidden test cell calls it, at ``seed``."""

    def hidden_call(*implementations):
        return check(*implementations, seed=seed, hidden=True)

    return hidden_call


def test_every_wrong_stage_names_the_kinds_that_catch_it():
    from paged_helpers.checks.engine import scenarios as engine_stages

    kinds = {
        **engine_stages.ADMISSION_KINDS,
        **engine_stages.PLAN_KINDS,
        **engine_stages.RESERVE_KINDS,
        **engine_stages.FORK_KINDS,
    }
    assert set(CAUGHT_BY) == set(WRONG)
    assert set(KIND_NAMES.values()) == set(kinds)


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_right_stage_passes_hidden_scenarios_at_random_seeds(stage):
    check, name = STAGES[stage]
    for seed in [*HIDDEN_SEEDS, *(random.getrandbits(31) for _ in range(30))]:
        check(solution(NOTEBOOK, name), *_partners(), seed=seed, hidden=True)


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_hidden_call_fails_every_wrong_stage(bug, failing_message):
    """The hidden call catches each wrong stage at every seed (each hidden kind runs in every draw, at full
    size, drawn so that the mistake shows: a queue where the room rule decides, a pool where someone must
    be preempted, a batch where every planning mistake plans otherwise), and its message shows the hint,
    no numbers."""
    stage, methods = WRONG[bug]
    check, name = STAGES[stage]
    wrong = type(bug, (solution(NOTEBOOK, name),), methods)
    for seed in HIDDEN_SEEDS:
        message = failing_message(_hidden_call(check, seed), wrong, *_partners())
        assert "a hidden scenario failed" in message and "hint:" in message, f"seed {seed}: {message}"
        assert "expected:" not in message, f"seed {seed}: {message}"


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_each_kind_meant_for_a_wrong_stage_catches_it_in_every_draw(bug, failing_message):
    """Issue 36: no draw makes a kind miss a mistake it is meant for (a pool whose plan needs no block, a
    queue with no request left waiting, a fork of one sample): each kind of ``CAUGHT_BY[bug]``, run alone,
    fails the wrong stage at every seed, and the message names that kind."""
    from paged_helpers.checks.engine import scenarios as engine_stages
    from paged_helpers.checks.speaking.hidden import run_hidden_scenarios
    from paged_helpers.checks.story import drawn

    stage, methods = WRONG[bug]
    _, name = STAGES[stage]
    classes = (type(bug, (solution(NOTEBOOK, name),), methods), *_partners())
    kinds = {
        **engine_stages.ADMISSION_KINDS,
        **engine_stages.PLAN_KINDS,
        **engine_stages.RESERVE_KINDS,
        **engine_stages.FORK_KINDS,
    }
    for kind in CAUGHT_BY[bug]:
        description = KIND_NAMES[kind]
        alone = {description: drawn(kinds[description])}
        for seed in HIDDEN_SEEDS:
            message = failing_message(run_hidden_scenarios, alone, seed, classes)
            assert f"a hidden scenario failed: {description}." in message, f"{kind}, seed {seed}: {message}"


def test_the_visible_scenarios_keep_their_answers():
    """The visible scenarios' expected answers, worked out from their blocks, are the ones the notebook
    describes."""
    from paged_helpers.checks.engine import scenarios as engine_stages

    assert engine_stages.VISIBLE_QUEUE.expected(0) == engine_stages.VISIBLE_QUEUE.expected(1) == ("a", "b")
    assert [pool.victims() for pool in engine_stages.VISIBLE_POOLS] == [[], [], ["c"], ["b"]]


def test_another_correct_reserve_passes_at_random_seeds():
    import random

    stage = type(
        "evicts_everything", (solution(NOTEBOOK, "EngineScheduler"),), dict(_reserve=reserve_evicting_everything)
    )
    check_engine_reserve(stage, *_partners())
    for seed in [random.getrandbits(31) for _ in range(50)]:
        check_engine_reserve(stage, *_partners(), seed=seed, hidden=True)


# --------------------------------------------------------------------------- bounded redraws


@pytest.mark.parametrize("kind", ["queue", "batch", "pool", "finish order", "step", "sampling seed"])
def test_a_draw_that_never_shows_its_mistakes_stops(kind, monkeypatch):
    """Every hidden draw that is redrawn until it shows the mistakes of its kind (a queue where the room rule
    decides, a batch where each planning mistake plans otherwise, a pool that needs a preemption, samples that
    finish out of order, a step whose logits tell, a sampling seed whose samples differ) stops after
    ``MAX_REDRAWS`` draws with the course's own error, instead of a check that never returns."""
    from paged_helpers.checks.engine import advance as engine_advance
    from paged_helpers.checks.engine import scenarios as engine_stages
    from paged_helpers.checks.engine import whole as engine_whole
    from paged_helpers.checks.speaking import hidden

    monkeypatch.setattr(hidden, "MAX_REDRAWS", 20)
    rng = random.Random(7)
    never_telling = lambda self: False  # noqa: E731
    ways = {  # what never shows the mistakes, and the draw
        "queue": ((engine_stages.Queue, "telling", never_telling), lambda: engine_stages.Queue.draw(rng)),
        "batch": ((engine_stages.Batch, "telling", never_telling), lambda: engine_stages.Batch.draw(rng)),
        "pool": (
            (engine_stages.Pool, "needs_a_block", never_telling),
            lambda: engine_stages.Pool.draw(rng, want="preempt"),
        ),
        "finish order": ((rng, "shuffle", list.sort), lambda: engine_stages.FinishOrder.draw(rng)),
        "step": ((engine_advance.Step, "telling", never_telling), lambda: engine_advance.Step.draw(rng)),
        "sampling seed": (  # every sample of every seed alike
            (engine_whole, "_solo", lambda key: [1, 2, 3]),
            lambda: engine_whole._part_sampling(*_partners_engine()),
        ),
    }
    patch, draw = ways[kind]
    monkeypatch.setattr(*patch)
    with pytest.raises(RuntimeError, match="no telling draw in 20 tries"):
        draw()


def _partners_engine():
    return (solution(NOTEBOOK, "ContinuousBatchingEngine"), *_partners())
