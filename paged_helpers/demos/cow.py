"""Fork and copy-on-write: what four samples of one prompt cost in blocks.

The chapter's figure: a 40-token prompt in blocks of 16 is prefilled (3 blocks, the last half
full), forked four times (no new block), then each sample writes its first token (one copy of
the shared half-full block each: 4 new blocks, instead of 12 for four separate prompts).
The cache class is the learner's (notebook 04), passed in or loaded from ``--impl DIR``; the
prefill and the first tokens go through the course's tiny Qwen3 on the CPU.
"""

from __future__ import annotations

import argparse

import torch

from ..checkpoint import tiny_qwen3
from ..workloads import fork_prompt
from .implementation import add_impl_argument, load_impl


def _blocks_in_use(cache) -> int:
    return len(cache.allocator.refs) - cache.allocator.num_free


def fork_block_counts(
    PagedKVCache, prompt_tokens: int = 40, block_size: int = 16, forks: int = 4, seed: int = 0
) -> dict[str, int]:
    """Blocks in use after the prefill, after ``forks`` forks, and after each fork writes a token."""
    if prompt_tokens < 1 or block_size < 1 or forks < 1:
        raise ValueError(
            f"prompt_tokens, block_size and forks must be positive: {prompt_tokens}, {block_size}, {forks}"
        )
    model = tiny_qwen3(seed, device="cpu")
    config = model.config
    if forks > config.vocab_size:
        raise ValueError(f"forks must be at most the vocabulary size {config.vocab_size}, got {forks}")
    prompt_blocks = -(-prompt_tokens // block_size)
    # Room for four separate prompts' worth of blocks: the demo must never be short of blocks.
    cache = PagedKVCache(
        layers=config.num_hidden_layers,
        num_blocks=prompt_blocks * (forks + 1) + forks,
        block_size=block_size,
        kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
    )
    prompt = fork_prompt(prompt_tokens, config.vocab_size, seed)

    with torch.no_grad():
        cache.create("prompt")
        cache.reserve("prompt", prompt_tokens)
        cache.set_batch(["prompt"])
        logits = model(torch.tensor([prompt]), torch.arange(prompt_tokens), cache=cache)  # [1, T, vocab]
        after_prefill = _blocks_in_use(cache)

        samples = [f"sample{index}" for index in range(forks)]
        for sample in samples:
            cache.fork("prompt", sample)
        after_forks = _blocks_in_use(cache)

        # n-way sampling, made deterministic: sample i takes the i-th most likely first token.
        first_tokens = logits[0, -1].topk(forks).indices  # [forks]
        for sample in samples:
            cache.reserve(sample, 1)
        cache.set_batch(samples)
        positions = torch.full((forks, 1), prompt_tokens)  # [forks, 1]
        model(first_tokens[:, None], positions, cache=cache)
        after_first_tokens = _blocks_in_use(cache)

    return {
        "parent_blocks": after_prefill,
        f"new_blocks_after_{forks}_forks": after_forks - after_prefill,
        "new_blocks_after_each_sample_writes_a_token": after_first_tokens - after_forks,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt-tokens", type=int, default=40, help="prompt length (default 40)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    parser.add_argument("--forks", type=int, default=4, help="samples forked from the prompt (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="model and prompt seed (default 0)")
    add_impl_argument(parser)


def run(args: argparse.Namespace) -> dict[str, int]:
    PagedKVCache = load_impl(args, "04_fork_and_copy_on_write", "PagedKVCache")
    return fork_block_counts(PagedKVCache, args.prompt_tokens, args.block_size, args.forks, args.seed)
