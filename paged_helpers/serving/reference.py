"""A request run alone: what every batched, preempted or prefix-cached run must reproduce."""

from __future__ import annotations

import torch

from ..baselines import StaticKVCache
from .sampler import sample_token


@torch.no_grad()
def solo_run(
    model, prompt: list[int], max_new_tokens: int, temperature: float = 0.0, seed: int = 0
) -> list[int]:
    """Prefill the whole prompt in one pass, then decode one token at a time, batch of one.

    ``seed`` is the sample's own seed (``sample_seed(request_seed, i)`` for sample i).
    """
    config = model.config
    cache = StaticKVCache(
        config.num_hidden_layers,
        1,
        len(prompt) + max_new_tokens,
        config.num_key_value_heads,
        config.head_dim,
        device=model.device,
        dtype=model.dtype,
    )
    cache.create("solo")
    cache.set_batch(["solo"])
    tokens = torch.tensor([prompt], device=model.device)  # [1, T]
    positions = torch.arange(len(prompt), device=model.device)[None]  # [1, T]
    output: list[int] = []
    while len(output) < max_new_tokens:
        logits = model(tokens, positions, cache)[0, -1]  # [vocab]
        output.append(sample_token(logits, temperature, seed, len(output)))
        position = len(prompt) + len(output) - 1
        tokens = torch.tensor([[output[-1]]], device=model.device)  # [1, 1]
        positions = torch.tensor([[position]], device=model.device)
    return output
