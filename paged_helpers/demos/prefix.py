"""Prefix caching: eight requests sharing one system prompt, prefilled and held at once.

The chapter's figure: each prompt is a 96-token system prompt plus 8 tokens of its own, blocks
of 16. The first request prefills all 104 tokens and publishes its 6 full blocks; each later
request reuses those 96 tokens and prefills only its own 8. With all eight requests alive, 14
blocks are in use instead of 56. The classes are the learner's (notebook 05's ``PrefixCache``
over notebook 04's ``PagedKVCache``), passed in or loaded from ``--impl DIR``; the prefills run
the course's tiny Qwen3 on the CPU, so the cache holds real keys and values.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import torch

from ..checkpoint import tiny_qwen3
from ..workloads import shared_prefix_prompts
from .implementation import add_impl_argument, load_impl


@dataclass
class SharedPromptRun:
    """What the demo leaves behind: the figures, and the live caches (for a widget to draw)."""

    figures: dict[str, int]
    prefix_cache: Any
    cache: Any


def shared_prompt_run(
    PrefixCache: Any,
    PagedKVCache: Any,
    requests: int = 8,
    prefix_tokens: int = 96,
    own_tokens: int = 8,
    block_size: int = 16,
    seed: int = 0,
) -> SharedPromptRun:
    """Serve the prompts one after another (attach, prefill the rest, remember), keeping all alive."""
    if min(requests, prefix_tokens, block_size) < 1 or own_tokens < 0:
        raise ValueError(
            "requests, prefix_tokens and block_size must be positive and own_tokens non-negative, got "
            f"{requests}, {prefix_tokens}, {block_size}, {own_tokens}"
        )
    model = tiny_qwen3(seed, device="cpu")
    config = model.config
    prompts = shared_prefix_prompts(requests, prefix_tokens, own_tokens, config.vocab_size, seed)
    blocks_without_sharing = sum(-(-len(prompt) // block_size) for prompt in prompts)
    cache = PagedKVCache(
        layers=config.num_hidden_layers,
        num_blocks=blocks_without_sharing,  # enough even if nothing were shared
        block_size=block_size,
        kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
    )
    prefix_cache = PrefixCache(cache)
    prefilled = 0
    with torch.no_grad():
        for index, prompt in enumerate(prompts):
            seq = f"request{index}"
            reused = prefix_cache.attach(seq, prompt)
            cache.reserve(seq, len(prompt) - reused)
            cache.set_batch([seq])
            model(torch.tensor([prompt[reused:]]), torch.arange(reused, len(prompt)), cache=cache)
            prefix_cache.remember(seq, prompt)
            prefilled += len(prompt) - reused
    figures = {
        "prompt_tokens": sum(len(prompt) for prompt in prompts),
        "tokens_prefilled": prefilled,
        "blocks_in_use": len(cache.allocator.refs) - cache.allocator.num_free,
        "blocks_without_sharing": blocks_without_sharing,
    }
    return SharedPromptRun(figures, prefix_cache, cache)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--requests", type=int, default=8, help="requests sharing the system prompt (default 8)"
    )
    parser.add_argument("--prefix-tokens", type=int, default=96, help="system prompt length (default 96)")
    parser.add_argument("--own-tokens", type=int, default=8, help="tokens of each request's own (default 8)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="model and prompt seed (default 0)")
    add_impl_argument(parser)


def run(args: argparse.Namespace) -> dict[str, int]:
    PrefixCache = load_impl(args, "05_prefix_caching", "PrefixCache")
    PagedKVCache = load_impl(args, "04_fork_and_copy_on_write", "PagedKVCache")
    return shared_prompt_run(
        PrefixCache,
        PagedKVCache,
        args.requests,
        args.prefix_tokens,
        args.own_tokens,
        args.block_size,
        args.seed,
    ).figures
