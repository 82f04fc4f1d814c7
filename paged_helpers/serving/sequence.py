"""The state of one sequence in a serving engine, owned by the engine that admitted it.

A request asks for ``n`` samples of ``max_new_tokens`` tokens after ``prompt``. The engine
keeps one ``Sequence`` per sample (for n > 1 the samples appear when the prompt's prefill
completes and the first sequence is forked).

Invariants:
  * ``tokens`` is ``prompt + output``: everything known about the sequence so far.
  * ``num_cached`` counts the leading tokens whose keys and values are in the cache;
    ``tokens[num_cached:]`` still have to run through the model before the next token can
    be sampled. A running sequence in decode has exactly one such token (its last sample).
  * Preemption frees the sequence's blocks and sets ``num_cached`` to 0 but keeps
    ``output``: when readmitted, prompt and output are recomputed (chunked like a prompt),
    and sampling continues from where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class Sequence:
    """One sample of one request; ``seq_id`` is its key in the KV cache.

    Compared by identity (``eq=False``): two samples with equal tokens are still two sequences.
    """

    seq_id: str
    request_id: str
    prompt: list[int] = field(repr=False)
    max_new_tokens: int
    n: int = 1  # samples the request wants; forks happen once, when the prompt's prefill completes
    sample_index: int = 0
    seed: int = 0  # this sample's own seed (see sampler.sample_seed)
    temperature: float = 0.0  # 0 is greedy
    output: list[int] = field(default_factory=list)
    num_cached: int = 0
    forked: bool = False  # True once the n - 1 sibling samples exist

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def num_pending(self) -> int:
        """Tokens to run through the model before the next token can be sampled."""
        return len(self.prompt) + len(self.output) - self.num_cached

    @property
    def is_prefilling(self) -> bool:
        """More than one token to run: a prompt (or a recomputation after preemption)."""
        return self.num_pending > 1

    @property
    def is_finished(self) -> bool:
        return len(self.output) >= self.max_new_tokens

    @property
    def max_length(self) -> int:
        """The most tokens this sequence will ever hold in the cache."""
        return len(self.prompt) + self.max_new_tokens
