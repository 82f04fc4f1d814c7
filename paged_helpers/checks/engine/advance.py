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

This module holds the case (``Step``, of ``step_chunks.Chunk``) and its table (``VISIBLE_STEP``, ``ADVANCE_KINDS``);
the rules it compares with are in ``after_advance``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ..reading.calls import call_learner
from ..reading.ledger import ceil_div
from ..speaking.hidden import redraw_until
from . import engine_reads
from .after_advance import After, expect_chunk, expect_counted, expect_remembered, expect_returned
from .hand_built import BLOCK_SIZE, engine_for, place
from .step_chunks import KINDS, Chunk, draw_chunk

VOCAB = 256  # the logits' length (no model runs: any vocabulary will do)
EXTRA_CHUNKS = 3  # chunks every hidden step holds beyond one of each kind (fixed, not drawn: the most ever)


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
        chunks = tuple(draw_chunk(rng, kind, index) for index, kind in enumerate(kinds))
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
        hot = any(c.temperature and c.token(x) != int(torch.argmax(x)) for c, x in drawing)
        later = any(c.output and c.token(x) != c.token(x, step=0) for c, x in drawing)
        forked = [(c, x, index) for c, x in drawing if c.kind == "fork" for index in range(1, c.n)]
        forks = all(c.token(x, index, 0) != c.token(x, 0, 0) for c, x, index in forked)
        return hot and later and forks

    def run(self, classes) -> None:
        chunks = self.chunks
        scenario = self.description or "a step of " + ", ".join(
            f"{c.seq_id!r} ({c.kind}, {c.count} token(s))" for c in chunks
        )
        engine, placed, outputs = self.placed(classes, scenario)
        logits = self.logits()
        # Decoders first, then prompt chunks, as _plan orders them.
        order = [i for i, c in enumerate(chunks) if c.count == 1] + [i for i, c in enumerate(chunks) if c.count > 1]
        plan = [(placed[i], chunks[i].count) for i in order]
        tokens_before = engine_reads.metric(engine, "tokens_generated", scenario)
        finished = call_learner("_advance(plan, logits)", engine._advance, plan, logits, scenario=scenario)
        after = After(engine, placed, scenario)
        drawn, expected = 0, {}
        for chunk, seq, output in zip(chunks, placed, outputs, strict=True):
            drawn += expect_chunk(scenario, chunk, seq, output, logits[chunk.seq_id], after)
            if chunk.kind == "finish":
                expected[chunk.request_id] = [output + [chunk.token(logits[chunk.seq_id])]]
        expect_returned(scenario, finished, expected)
        expect_counted(scenario, engine, tokens_before, drawn)
        expect_remembered(scenario, chunks, placed, engine)

    def placed(self, classes, scenario: str) -> tuple:
        """An engine holding every chunk's sequence as the forward pass left it (the cache holds the
        chunk, ``num_cached`` does not count it yet): (engine, the sequences, their outputs before)."""
        chunks = self.chunks
        forks = sum(c.n - 1 for c in chunks if c.kind == "fork")
        blocks = sum(ceil_div(c.prompt + c.output + 1, BLOCK_SIZE) for c in chunks)
        engine, _, _ = engine_for(*classes, blocks + forks + 4, scenario)
        placed, outputs = [], []
        for index, chunk in enumerate(chunks):
            engine.request_seeds[chunk.request_id] = chunk.seed
            engine.finished_samples[chunk.request_id] = {}
            seq = chunk.sequence(1 + 100 * index)
            outputs.append(list(seq.output))
            seq = place(engine, seq, chunk.cached + chunk.count)
            seq.num_cached = chunk.cached  # the forward pass wrote the chunk; _advance counts it
            placed.append(seq)
        return engine, placed, outputs


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
