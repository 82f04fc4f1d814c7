"""Routing: multi-turn chats over 1-8 replicas; round robin, least loaded, cache-aware (KV events).

Each replica is simulated in this process with its own PagedKVCache (notebook 04, bookkeeping
shape: one layer, one head of size one) and its own RadixCache (notebook 10), served as in
``run.py radix``. Requests arrive in rounds: every chat's first turn waits at round 0, a chat's next
turn arrives 1 to 3 rounds after its previous one was served (seeded; the same for every policy), the
order within a round is shuffled (seeded), and each round admits up to ``--batch``
requests per replica, first come first served. The router places each admitted request; the
replica's tree changes (blocks inserted, leaves evicted) reach the router as KV events ("stored",
"removed", with block keys: the tokens from the start of the prompt to each block's end), the only
thing a router knows about a replica. Policies: round robin, least loaded (fewest blocks held by the
replica's running requests), the learner's ``CacheAwareRouter`` (notebook 11), and the same router
deaf to "removed" events ("stale events": what a router that ignores evictions does).

Per policy and replica count: hit rate (prompt tokens found in the chosen replica's cache / prompt
tokens), prefill tokens, time to first token from the stated cost model (``demos/cost_model.py``: a
replica prefills a round's requests one after another; a request's TTFT is the prefill time before
it on its replica in that round plus its own; mean and 90th percentile), and load imbalance (the
busiest replica's prefill tokens / the mean over replicas).
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass, field
from typing import Any

from ..workloads import ChatWorkload, multi_turn_chats, trace_chats
from .bookkeeping_cli import add_bookkeeping_arguments, require_positive_integers
from .cost_model import COST_MODEL, CostModel, cost_model_from
from .implementation import load_impl
from .prompt_counts import PromptCounts
from .radix import RadixServer

REPLICA_COUNTS = (1, 2, 4, 8)
BOOKKEEPING_SHAPE = {"layers": 1, "kv_heads": 1, "head_dim": 1}


class RoundRobin:
    """The baseline: replicas in turn, whatever they hold."""

    def __init__(self, replicas: int) -> None:
        self.replicas, self.next = replicas, 0

    def on_event(self, replica: int, kind: str, keys: list) -> None:
        pass

    def choose(self, keys: list, decode_blocks: list[int]) -> int:
        replica, self.next = self.next, (self.next + 1) % self.replicas
        return replica


class LeastLoaded(RoundRobin):
    """The replica whose running requests hold the fewest blocks (ties: the lowest index)."""

    def choose(self, keys: list, decode_blocks: list[int]) -> int:
        return min(range(self.replicas), key=lambda replica: (decode_blocks[replica], replica))


def tree_keys(radix: Any) -> set[tuple[int, ...]]:
    """The key of every block in a radix tree: the tokens from the root to the block's end."""
    size, found, stack = radix.block_size, set(), [(radix.root, ())]
    while stack:
        node, prefix = stack.pop()
        for child in node.children.values():
            path = prefix + tuple(child.tokens)
            start = len(path) - len(child.tokens)
            found.update(path[: start + (index + 1) * size] for index in range(len(child.blocks)))
            stack.append((child, path))
    return found


def block_keys(tokens: list[int], size: int) -> list[tuple[int, ...]]:
    return [tuple(tokens[:end]) for end in range(size, len(tokens) + 1, size)]


@dataclass
class RouteRun(PromptCounts):
    """What one policy did with one replica count."""

    policy: str
    replicas: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefill_by_replica: list[int] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list, repr=False)
    rounds: int = 0

    @property
    def imbalance(self) -> float:
        mean = sum(self.prefill_by_replica) / len(self.prefill_by_replica)
        return max(self.prefill_by_replica) / mean if mean else 1.0

    def ttft_ms(self, quantile: float | None = None) -> float:
        if not self.ttft_s:
            return 0.0
        if quantile is None:
            return 1e3 * sum(self.ttft_s) / len(self.ttft_s)
        ordered = sorted(self.ttft_s)
        return 1e3 * ordered[min(len(ordered) - 1, math.ceil(quantile * len(ordered)) - 1)]


def serve_routed(
    workload: ChatWorkload,
    RadixCache: Any,
    PagedKVCache: Any,
    router: Any,
    run: RouteRun,  # noqa: N803
    blocks: int,
    block_size: int,
    batch: int,
    cost: CostModel,
    seed: int = 0,
) -> RouteRun:
    replicas = run.replicas
    arrivals = random.Random(seed)  # drawn up front: every policy sees the same arrivals
    think = [[arrivals.randrange(3) for _ in chat] for chat in workload.turns]  # rounds a user reads, then types
    servers = [
        RadixServer(RadixCache, PagedKVCache(num_blocks=blocks, block_size=block_size, **BOOKKEEPING_SHAPE))
        for _ in range(replicas)
    ]
    known = [set() for _ in range(replicas)]  # what each replica's tree held at its last event
    run.prefill_by_replica = [0] * replicas
    conversations = len(workload.turns)
    next_turn, ready_at = [0] * conversations, [0] * conversations
    order = list(range(conversations))  # arrival order within a round, drawn each round
    round_number = 0

    def report(replica: int) -> None:
        now = tree_keys(servers[replica].radix)
        if known[replica] - now:
            router.on_event(replica, "removed", sorted(known[replica] - now, key=len))
        if now - known[replica]:
            router.on_event(replica, "stored", sorted(now - known[replica], key=len))
        known[replica] = now

    while any(turn < len(chat) for turn, chat in zip(next_turn, workload.turns, strict=True)):
        random.Random(f"{seed}/{round_number}").shuffle(order)  # who arrives first within a round
        waiting = sorted(
            (c for c in range(conversations) if next_turn[c] < len(workload.turns[c]) and ready_at[c] <= round_number),
            key=lambda c: (ready_at[c], order[c]),
        )
        running: list[tuple[int, str]] = []
        clock = [0.0] * replicas  # prefill seconds spent by each replica this round
        for c in waiting[: batch * replicas]:
            prompt, seq = workload.turns[c][next_turn[c]], f"chat{c}-turn{next_turn[c]}"
            decode = [sum(len(servers[r].cache.tables[s]) for rr, s in running if rr == r) for r in range(replicas)]
            replica = router.choose(block_keys(prompt[:-1], block_size), decode)
            server = servers[replica]
            reused = server.start(seq, prompt)
            if reused is None:  # that replica's pool is full of running requests: wait for the next round
                report(replica)
                continue
            server.cache.lengths[seq] = len(prompt)  # what the forward pass would have written
            server.prefilled(seq, prompt)
            report(replica)
            computed = len(prompt) - reused
            clock[replica] += cost.prefill_s(computed)
            run.ttft_s.append(clock[replica])
            run.prompt_tokens += len(prompt)
            run.cached_tokens += reused
            run.prefill_by_replica[replica] += computed
            running.append((replica, seq))
            next_turn[c] += 1
            ready_at[c] = round_number + 1 + think[c][next_turn[c] - 1]
        if not running and not any(ready_at[c] > round_number for c in range(conversations)):
            raise RuntimeError(f"round {round_number}: no request fits in an empty pool; give the replicas more blocks")
        for replica, seq in running:
            servers[replica].finish(seq)
        round_number += 1
    run.rounds = round_number
    return run


def ignoring_removals(CacheAwareRouter: Any) -> type:  # noqa: N803
    """The learner's router, deaf to "removed" events: it routes on stale knowledge."""

    class Stale(CacheAwareRouter):
        def on_event(self, replica: int, kind: str, keys: list) -> None:
            if kind != "removed":
                super().on_event(replica, kind, keys)

    return Stale


def policies(CacheAwareRouter: Any, overlap_weight: float) -> dict[str, Any]:  # noqa: N803
    stale = ignoring_removals(CacheAwareRouter)
    return {
        "round robin": RoundRobin,
        "least loaded": LeastLoaded,
        "cache-aware": lambda replicas: CacheAwareRouter(replicas, overlap_weight),
        "stale events": lambda replicas: stale(replicas, overlap_weight),
    }


def default_blocks(workload: ChatWorkload, block_size: int) -> int:
    """48 blocks, or twice the longest prompt's blocks if that is more (every request must fit)."""
    longest = max(len(prompt) for chat in workload.turns for prompt in chat)
    return max(48, 2 * (-(-(longest + 1) // block_size)))


def compare(
    RadixCache: Any,
    PagedKVCache: Any,
    CacheAwareRouter: Any,
    workload: ChatWorkload,  # noqa: N803
    replica_counts: tuple[int, ...] = REPLICA_COUNTS,
    blocks: int | None = None,
    block_size: int = 16,
    batch: int = 4,
    overlap_weight: float = 1.0,
    cost: CostModel = COST_MODEL,
    seed: int = 0,
) -> list[RouteRun]:
    blocks = default_blocks(workload, block_size) if blocks is None else blocks
    runs = []
    for replicas in replica_counts:
        for name, make in policies(CacheAwareRouter, overlap_weight).items():
            run = RouteRun(name, replicas)
            runs.append(
                serve_routed(
                    workload, RadixCache, PagedKVCache, make(replicas), run, blocks, block_size, batch, cost, seed
                )
            )
    return runs


def table(runs: list[RouteRun]) -> str:
    lines = [
        f"{'replicas':>8} {'policy':<13} {'hit rate':>8} {'prefill tokens':>14} {'TTFT ms':>8} {'p90 ms':>7} "
        f"{'imbalance':>9}"
    ]
    for run in runs:
        lines.append(
            f"{run.replicas:>8d} {run.policy:<13} {run.hit_rate:>8.3f} {run.prefill_tokens:>14d} "
            f"{run.ttft_ms():>8.1f} {run.ttft_ms(0.9):>7.1f} {run.imbalance:>9.2f}"
        )
    return "\n".join(lines)


WORKLOADS = {
    "chats": lambda args: multi_turn_chats(args.conversations, args.turns, seed=args.seed),
    "sharegpt": lambda args: trace_chats("sharegpt", args.conversations, args.turns, seed=args.seed),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="chats",
        help="chats: multi_turn_chats (default); sharegpt: chats whose message lengths follow "
        "data/workloads/sharegpt.json",
    )
    parser.add_argument("--conversations", type=int, default=24, help="chats (default 24)")
    parser.add_argument("--turns", type=int, default=6, help="turns per chat (default 6)")
    parser.add_argument("--blocks", type=int, help="blocks per replica (default 48, or twice the longest prompt's)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    parser.add_argument("--batch", type=int, default=4, help="requests admitted per replica per round (default 4)")
    parser.add_argument(
        "--overlap-weight", type=float, default=1.0, help="the cache-aware cost's overlap_weight (default 1)"
    )
    parser.add_argument(
        "--replicas", type=int, nargs="+", default=list(REPLICA_COUNTS), help="replica counts (default 1 2 4 8)"
    )
    add_bookkeeping_arguments(parser)


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_positive_integers(args, ("conversations", "turns", "block_size", "batch"))
    if any(count < 1 for count in args.replicas) or (args.blocks is not None and args.blocks < 1):
        raise SystemExit("--replicas and --blocks must be positive integers")
    CacheAwareRouter = load_impl(args, "11_cache_tiers_and_routing", "CacheAwareRouter")  # noqa: N806
    RadixCache = load_impl(args, "10_radix_cache", "RadixCache")  # noqa: N806
    PagedKVCache = load_impl(args, "04_fork_and_copy_on_write", "PagedKVCache")  # noqa: N806
    workload = WORKLOADS[args.workload](args)
    cost = cost_model_from(args, args.block_size)
    blocks = default_blocks(workload, args.block_size) if args.blocks is None else args.blocks
    runs = compare(
        RadixCache,
        PagedKVCache,
        CacheAwareRouter,
        workload,
        tuple(args.replicas),
        blocks,
        args.block_size,
        args.batch,
        args.overlap_weight,
        cost,
        args.seed,
    )
    print(
        f"workload: {workload.name} {workload.parameters}; {workload.requests} requests, {workload.prompt_tokens} "
        f"prompt tokens; {blocks} blocks of {args.block_size} per replica, batch {args.batch} per replica, "
        f"overlap_weight {args.overlap_weight}"
    )
    print(cost.describe())
    print(table(runs))
    return {
        "workload": workload.name,
        "parameters": workload.parameters,
        "blocks_per_replica": blocks,
        "block_size": args.block_size,
        "batch_per_replica": args.batch,
        "overlap_weight": args.overlap_weight,
        "cost_model": cost.as_dict(),
        "runs": [
            {
                "replicas": run.replicas,
                "policy": run.policy,
                "hit_rate": round(run.hit_rate, 4),
                "prefill_tokens": run.prefill_tokens,
                "ttft_ms_mean": round(run.ttft_ms(), 2),
                "ttft_ms_p90": round(run.ttft_ms(0.9), 2),
                "imbalance": round(run.imbalance, 3),
            }
            for run in runs
        ],
        "timed": "nothing: counts from the caches' bookkeeping, TTFT from the stated cost model",
    }
