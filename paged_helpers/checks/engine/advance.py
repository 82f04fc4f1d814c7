"""check_engine_advance: notebook 08's ``_advance``, the step after the forward pass, on its own.

The check places sequences in a small pool as if the forward pass had just computed their
chunks (the cache holds ``num_cached + count`` tokens of each, ``num_cached`` not yet moved),
hands the learner's ``_advance(plan, logits)`` a plan and logits of its own choosing, and compares
what it did with what the notebook's rules make of that state:

  count          every chunk's count added to ``num_cached``
  no sample mid-prompt   a chunk that leaves tokens pending samples nothing
  the token      a sequence whose pending tokens are all computed draws
                 ``sample_token(logits[seq_id], seq.temperature, seq.seed, len(seq.output))``
  fork first     when a request of ``n > 1`` completes its prompt, ``_fork_samples`` makes the
                 n - 1 samples it returns, and each draws its first token from the same logits
                 with its own seed; a request already forked is not forked again
  record_token   the metrics count one token per token drawn
  finish         a sample that reaches ``max_new_tokens`` goes through ``_finish`` (freed, out of
                 ``running``), and ``_advance`` returns what ``_finish`` reported
  remember       the full blocks of every prompt chunk (count > 1) are published with
                 ``prefix_cache.remember``: a later prompt finds them

No model runs: the logits are seeded random vectors. The learner's ``_fork_samples`` and
``_finish`` are called by their ``_advance`` (``check_engine_fork`` checks them on their own).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ...serving import Sequence, sample_seed, sample_token
from ..reading.calls import call_learner
from ..reading.ledger import ceil_div
from ..reading.strict import learner_int
from ..registry import check
from ..speaking.failure import fail
from ..speaking.hidden import redraw_until
from ..story import Story, drawn, ran
from . import rules
from .stages import BLOCK_SIZE, NOTEBOOK, PARTNERS, _engine, _place, _tokens

__all__ = ["check_engine_advance"]

VOCAB = 256  # the logits' length (no model runs: any vocabulary will do)
KINDS = ("mid", "last", "fork", "decode", "finish", "forked", "back")
EXTRA_CHUNKS = 3  # chunks every hidden step holds beyond one of each kind (fixed, not drawn: the most ever)
FORK_SAMPLES = 4  # samples of every hidden step's "fork" requests (fixed, not drawn: the most they ever had)


@dataclass(frozen=True)
class Chunk:
    """One planned sequence, its chunk just computed.

    ``kind``: "mid" (a prompt chunk that leaves tokens pending), "last" (a prompt's last chunk),
    "fork" (a prompt's last chunk, request of ``n`` samples), "decode" (one token), "finish" (one
    token, the sample's last), "forked" (one token of a sample of a request forked earlier), "back"
    (readmitted after preemption: the rest of prompt + output recomputed). ``extra`` is the tokens
    cached before the chunk ("mid", "last", "fork", "back") or the output so far ("decode", "finish",
    "forked", and "back", whose output is ``output``).
    """

    seq_id: str
    kind: str
    prompt: int
    cached: int
    output: int
    count: int
    n: int
    seed: int
    temperature: float
    max_new: int

    @property
    def samples(self) -> bool:
        """Does this chunk leave nothing pending (so the sequence draws a token)?"""
        return self.kind != "mid"

    def sequence(self, start: int) -> Sequence:
        """Sample 0 of its own request (a "forked" one has siblings elsewhere: forked is True)."""
        return Sequence(
            self.seq_id,
            self.request_id,
            _tokens(start, self.prompt),
            self.max_new,
            n=self.n,
            seed=sample_seed(self.seed, 0),
            temperature=self.temperature,
            output=_tokens(900 + start, self.output),
            forked=self.kind == "forked",
        )

    @property
    def request_id(self) -> str:
        return self.seq_id


def _chunk(rng: random.Random, kind: str, index: int) -> Chunk:
    """One chunk of ``kind``, sized from ``rng``."""
    sid = f"{kind}{index}"
    # Sampling at a temperature where a draw of the wrong step, seed or sample shows.
    hot = kind in ("fork", "decode", "back", "forked")
    seed, temperature = rng.getrandbits(31), rng.choice((0.7, 1.0, 1.3) if hot else (0.0, 0.7, 1.0, 1.3))
    prompt = rng.randint(2, 24)
    if kind in ("mid", "last", "fork"):
        cached = rng.randint(0, prompt - 2)
        count = rng.randint(1, prompt - cached - 1) if kind == "mid" else prompt - cached
        n = FORK_SAMPLES if kind == "fork" else 1
        return Chunk(sid, kind, prompt, cached, 0, count, n, seed, temperature, rng.randint(2, 8))
    output = rng.randint(1, 6)
    if kind == "back":
        cached = rng.randint(0, prompt + output - 2)
        return Chunk(sid, kind, prompt, cached, output, prompt + output - cached, 1, seed, temperature, output + 3)
    max_new = output + 1 if kind == "finish" else output + rng.randint(2, 6)
    n = 2 if kind == "forked" else 1
    return Chunk(sid, kind, prompt, prompt + output - 1, output, 1, n, seed, temperature, max_new)


@dataclass(frozen=True)
class Step:
    """A step's chunks (running order, oldest first) and the seed of its logits."""

    description: str
    chunks: tuple[Chunk, ...]
    logits_seed: int

    @classmethod
    def draw(cls, rng: random.Random) -> Step:
        """Every kind of chunk at least once and ``EXTRA_CHUNKS`` more, in a drawn order, with logits on
        which each classic sampling mistake draws another token (``telling``)."""
        kinds = [*KINDS, *(rng.choice(KINDS) for _ in range(EXTRA_CHUNKS))]
        rng.shuffle(kinds)
        chunks = tuple(_chunk(rng, kind, index) for index, kind in enumerate(kinds))
        return redraw_until(lambda: cls("", chunks, rng.getrandbits(31)), cls.telling)

    def logits(self) -> dict[str, torch.Tensor]:
        """The step's logits, one seeded random vector per chunk."""
        generator = torch.Generator().manual_seed(self.logits_seed)
        return {chunk.seq_id: torch.randn(VOCAB, generator=generator) for chunk in self.chunks}

    def telling(self) -> bool:
        """Some drawing chunk whose token is not the argmax (a draw that ignores the temperature shows),
        some chunk past step 0 whose token is not step 0's (a draw at step 0 shows), and in every fork,
        every sample's first token differs from the parent's (a sample drawing with the parent's seed
        shows)."""
        logits = self.logits()
        drawing = [(chunk, logits[chunk.seq_id]) for chunk in self.chunks if chunk.samples]
        hot = any(c.temperature and _token(c, x) != int(torch.argmax(x)) for c, x in drawing)
        later = any(c.output and _token(c, x) != _token(c, x, step=0) for c, x in drawing)
        forked = [(c, x, index) for c, x in drawing if c.kind == "fork" for index in range(1, c.n)]
        forks = all(_token(c, x, index, 0) != _token(c, x, 0, 0) for c, x, index in forked)
        return hot and later and forks

    def run(self, classes) -> None:
        chunks = self.chunks
        scenario = self.description or "a step of " + ", ".join(
            f"{c.seq_id!r} ({c.kind}, {c.count} token(s))" for c in chunks
        )
        forks = sum(c.n - 1 for c in chunks if c.kind == "fork")
        blocks = sum(ceil_div(c.prompt + c.output + 1, BLOCK_SIZE) for c in chunks)
        engine, cache, prefix = _engine(*classes, blocks + forks + 4, scenario)
        placed, outputs = [], []
        for index, chunk in enumerate(chunks):
            engine.request_seeds[chunk.request_id] = chunk.seed
            engine.finished_samples[chunk.request_id] = {}
            seq = chunk.sequence(1 + 100 * index)
            outputs.append(list(seq.output))
            seq = _place(engine, seq, chunk.cached + chunk.count)
            seq.num_cached = chunk.cached  # the forward pass wrote the chunk; _advance counts it
            placed.append(seq)
        logits = self.logits()
        # Decoders first, then prompt chunks, as _plan orders them.
        order = [i for i, c in enumerate(chunks) if c.count == 1] + [i for i, c in enumerate(chunks) if c.count > 1]
        plan = [(placed[i], chunks[i].count) for i in order]
        tokens_before = rules.metric(engine, "tokens_generated", scenario)
        finished = call_learner("_advance(plan, logits)", engine._advance, plan, logits, scenario=scenario)
        after = _After(engine, placed, scenario)
        drawn, expected = 0, {}
        for chunk, seq, output in zip(chunks, placed, outputs, strict=True):
            drawn += _expect_chunk(scenario, chunk, seq, output, logits[chunk.seq_id], after)
            if chunk.kind == "finish":
                expected[chunk.request_id] = [output + [_token(chunk, logits[chunk.seq_id])]]
        reported = rules.step_outputs(finished if finished is not None else {}, scenario)
        if reported != expected:
            fail(
                f"{scenario}: what _advance returned",
                f"{expected}: the requests whose (only) sample reached max_new_tokens in this step",
                reported,
                "when a sample's output reaches max_new_tokens, call self._finish(sample, finished) (it frees the "
                "sample and, once all n samples are in, reports the request), and return `finished`",
            )
        counted = rules.metric(engine, "tokens_generated", scenario) - tokens_before
        if counted != drawn:
            fail(
                f"{scenario}: metrics",
                f"metrics.tokens_generated up by {drawn}, one for each token drawn in this step (forked samples "
                "included)",
                f"up by {counted}",
                "call self.metrics.record_token(sample) once for every token appended to a sample's output",
            )
        _expect_remembered(scenario, chunks, placed, engine)


def _token(chunk: Chunk, logits: torch.Tensor, index: int | None = None, step: int | None = None) -> int:
    """The token sample ``index`` of ``chunk``'s request draws from ``logits`` at ``step``."""
    index = 0 if index is None else index
    step = chunk.output if step is None else step
    return sample_token(logits, chunk.temperature, sample_seed(chunk.seed, index), step)


def _why(chunk: Chunk, logits: torch.Tensor, got: int, index: int, step: int) -> str:
    """The mistake that draws ``got`` instead of the right token, when it is a classic one."""
    if chunk.temperature and got == int(torch.argmax(logits)) != _token(chunk, logits, index, step):
        return " (that is the argmax: the sample's temperature was not used)"
    if step and got == _token(chunk, logits, index, 0):
        return " (that is the token of step 0: pass len(sample.output), the tokens this sample has drawn)"
    if index and chunk.temperature and got == _token(chunk, logits, 0, step):
        return " (that is the parent's draw: each sample draws with its own seed, sample.seed)"
    return ""


class _After:
    """The engine after ``_advance``: running, and the samples it made."""

    def __init__(self, engine, placed, scenario: str) -> None:
        self.engine = engine
        self.running = rules.queue(engine, "running", scenario)
        self.new = [seq for seq in self.running if not any(seq is p for p in placed)]
        self.tables = rules.tables(engine.cache, scenario)
        self.scenario = scenario

    def forked_from(self, chunk: Chunk) -> list:
        """The new samples of ``chunk``'s request, by sample index."""
        read = [rules.fields(seq, ["request_id", "sample_index"], self.scenario) for seq in self.new]
        mine = [
            (f["sample_index"], seq)
            for f, seq in zip(read, self.new, strict=True)
            if f["request_id"] == chunk.request_id
        ]
        return [seq for _, seq in sorted(mine, key=lambda pair: pair[0] if type(pair[0]) is int else -1)]

    def running_has(self, seq) -> bool:
        return any(seq is other for other in self.running)


def _expect_chunk(scenario: str, chunk: Chunk, seq, before: list[int], logits, after: _After) -> int:
    """The rules for one planned sequence; returns how many tokens it (and the samples forked from it) drew."""
    sid = chunk.seq_id
    cached = rules.num_cached(seq, scenario)
    if cached != chunk.cached + chunk.count:
        fail(
            f"{scenario}: num_cached of {sid!r} after _advance",
            f"{chunk.cached + chunk.count}: {chunk.cached} before, plus the chunk of {chunk.count} the forward pass "
            "computed",
            cached,
            "add each planned chunk's count to seq.num_cached first, for every (seq, count) of the plan, decoders "
            "included: that is what moves a sequence from prefill to decode",
        )
    output = rules.output(seq, scenario)
    if not chunk.samples:
        if output != before:
            fail(
                f"{scenario}: {sid!r}, a chunk in the middle of its prompt ({chunk.cached + chunk.count} of "
                f"{chunk.prompt} tokens computed)",
                f"no token drawn: output still {before}",
                f"output {output}",
                "sample only when a sequence has no pending token left (seq.num_pending == 0 after counting the "
                "chunk): the logits of a chunk inside the prompt predict a prompt token, not the answer",
            )
        return 0
    finished = chunk.kind == "finish"
    right = before + [_token(chunk, logits)]
    if output != right:
        got = output[len(before)] if len(output) == len(before) + 1 and output[:-1] == before else None
        why = "" if got is None else _why(chunk, logits, got, 0, chunk.output)
        fail(
            f"{scenario}: the token {sid!r} draws ({chunk.kind}: its pending tokens are all computed now)",
            f"output {right}: sample_token(logits[{sid!r}], {chunk.temperature}, seq.seed, {chunk.output})",
            f"output {output}{why}",
            "for every sequence with nothing pending after the chunk, append sample_token(logits[seq.seq_id], "
            "sample.temperature, sample.seed, len(sample.output)) to its output",
        )
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
    samples = after.forked_from(chunk)
    if chunk.kind != "fork":
        if samples:
            fail(
                f"{scenario}: {sid!r} ({chunk.kind}, n={chunk.n}, forked={chunk.kind == 'forked'})",
                "no new sample for its request",
                f"{len(samples)} new sample(s) in running",
                "fork only when the prompt of a request with n > 1 completes and seq.forked is still False: a "
                "request is forked once",
            )
        return 1
    return 1 + _expect_forked(scenario, chunk, logits, samples)


def _expect_forked(scenario: str, chunk: Chunk, logits, samples) -> int:
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
        output = rules.output(sample, scenario)
        right = [_token(chunk, logits, index, 0)]
        if output != right:
            why = _why(chunk, logits, output[0], index, 0) if len(output) == 1 else ""
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


def _expect_remembered(scenario: str, chunks: tuple[Chunk, ...], placed, engine) -> None:
    """Every prompt chunk's full blocks are in the prefix cache: a probe that opens with them reuses them."""
    cache, prefix = engine.cache, engine.prefix_cache
    for chunk, seq in zip(chunks, placed, strict=True):
        if chunk.count < 2:
            continue
        prompt = rules.fields(seq, ["prompt"], scenario)["prompt"]
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
                f"{scenario}: the prefix cache after {chunk.seq_id!r}'s chunk of {chunk.count} tokens",
                f"its first {covered} prompt tokens ({covered // BLOCK_SIZE} full block(s)) found by a later prompt",
                f"attach of a prompt opening with them reused {reused}",
                "after counting a prompt chunk (count > 1), publish its full blocks: "
                "self.prefix_cache.remember(seq.seq_id, seq.tokens[:seq.num_cached])",
            )


VISIBLE_STEP = Step(
    "a step of 'mid0' (8 of its 14 prompt tokens), 'last1' (the last 2 of 10, greedy), 'decode2' (temperature 1), "
    "'finish3' (its last token), 'fork4' (the last 5 of 9, n=3), 'forked5' (forked earlier) and "
    "'back6' (readmitted: the last 5 of prompt 6 + output 3)",
    (
        Chunk("mid0", "mid", 14, 0, 0, 8, 1, 7, 1.0, 4),
        Chunk("last1", "last", 10, 8, 0, 2, 1, 8, 0.0, 4),
        Chunk("decode2", "decode", 5, 6, 2, 1, 1, 9, 1.0, 6),
        Chunk("finish3", "finish", 6, 8, 3, 1, 1, 10, 0.5, 4),
        Chunk("fork4", "fork", 9, 4, 0, 5, 3, 11, 1.0, 4),
        Chunk("forked5", "forked", 7, 7, 1, 1, 2, 12, 1.0, 5),
        Chunk("back6", "back", 6, 4, 3, 5, 1, 13, 1.0, 6),
    ),
    2026,
)
ADVANCE_KINDS = {
    "a step holding every kind of chunk, drawn from the grader's seed": Step,
    "a second step, drawn the same way": Step,
}


@check(notebook=NOTEBOOK, builds="ContinuousBatchingEngine", partners=PARTNERS)
def check_engine_advance(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False):
    """_advance of the learner's engine after a forward pass: counts, tokens, forks, finishes, published blocks.

    ``hidden=True`` (the hidden tests): both ``ADVANCE_KINDS`` steps, each of every kind of chunk and
    ``EXTRA_CHUNKS`` more, drawn from ``seed`` (``Step.draw``), messages without their numbers.
    """
    kinds = ", ".join(chunk.kind for chunk in VISIBLE_STEP.chunks)
    story = Story(
        visible=(ran(VISIBLE_STEP),),
        hidden={description: drawn(kind.draw) for description, kind in ADVANCE_KINDS.items()},
        told=f"one step of {len(VISIBLE_STEP.chunks)} chunks ({kinds})",
    )
    return story.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)
