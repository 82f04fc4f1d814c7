"""Engine methods of another correct design than the instructor's, shared by the stage and whole-engine
tests: a check must prove them as it proves the notebook's own."""

from __future__ import annotations

from paged_helpers.serving import sample_token


def reserve_evicting_everything(self, plan):
    """Another correct design: on MemoryError, drop every cached entry nobody uses at once, then preempt
    the newest only if that freed nothing; reserves chunk by chunk through a queue of work."""
    pending = list(plan)
    while pending:
        seq, count = pending[0]
        if seq not in self.running:
            pending.pop(0)
            continue
        try:
            self.cache.reserve(seq.seq_id, count)
            pending.pop(0)
        except MemoryError:
            before = self.cache.allocator.num_free
            self.prefix_cache.evict(len(self.cache.allocator.refs))
            if self.cache.allocator.num_free == before:
                self._preempt(self.running[-1])
    return [(seq, count) for seq, count in plan if seq in self.running]


def advance_in_two_passes(self, plan, logits):
    """Another correct _advance: the same rules in another order (forks made in a first pass, tokens
    drawn in a second, finishes last)."""
    finished, drawing = {}, []
    for seq, count in plan:
        seq.num_cached += count
        if count > 1:
            self.prefix_cache.remember(seq.seq_id, list(seq.prompt + seq.output)[: seq.num_cached])
        if seq.num_pending == 0:
            forked = self._fork_samples(seq) if seq.n > 1 and not seq.forked else []
            drawing += [(seq.seq_id, sample) for sample in [seq, *forked]]
    for parent, sample in drawing:
        token = sample_token(logits[parent], sample.temperature, sample.seed, len(sample.output))
        sample.output = sample.output + [token]
        self.metrics.record_token(sample)
    for _, sample in drawing:
        if sample.is_finished:
            self._finish(sample, finished)
    return finished
