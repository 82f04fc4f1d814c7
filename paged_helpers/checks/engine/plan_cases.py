"""The plan stage's case: ``_plan`` on a running batch of decoders, prefills and readmitted sequences.

The watched ``_plan`` applies the rules (``rules.expect_plan``: every decoder one token, prefill chunks
oldest first, each within the chunk size and the step's budget); ``Batch.draw`` makes a hidden batch on
which each classic planning mistake plans otherwise.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from ...serving import Sequence
from ..reading.calls import call_learner
from ..reading.learner_code import transfer
from ..speaking.hidden import redraw_until
from .hand_built import decoding, engine_for, prefilling

BATCH_SEQUENCES = 8  # sequences in every hidden batch (fixed, not drawn: the most a batch ever held)


@dataclass(frozen=True)
class Batch:
    """_plan on a running batch: (kind, prompt, cached or output) per sequence, oldest first.

    Kinds: "decode" (prompt and ``extra`` output tokens, all but the last cached), "prefill" (``extra``
    prompt tokens cached), "back" (readmitted after preemption: ``extra`` output tokens, nothing cached).
    Planning allocates nothing, so any batch is a fair one.
    """

    description: str
    sequences: tuple[tuple[str, int, int], ...]
    chunk_size: int
    max_step_tokens: int

    @classmethod
    def draw(cls, rng: random.Random) -> Batch:
        """A batch of ``BATCH_SEQUENCES`` holding every kind of sequence, on which each classic planning
        mistake plans otherwise (``telling``)."""
        every_kind = {"decode", "prefill", "back"}
        return redraw_until(
            functools.partial(cls._draw, rng),
            lambda batch: batch.telling() and {kind for kind, _, _ in batch.sequences} == every_kind,
        )

    @classmethod
    def _draw(cls, rng: random.Random) -> Batch:
        sequences = []
        for _ in range(BATCH_SEQUENCES):
            kind = rng.choice(("decode", "decode", "prefill", "prefill", "back"))
            prompt = rng.randint(2, 40)
            extra = {"decode": rng.randint(1, 6), "prefill": rng.randint(0, prompt - 2), "back": rng.randint(1, 6)}
            sequences.append((kind, prompt, extra[kind]))
        return cls("a running batch", tuple(sequences), rng.randint(1, 16), rng.randint(1, 48))

    def pending(self) -> list[int]:
        return [
            1 if kind == "decode" else prompt - extra if kind == "prefill" else prompt + extra
            for kind, prompt, extra in self.sequences
        ]

    def counts(self, oldest_first=True, chunks=True, budget=True, decoders_first=True) -> list[int]:
        """Tokens per sequence as the rules plan them, or with the named rule left out."""
        pending, counts = self.pending(), [0] * len(self.sequences)
        left = self.max_step_tokens if budget else 10**9
        if decoders_first:
            for i, p in enumerate(pending):
                if p == 1:
                    counts[i], left = 1, left - 1
        order = range(len(pending)) if oldest_first else reversed(range(len(pending)))
        for i in order:
            if pending[i] > 1 and left > 0:
                counts[i] = min(self.chunk_size if chunks else 10**9, pending[i], left)
                left -= counts[i]
        if not decoders_first:
            for i, p in enumerate(pending):
                if p == 1 and left > 0:
                    counts[i], left = 1, left - 1
        return counts

    def telling(self) -> bool:
        """Newest-first, no chunk size, no budget, prefills before decoders: each plans otherwise here."""
        right = self.counts()
        wrong = [dict(oldest_first=False), dict(chunks=False), dict(budget=False), dict(decoders_first=False)]
        return all(self.counts(**mistake) != right for mistake in wrong)

    def running(self) -> list[Sequence]:
        made = []
        for index, (kind, prompt, extra) in enumerate(self.sequences):
            sid, start = f"{kind[0]}{index}", 1 + 64 * index
            if kind == "decode":
                made.append(decoding(sid, prompt, extra, start=start))
            elif kind == "prefill":
                made.append(prefilling(sid, prompt, cached=extra, start=start))
            else:
                made.append(prefilling(sid, prompt, output=extra, start=start))
        return made

    def run(self, classes) -> None:
        scenario = f"{self.description}; chunks of {self.chunk_size}, {self.max_step_tokens} tokens a step"
        engine, _, _ = engine_for(
            *classes, 8, scenario, chunk_size=self.chunk_size, max_step_tokens=self.max_step_tokens
        )
        engine.running.extend(transfer(engine, seq) for seq in self.running())
        call_learner("_plan()", engine._plan, scenario=scenario)  # the watched _plan applies the rules
