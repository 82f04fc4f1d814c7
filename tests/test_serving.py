"""paged_helpers.serving: the engine pieces that are not the exercise (sampler, clock, driver, metrics)."""

from __future__ import annotations

import time

import pytest
import torch

from paged_helpers.serving import (
    BusyClock,
    EngineMetrics,
    EngineStalled,
    Sequence,
    Serving,
    sample_seed,
    sample_token,
)
from paged_helpers.workloads import Request


def test_greedy_is_argmax_and_sampling_depends_only_on_seed_and_step():
    logits = torch.randn(256, generator=torch.Generator().manual_seed(0))
    assert sample_token(logits, 0.0, seed=1, step=0) == int(logits.argmax())
    draws = [sample_token(logits, 1.0, seed=5, step=3) for _ in range(3)]
    assert len(set(draws)) == 1
    firsts = {sample_token(logits, 1.0, sample_seed(7, i), 0) for i in range(8)}
    assert len(firsts) > 1
    assert sample_seed(7, 0) != sample_seed(7, 1) != sample_seed(8, 0)


def test_sampler_names_bad_arguments():
    with pytest.raises(ValueError, match="temperature"):
        sample_token(torch.zeros(4), -1.0, 0, 0)
    with pytest.raises(ValueError, match=r"shape \[vocab\]"):
        sample_token(torch.zeros(2, 4), 1.0, 0, 0)
    with pytest.raises(ValueError, match="sample_index"):
        sample_seed(0, -1)


def test_sequence_pending_tokens_follow_num_cached():
    seq = Sequence("s", "r", [1, 2, 3], max_new_tokens=2)
    assert (seq.num_pending, seq.is_prefilling) == (3, True)
    seq.num_cached, seq.output = 3, [9]
    assert (seq.num_pending, seq.is_prefilling, seq.tokens) == (1, False, [1, 2, 3, 9])
    assert Sequence("s", "r", [1], 1) != Sequence("s", "r", [1], 1)  # identity, not value


def test_busy_clock_counts_only_time_inside():
    clock = BusyClock()
    with clock:
        time.sleep(0.01)
    outside = clock()
    time.sleep(0.02)
    assert clock() == outside >= 0.01
    with pytest.raises(RuntimeError, match="already running"), clock, clock:
        pass


class IdleEngine:
    """Accepts requests and never finishes them: what a livelocked engine looks like from outside."""

    def __init__(self):
        self.running, self.metrics, self.cache = [], EngineMetrics(), None
        self.queued = []

    def add_request(self, request_id, prompt, max_new_tokens, n=1, seed=0, temperature=0.0):
        self.queued.append(request_id)

    def has_unfinished(self):
        return bool(self.queued)

    def step(self):
        return {}


def test_serving_stops_a_stalled_engine(monkeypatch):
    monkeypatch.setattr("paged_helpers.serving.driver.kv_tokens_reserved", lambda cache: 0)
    monkeypatch.setattr("paged_helpers.serving.driver.kv_tokens_stored", lambda cache: 0)
    serving = Serving(IdleEngine(), [Request("r0", [1, 2], 2)], max_steps=5)
    with pytest.raises(EngineStalled, match="after 6 steps, 1 of 1 requests are still unfinished"):
        while not serving.done:
            serving.step()


def test_metrics_summary_from_events():
    metrics = EngineMetrics()
    seq = Sequence("s", "r", [1, 2, 3, 4], 2)
    metrics.record_arrival("r")
    metrics.record_admission(seq, reused_tokens=2)
    metrics.record_token(seq)
    metrics.record_preemption(seq)
    metrics.record_step(running=1, kv_tokens_reserved=8, kv_tokens_stored=5)
    summary = metrics.summary()
    assert summary["prefix_hit_rate"] == 0.5 and summary["preemptions"] == 1
    assert summary["peak_running"] == 1 and summary["peak_kv_tokens_reserved"] == 8
    assert summary["tokens_generated"] == 1 and summary["mean_time_to_first_token_s"] >= 0
