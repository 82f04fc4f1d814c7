"""The chunks of the advance check's step (``advance.Step``): one planned sequence each, just computed.

A ``Chunk`` is one of seven kinds (``KINDS``) of what a forward pass leaves for ``_advance``: a prompt
chunk in the middle, a prompt's last chunk (of a request of one sample, or of ``FORK_SAMPLES``), one
decoded token, a sample's last token, a token of a sample forked earlier, and a readmitted sequence's
recomputation. ``Chunk.token`` is the token its sample draws, as the notebook's ``sample_token`` does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from ...serving import Sequence, sample_seed, sample_token
from .hand_built import token_range

KINDS = ("mid", "last", "fork", "decode", "finish", "forked", "back")
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
            token_range(start, self.prompt),
            self.max_new,
            n=self.n,
            seed=sample_seed(self.seed, 0),
            temperature=self.temperature,
            output=token_range(900 + start, self.output),
            forked=self.kind == "forked",
        )

    @property
    def request_id(self) -> str:
        return self.seq_id

    def token(self, logits: torch.Tensor, index: int | None = None, step: int | None = None) -> int:
        """The token sample ``index`` (default 0) of this chunk's request draws from ``logits`` at ``step``
        (default: the step after its output so far)."""
        index = 0 if index is None else index
        step = self.output if step is None else step
        return sample_token(logits, self.temperature, sample_seed(self.seed, index), step)


def draw_chunk(rng: random.Random, kind: str, index: int) -> Chunk:
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
