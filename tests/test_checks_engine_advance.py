"""check_engine_advance (notebook 08's _advance on its own): the instructor's engine passes, at random
31-bit seeds too; realistic wrong _advance methods fail with a message naming the bug, in the visible
call and in the hidden one; the student release says "not implemented yet".

Each wrong _advance is the notebook's method with one mistake (``_advance_with``).
"""

from __future__ import annotations

import random

import pytest
import test_checks_engine as wrong_engines
from test_checks_engine import EARLIER, NOTEBOOK

from paged_helpers.checks import NotImplementedYet, check_engine_advance
from paged_helpers.serving import sample_token

from conftest import SECRET_SEEDS, solution
from engine_designs import advance_in_two_passes
from student_release import release_definition


def _classes():
    return (
        solution(NOTEBOOK, "ContinuousBatchingEngine"),
        solution("04_fork_and_copy_on_write", "PagedKVCache"),
        solution("05_prefix_caching", "PrefixCache"),
    )


def _advance_with(
    *,
    count_decoders=True,
    remember=True,
    fork_first=True,
    own_seed=True,
    step=lambda sample: len(sample.output),
    temperature=True,
    record=True,
    finish=True,
    fork_once=True,
):
    """The notebook's _advance, with the mistakes the keywords name."""

    def _advance(self, plan, logits):
        finished = {}
        for seq, count in plan:
            if count_decoders or count > 1:
                seq.num_cached += count
            if count > 1 and remember:
                self.prefix_cache.remember(seq.seq_id, seq.tokens[: seq.num_cached])
            if seq.num_pending:
                continue
            samples = [seq]
            fork = seq.n > 1 and (not seq.forked or not fork_once)
            if fork and fork_first:
                samples += self._fork_samples(seq)
            for sample in samples:
                seed = sample.seed if own_seed else seq.seed
                heat = sample.temperature if temperature else 0.0
                sample.output.append(sample_token(logits[seq.seq_id], heat, seed, step(sample)))
                if record:
                    self.metrics.record_token(sample)
                if sample.is_finished and finish:
                    self._finish(sample, finished)
            if fork and not fork_first:
                self._fork_samples(seq)
        return finished

    return _advance


WRONG = {
    "samples_mid_prompt": wrong_engines._advance_sampling_every_chunk,
    "never_remembers": _advance_with(remember=False),
    "counts_prefill_chunks_only": _advance_with(count_decoders=False),
    "forks_after_sampling": _advance_with(fork_first=False),
    "samples_with_the_parents_seed": _advance_with(own_seed=False),
    "step_always_zero": _advance_with(step=lambda sample: 0),
    "ignores_temperature": _advance_with(temperature=False),
    "tokens_not_recorded": _advance_with(record=False),
    "never_finishes": _advance_with(finish=False),
    "forks_twice": _advance_with(fork_once=False),
}


def test_right_advance_passes():
    check_engine_advance(*_classes())


def test_another_correct_advance_passes():
    """The same rules in another order (forks made in a first pass, tokens drawn in a second)."""
    engine, cache, prefix = _classes()
    other = type("two_passes", (engine,), dict(_advance=advance_in_two_passes))
    check_engine_advance(other, cache, prefix)
    for seed in (random.getrandbits(31) for _ in range(20)):
        check_engine_advance(other, cache, prefix, seed=seed, hidden=True)


# Issue 36: the grader draws a fresh secret seed for every submission, so a wrong _advance must fail the
# hidden call at every seed: the edges of the seed space, and the 31-bit SECRET_SEEDS.
HIDDEN_SEEDS = (1, 2026, 987654321, 2**31 - 1, *SECRET_SEEDS)


def _hidden_call(seed):
    def hidden_call(*classes):
        return check_engine_advance(*classes, seed=seed, hidden=True)

    return hidden_call


def test_right_advance_passes_hidden_scenarios_at_random_seeds():
    for seed in (*HIDDEN_SEEDS, *(random.getrandbits(31) for _ in range(50))):
        check_engine_advance(*_classes(), seed=seed, hidden=True)


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_check_names_the_bug(bug, failing_message, message_snapshot):
    engine, cache, prefix = _classes()
    wrong = type(bug, (engine,), dict(_advance=WRONG[bug]))
    assert failing_message(check_engine_advance, wrong, cache, prefix) == message_snapshot


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_hidden_call_fails_the_bug_without_numbers(bug, failing_message):
    """The hidden call (the grader's seed) fails each wrong _advance too, at every seed (each hidden step
    holds every kind of chunk and three more, its logits drawn so that each sampling mistake draws another
    token), and its message shows the hint, not the drawn scenario."""
    method = WRONG[bug]
    engine, cache, prefix = _classes()
    wrong = type(bug, (engine,), dict(_advance=method))
    for seed in HIDDEN_SEEDS:
        message = failing_message(_hidden_call(seed), wrong, cache, prefix)
        assert "a hidden scenario failed" in message and "hint:" in message, f"seed {seed}: {message}"
        assert "expected:" not in message, f"seed {seed}: {message}"


@pytest.mark.parametrize("bug", sorted(WRONG))
def test_each_hidden_step_catches_the_bug_in_every_draw(bug, failing_message):
    """Issue 36: no draw lets a step miss a mistake (a fork whose samples happen to draw the parent's token,
    logits whose sampled tokens are all the argmax): each kind of ``ADVANCE_KINDS``, run alone, fails every
    wrong _advance at every seed, and the message names that kind."""
    from paged_helpers.checks.engine.advance import ADVANCE_KINDS
    from paged_helpers.checks.speaking.hidden import run_hidden_scenarios

    method = WRONG[bug]
    engine, cache, prefix = _classes()
    classes = (type(bug, (engine,), dict(_advance=method)), cache, prefix)
    for description, step in ADVANCE_KINDS.items():
        alone = {description: lambda classes, rng, step=step: step.draw(rng).run(classes)}
        for seed in HIDDEN_SEEDS:
            message = failing_message(run_hidden_scenarios, alone, seed, classes)
            assert f"a hidden scenario failed: {description}." in message, f"seed {seed}: {message}"


def test_release_says_not_implemented_yet(tmp_path):
    released = release_definition(tmp_path, NOTEBOOK, "ContinuousBatchingEngine", finished=EARLIER)
    _, cache, prefix = _classes()
    with pytest.raises(NotImplementedYet, match="not implemented yet"):
        check_engine_advance(released, cache, prefix)
