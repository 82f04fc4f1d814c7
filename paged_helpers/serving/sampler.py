"""Seeded sampling that survives batching, preemption and recomputation.

The random draw for a token depends only on (the sample's seed, how many tokens it has
already produced), never on a generator that advances as the engine runs. So a sample
that is preempted and recomputed draws the same tokens again, and a sample computed alone
draws the same tokens as inside any batch.
"""

from __future__ import annotations

import torch

_MASK63 = (1 << 63) - 1


def _mix(*values: int) -> int:
    """A deterministic 63-bit hash of integers (splitmix64 steps), for generator seeds."""
    state = 0x9E3779B97F4A7C15
    for value in values:
        state = (state ^ (value & _MASK63)) * 0xBF58476D1CE4E5B9 & ((1 << 64) - 1)
        state ^= state >> 31
    return state & _MASK63


def sample_seed(request_seed: int, sample_index: int) -> int:
    """The seed of sample ``sample_index`` of a request seeded ``request_seed``: distinct per sample."""
    if sample_index < 0:
        raise ValueError(f"sample_index must be >= 0, got {sample_index}")
    return _mix(request_seed, sample_index)


def sample_token(logits: torch.Tensor, temperature: float, seed: int, step: int) -> int:
    """One token from logits [vocab]: argmax when temperature is 0, else a seeded draw.

    ``step`` is the number of tokens this sample has already produced.
    """
    if logits.ndim != 1:
        raise ValueError(f"logits must have shape [vocab], got {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return int(torch.argmax(logits))
    probabilities = torch.softmax(logits.detach().float().cpu() / temperature, dim=-1)
    generator = torch.Generator().manual_seed(_mix(seed, step))
    return int(torch.multinomial(probabilities, 1, generator=generator))
