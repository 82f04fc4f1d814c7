"""Static slots against paged blocks: how much reserved KV memory holds real tokens."""

from __future__ import annotations

import argparse

from ..workloads import request_lengths


def slots_reserved_paged(lengths: list[int], block_size: int) -> int:
    """Token slots held when each request takes whole blocks of ``block_size`` tokens."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    return sum(-(-length // block_size) * block_size for length in lengths)


def utilization_figures(
    requests: int = 32, block_size: int = 16, capacity: int = 1024, seed: int = 0, shortest: int = 20, longest: int = 500
) -> dict[str, float | int]:
    """The chapter's figure: tokens stored against slots reserved, static and paged."""
    lengths = request_lengths(requests, shortest, longest, seed)
    if max(lengths) > capacity:
        raise ValueError(f"a request of {max(lengths)} tokens does not fit a static slot of {capacity}")
    stored = sum(lengths)
    static = requests * capacity
    paged = slots_reserved_paged(lengths, block_size)
    return {
        "requests": requests,
        "tokens_stored": stored,
        "static_slots_reserved": static,
        "paged_slots_reserved": paged,
        "static_utilization": round(stored / static, 3),
        "paged_utilization": round(stored / paged, 3),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    parser.add_argument("--requests", type=int, default=32, help="live requests (default 32)")
    parser.add_argument("--capacity", type=int, default=1024, help="static slot size in tokens (default 1024)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")


def run(args: argparse.Namespace) -> dict[str, float | int]:
    return utilization_figures(args.requests, args.block_size, args.capacity, args.seed)
