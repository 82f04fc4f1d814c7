"""What ``_advance`` must have done, compared with the state the advance check built (``advance.Step``).

Each function holds one rule of the module docstring of ``advance`` (count, no sample mid-prompt, the
token, fork first, record_token, finish, remember) and fails naming it; ``After`` is the engine as
``_advance`` left it, read once. None changes the engine but ``expect_remembered``, whose probes attach
and free a sequence of their own in the learner's prefix cache.
"""

from __future__ import annotations

from ..reading.calls import call_learner
from ..reading.strict import learner_int
from ..speaking.failure import fail
from . import engine_reads
from .diagnosis import why_token
from .hand_built import BLOCK_SIZE
from .step_chunks import Chunk


class After:
    """The engine after ``_advance``: running, and the samples it made."""

    def __init__(self, engine, placed, scenario: str) -> None:
        self.engine = engine
        self.running = engine_reads.queue(engine, "running", scenario)
        self.new = [seq for seq in self.running if not any(seq is p for p in placed)]
        self.tables = engine_reads.tables(engine.cache, scenario)
        self.scenario = scenario

    def forked_from(self, chunk: Chunk) -> list:
        """The new samples of ``chunk``'s request, by sample index."""
        read = [engine_reads.fields(seq, ["request_id", "sample_index"], self.scenario) for seq in self.new]
        mine = [
            (f["sample_index"], seq)
            for f, seq in zip(read, self.new, strict=True)
            if f["request_id"] == chunk.request_id
        ]
        return [seq for _, seq in sorted(mine, key=lambda pair: pair[0] if type(pair[0]) is int else -1)]

    def running_has(self, seq) -> bool:
        return any(seq is other for other in self.running)


def expect_chunk(scenario: str, chunk: Chunk, seq, before: list[int], logits, after: After) -> int:
    """The rules for one planned sequence; returns how many tokens it (and the samples forked from it) drew."""
    _expect_counted_chunk(scenario, chunk, seq)
    output = engine_reads.output(seq, scenario)
    if not chunk.samples:
        _expect_nothing_drawn(scenario, chunk, output, before)
        return 0
    _expect_token(scenario, chunk, output, before, logits)
    _expect_finished_or_running(scenario, chunk, seq, after)
    samples = after.forked_from(chunk)
    if chunk.kind != "fork":
        if samples:
            fail(
                f"{scenario}: {chunk.seq_id!r} ({chunk.kind}, n={chunk.n}, forked={chunk.kind == 'forked'})",
                "no new sample for its request",
                f"{len(samples)} new sample(s) in running",
                "fork only when the prompt of a request with n > 1 completes and seq.forked is still False: a "
                "request is forked once",
            )
        return 1
    return 1 + expect_forked(scenario, chunk, logits, samples)


def _expect_counted_chunk(scenario: str, chunk: Chunk, seq) -> None:
    """count: the chunk's count added to ``num_cached``."""
    cached = engine_reads.num_cached(seq, scenario)
    if cached != chunk.cached + chunk.count:
        fail(
            f"{scenario}: num_cached of {chunk.seq_id!r} after _advance",
            f"{chunk.cached + chunk.count}: {chunk.cached} before, plus the chunk of {chunk.count} the forward pass "
            "computed",
            cached,
            "add each planned chunk's count to seq.num_cached first, for every (seq, count) of the plan, decoders "
            "included: that is what moves a sequence from prefill to decode",
        )


def _expect_nothing_drawn(scenario: str, chunk: Chunk, output: list[int], before: list[int]) -> None:
    """no sample mid-prompt: a chunk that leaves tokens pending draws nothing."""
    if output != before:
        fail(
            f"{scenario}: {chunk.seq_id!r}, a chunk in the middle of its prompt ({chunk.cached + chunk.count} of "
            f"{chunk.prompt} tokens computed)",
            f"no token drawn: output still {before}",
            f"output {output}",
            "sample only when a sequence has no pending token left (seq.num_pending == 0 after counting the "
            "chunk): the logits of a chunk inside the prompt predict a prompt token, not the answer",
        )


def _expect_token(scenario: str, chunk: Chunk, output: list[int], before: list[int], logits) -> None:
    """the token: a sequence with nothing pending draws one, with its temperature, seed and step."""
    sid = chunk.seq_id
    right = before + [chunk.token(logits)]
    if output != right:
        got = output[len(before)] if len(output) == len(before) + 1 and output[:-1] == before else None
        why = "" if got is None else why_token(chunk, logits, got, 0, chunk.output)
        fail(
            f"{scenario}: the token {sid!r} draws ({chunk.kind}: its pending tokens are all computed now)",
            f"output {right}: sample_token(logits[{sid!r}], {chunk.temperature}, seq.seed, {chunk.output})",
            f"output {output}{why}",
            "for every sequence with nothing pending after the chunk, append sample_token(logits[seq.seq_id], "
            "sample.temperature, sample.seed, len(sample.output)) to its output",
        )


def _expect_finished_or_running(scenario: str, chunk: Chunk, seq, after: After) -> None:
    """finish: a sample at its max_new_tokens left running and the cache; any other is still running."""
    sid = chunk.seq_id
    finished = chunk.kind == "finish"
    if finished and (after.running_has(seq) or sid in after.tables):
        fail(
            f"{scenario}: {sid!r} reached max_new_tokens ({chunk.max_new})",
            "finished: out of `running` and freed in the cache (through _finish)",
            f"in running: {after.running_has(seq)}, in the cache: {sid in after.tables}",
            "after appending a token, if sample.is_finished: self._finish(sample, finished)",
        )
    if not finished and not after.running_has(seq):
        fail(
            f"{scenario}: {sid!r} after _advance",
            "still running: it has not reached max_new_tokens",
            "no longer in `running`",
            "_advance removes only samples that finished (through _finish)",
        )


def expect_forked(scenario: str, chunk: Chunk, logits, samples) -> int:
    """The n - 1 samples forked from ``chunk``: each drew its first token from the parent's logits."""
    sid, n = chunk.seq_id, chunk.n
    if len(samples) != n - 1:
        fail(
            f"{scenario}: {sid!r} completed its prompt, a request of n={n}",
            f"{n - 1} new samples in running (self._fork_samples(seq), called by _advance)",
            f"{len(samples)}",
            "when the prompt of a request with n > 1 completes (nothing pending, not forked yet), call "
            "self._fork_samples(seq) before sampling: it returns the new samples",
        )
    for index, sample in enumerate(samples, start=1):
        output = engine_reads.output(sample, scenario)
        right = [chunk.token(logits, index, 0)]
        if output != right:
            why = why_token(chunk, logits, output[0], index, 0) if len(output) == 1 else ""
            fail(
                f"{scenario}: sample {index} of {sid!r}, forked in this step",
                f"output {right}: its first token, drawn from the parent's logits (logits[{sid!r}]) with its own "
                f"seed sample_seed(request seed, {index})",
                f"output {output}{why}",
                "fork first, then draw for the parent and for every sample _fork_samples returned, all from the "
                "parent's logits (the samples share the prompt, so its last logits are theirs too), each with "
                "its own seed: for sample in [seq] + self._fork_samples(seq): ...",
            )
    return n - 1


def expect_remembered(scenario: str, chunks: tuple[Chunk, ...], placed, engine) -> None:
    """Every prompt chunk's full blocks are in the prefix cache: a probe that opens with them reuses them."""
    cache, prefix = engine.cache, engine.prefix_cache
    for chunk, seq in zip(chunks, placed, strict=True):
        if chunk.count < 2:
            continue
        prompt = engine_reads.fields(seq, ["prompt"], scenario)["prompt"]
        covered = min(chunk.cached + chunk.count, chunk.prompt) // BLOCK_SIZE * BLOCK_SIZE
        if not covered:
            continue
        probe = f"probe-{chunk.seq_id}"
        reused = call_learner(
            "prefix_cache.attach(probe, ...)", prefix.attach, probe, prompt[:covered] + [-1], scenario=scenario
        )
        reused = learner_int(reused, "what prefix_cache.attach returned", scenario)
        call_learner("cache.free(probe)", cache.free, probe, scenario=scenario)
        if reused != covered:
            fail(
                f"{scenario}: the prefix cache after the chunk of {chunk.count} tokens of {chunk.seq_id!r}",
                f"its first {covered} prompt tokens ({covered // BLOCK_SIZE} full block(s)) found by a later prompt",
                f"attach of a prompt opening with them reused {reused}",
                "after counting a prompt chunk (count > 1), publish its full blocks: "
                "self.prefix_cache.remember(seq.seq_id, seq.tokens[:seq.num_cached])",
            )


def expect_returned(scenario: str, finished, expected: dict) -> None:
    """finish: ``_advance`` returns what ``_finish`` reported, the requests whose samples all finished."""
    reported = engine_reads.step_outputs(finished if finished is not None else {}, scenario)
    if reported != expected:
        fail(
            f"{scenario}: what _advance returned",
            f"{expected}: the requests whose (only) sample reached max_new_tokens in this step",
            reported,
            "when a sample's output reaches max_new_tokens, call self._finish(sample, finished) (it frees the "
            "sample and, once all n samples are in, reports the request), and return `finished`",
        )


def expect_counted(scenario: str, engine, tokens_before: int, drawn: int) -> None:
    """record_token: the metrics count one token for each token drawn."""
    counted = engine_reads.metric(engine, "tokens_generated", scenario) - tokens_before
    if counted != drawn:
        fail(
            f"{scenario}: metrics",
            f"metrics.tokens_generated up by {drawn}, one for each token drawn in this step (forked samples included)",
            f"up by {counted}",
            "call self.metrics.record_token(sample) once for every token appended to a sample's output",
        )
