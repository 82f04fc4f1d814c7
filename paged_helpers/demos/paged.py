"""Static slots against paged blocks: how much reserved KV memory holds real tokens."""

from __future__ import annotations

import argparse

from ..plots.utilization import slots_reserved_paged
from ..workloads import (
    CHAPTER_LENGTHS_SEED,
    UNIFORM,
    request_lengths,
    workload_capacity,
    workload_lengths,
    workload_names,
)
from .implementation import add_impl_argument, load_impl


def slots_reserved_by_cache(paged_cache_class, lengths: list[int], block_size: int) -> int:
    """The same count, measured: reserve every request in a real paged cache and count its blocks."""
    blocks = sum(-(-length // block_size) for length in lengths)
    # Room for a cache that takes more blocks than it needs: the figure should show the waste.
    cache = paged_cache_class(1, 2 * blocks + len(lengths), block_size, 1, 1)
    for seq, length in enumerate(lengths):
        cache.create(seq)
        cache.reserve(seq, length)
    return sum(len(table) for table in cache.tables.values()) * block_size


def utilization_figures(
    requests: int = 32,
    block_size: int = 16,
    capacity: int | None = None,
    seed: int = CHAPTER_LENGTHS_SEED,
    shortest: int = 20,
    longest: int = 500,
    paged_cache_class=None,
    workload: str = UNIFORM,
) -> dict[str, float | int]:
    """The chapter's figure: tokens stored against slots reserved, static and paged.

    ``workload`` names the request lengths (``uniform``: between ``shortest`` and ``longest``;
    else a trace from the data folder). ``capacity`` is the static slot, by default the
    workload's own (1024 tokens for uniform, the trace's longest allowed request otherwise).
    With ``paged_cache_class`` the paged count comes from reserving the requests in that
    cache (the learner's), else from arithmetic.
    """
    if workload == UNIFORM:
        lengths = request_lengths(requests, shortest, longest, seed)
    else:
        lengths = workload_lengths(workload, requests, seed)
    capacity = workload_capacity(workload) if capacity is None else capacity
    if max(lengths) > capacity:
        raise ValueError(f"a request of {max(lengths)} tokens does not fit a static slot of {capacity}")
    stored = sum(lengths)
    static = requests * capacity
    paged = (
        slots_reserved_paged(lengths, block_size)
        if paged_cache_class is None
        else slots_reserved_by_cache(paged_cache_class, lengths, block_size)
    )
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
    parser.add_argument(
        "--capacity",
        type=int,
        default=None,
        help="static slot size in tokens (default: the workload's, 1024 for uniform)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=CHAPTER_LENGTHS_SEED,
        help=f"workload seed (default {CHAPTER_LENGTHS_SEED}: the chapter's requests)",
    )
    parser.add_argument(
        "--workload",
        choices=workload_names(),
        default=UNIFORM,
        help="request lengths: the chapter's uniform 20-500 draw, or a trace from data/workloads (default uniform)",
    )
    # Without --impl the paged count is arithmetic, so this demo works before notebook 03 is done.
    add_impl_argument(parser, default=None)


def run(args: argparse.Namespace) -> dict[str, float | int]:
    paged_cache_class = None if args.impl is None else load_impl(args, "03_paged_kv_cache", "PagedKVCache")
    return utilization_figures(
        args.requests,
        args.block_size,
        args.capacity,
        args.seed,
        paged_cache_class=paged_cache_class,
        workload=args.workload,
    )
