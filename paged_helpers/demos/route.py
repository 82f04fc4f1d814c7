"""Routing: multi-turn chats (or sessions over shared documents) over 1-8 replicas, and who routes best.

Each replica is simulated in this process with its own PagedKVCache (notebook 04, bookkeeping
shape: one layer, one head of size one) and its own RadixCache (notebook 10), served as in
``run.py radix``; with ``--host-blocks N`` each replica's cache is notebook 11's TieredRadixCache
over a host tier of N blocks instead. Requests arrive in rounds: every session's first request
waits at round 0, its next one arrives 1 to 3 rounds after the previous one was served (seeded; the
same for every policy), the order within a round is shuffled (seeded), and each round admits up to
``--batch`` requests per replica, first come first served. The router places each admitted request.

What a router can know. A replica's tree changes (blocks inserted, leaves evicted) and, with a host
tier, its host's changes reach the routers that listen as KV events: ("stored" or "removed", block
keys, medium "GPU" or "CPU"). A block's key is notebook 05's chained SHA-256 of every token up to the
block's end, as hex (``checks.tiers.keys``); the router hashes a request's tokens the same way, so a
key means the same thing in every process, unless a replica seeds its chain on its own (the policy
"hashes seeded per replica": what vLLM's per-process random ``NONE_HASH`` did to routers and shared
tiers).

Policies (``POLICIES``): round robin; least loaded (fewest blocks held by the replica's running
requests); session affinity (a session's first request to the least loaded replica, every later one
to the same replica, as a load balancer keyed on a session id does); approximate (no events: the
learner's router fed by its own routing decisions, each forgotten ``--ttl`` rounds later, as Dynamo's
router without KV events, ``ApproxKvIndexer``, and llm-d's approximate prefix-cache scorer estimate a
replica's cache from the requests they sent it); cache-aware (the learner's ``CacheAwareRouter`` on
the replicas' KV events, GPU only); stale events (the same router deaf to "removed"); hashes seeded per
replica. With host tiers, also tier-aware (the learner's ``TierAwareRouter``: events of both media, a
host block credited 0.8 of a GPU block).

The simulation itself (replicas, rounds, what a router hears) is ``routed_fleet``; this module holds
the policies, the workloads, the comparison and its tables.

Per policy and replica count: hit rate (prompt tokens found in the chosen replica's cache, GPU or
host / prompt tokens), prefill tokens, time to first token from the stated cost model
(``demos/cost_model.py``: a replica prefills a round's requests one after another; a request's TTFT is
the prefill time before it on its replica in that round plus its own; a host load-back is not timed),
mean and 90th percentile, and load imbalance (the busiest replica's prefill tokens / the mean).
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from ..workloads import ChatWorkload, multi_turn_chats, random_tokens, trace_chats
from .bookkeeping_cli import add_bookkeeping_arguments, require_positive_integers
from .cost_model import COST_MODEL, CostModel, cost_model_from
from .implementation import load_impl
from .routed_fleet import Policy, RouteRun, serve_routed

REPLICA_COUNTS = (1, 2, 4, 8)
TTL_ROUNDS = 4  # the approximate router's time to live, in rounds (Dynamo's default is 120 s)

ROUND_ROBIN, LEAST_LOADED, SESSION = "round robin", "least loaded", "session affinity"
APPROXIMATE, CACHE_AWARE, STALE = "approximate (TTL)", "cache-aware", "stale events"
SEEDED, TIER_AWARE = "seeded per replica", "tier-aware"
POLICIES = (ROUND_ROBIN, LEAST_LOADED, SESSION, APPROXIMATE, CACHE_AWARE, STALE)
TIERED_POLICIES = (LEAST_LOADED, SESSION, CACHE_AWARE, TIER_AWARE)


# --- the baselines (no cache knowledge) ---------------------------------------------------------------
class RoundRobin:
    """Replicas in turn, whatever they hold."""

    def __init__(self, replicas: int) -> None:
        self.replicas, self.next = replicas, 0

    def on_event(self, replica: int, kind: str, keys: list, medium: str = "GPU") -> None:
        pass

    def choose(self, keys: list, decode_blocks: list[int]) -> int:
        replica, self.next = self.next, (self.next + 1) % self.replicas
        return replica


class LeastLoaded(RoundRobin):
    """The replica whose running requests hold the fewest blocks (ties: the lowest index)."""

    def choose(self, keys: list, decode_blocks: list[int]) -> int:
        return min(range(self.replicas), key=lambda replica: (decode_blocks[replica], replica))


class SessionAffinity(LeastLoaded):
    """Sticky sessions: a session's first request goes to the least loaded replica, every later one to
    the same replica, whatever its load (a load balancer keyed on a session id; it sees no cache)."""

    def __init__(self, replicas: int) -> None:
        super().__init__(replicas)
        self.home: dict[int, int] = {}

    def place(self, session: int, keys: list, decode_blocks: list[int]) -> int:
        if session not in self.home:
            self.home[session] = self.choose(keys, decode_blocks)
        return self.home[session]


# --- routers made of the learner's ----------------------------------------------------------------------
def ignoring_removals(CacheAwareRouter: Any) -> type:  # noqa: N803
    """The learner's router, deaf to "removed" events: it routes on stale knowledge."""

    class Stale(CacheAwareRouter):
        def on_event(self, replica: int, kind: str, keys: list, *medium: str) -> None:
            if kind != "removed":
                super().on_event(replica, kind, keys, *medium)

    return Stale


def approximate(CacheAwareRouter: Any, ttl_rounds: int = TTL_ROUNDS) -> type:  # noqa: N803
    """The learner's router with no KV events: after each choice it records ("stored") the request's
    blocks on the replica it chose, and forgets ("removed") them ``ttl_rounds`` rounds after the last
    request that sent them there. What Dynamo's router does without events (``ApproxKvIndexer``:
    routing decisions, a time to live of 120 s by default) and what llm-d's approximate scorer does (an
    LRU index of the prefixes recently sent to each pod)."""

    class Approximate(CacheAwareRouter):
        def __init__(self, replicas: int, *args: Any) -> None:
            super().__init__(replicas, *args)
            self.expiry: list[dict[Any, int]] = [{} for _ in range(replicas)]
            self.now = 0

        def on_event(self, replica: int, kind: str, keys: list, *medium: str) -> None:
            pass  # it hears nothing from the replicas

        def tick(self, round_number: int) -> None:
            self.now = round_number
            for replica, expiry in enumerate(self.expiry):
                gone = [key for key, until in expiry.items() if until <= round_number]
                for key in gone:
                    del expiry[key]
                if gone:
                    super().on_event(replica, "removed", gone)

        def choose(self, keys: list, decode_blocks: list[int]) -> int:
            replica = super().choose(keys, decode_blocks)
            super().on_event(replica, "stored", list(keys))
            self.expiry[replica].update(dict.fromkeys(keys, self.now + ttl_rounds))
            return replica

    return Approximate


def policies(classes: dict[str, Any], overlap_weight: float, ttl_rounds: int = TTL_ROUNDS) -> dict[str, Policy]:
    """Every policy by name, made from the learner's classes in ``classes`` (``CacheAwareRouter``, and
    ``TierAwareRouter`` for the tier-aware one)."""
    router = classes["CacheAwareRouter"]
    found = {
        ROUND_ROBIN: Policy(RoundRobin, hears="none"),
        LEAST_LOADED: Policy(LeastLoaded, hears="none"),
        SESSION: Policy(SessionAffinity, hears="none"),
        APPROXIMATE: Policy(lambda n: approximate(router, ttl_rounds)(n, overlap_weight), hears="none"),
        CACHE_AWARE: Policy(lambda n: router(n, overlap_weight)),
        STALE: Policy(lambda n: ignoring_removals(router)(n, overlap_weight)),
        SEEDED: Policy(lambda n: router(n, overlap_weight), seeded=True),
    }
    if "TierAwareRouter" in classes:
        found[TIER_AWARE] = Policy(lambda n: classes["TierAwareRouter"](n, overlap_weight), hears="all")
    return found


# --- the runs -----------------------------------------------------------------------------------------
def default_blocks(workload: ChatWorkload, block_size: int) -> int:
    """48 blocks, or twice the longest prompt's blocks if that is more (every request must fit)."""
    longest = max(len(prompt) for chat in workload.turns for prompt in chat)
    return max(48, 2 * (-(-(longest + 1) // block_size)))


def compare(
    classes: dict[str, Any],
    workload: ChatWorkload,
    replica_counts: tuple[int, ...] = REPLICA_COUNTS,
    names: tuple[str, ...] = POLICIES,
    blocks: int | None = None,
    block_size: int = 16,
    batch: int = 4,
    overlap_weight: float = 1.0,
    cost: CostModel = COST_MODEL,
    seed: int = 0,
    host_blocks: int = 0,
    ttl_rounds: int = TTL_ROUNDS,
) -> list[RouteRun]:
    """Every policy of ``names`` at every replica count, on the same workload and arrivals.

    ``classes``: the learner's PagedKVCache, RadixCache and CacheAwareRouter; with ``host_blocks``,
    also TieredRadixCache (each replica's cache) and, for the tier-aware policy, TierAwareRouter."""
    blocks = default_blocks(workload, block_size) if blocks is None else blocks
    made = policies(classes, overlap_weight, ttl_rounds)
    unknown = [name for name in names if name not in made]
    if unknown:
        raise ValueError(f"unknown policies {unknown}: choose from {sorted(made)}")
    runs = []
    for replicas in replica_counts:
        for name in names:
            run = RouteRun(name, replicas)
            runs.append(
                serve_routed(workload, classes, made[name], run, blocks, block_size, batch, cost, seed, host_blocks)
            )
    return runs


def table(runs: list[RouteRun]) -> str:
    """One line per replica count and policy."""
    lines = [
        f"{'replicas':>8} {'policy':<18} {'hit rate':>8} {'from host':>9} {'prefill tokens':>14} {'TTFT ms':>8} "
        f"{'p90 ms':>7} {'imbalance':>9}"
    ]
    for run in runs:
        lines.append(
            f"{run.replicas:>8d} {run.policy:<18} {run.hit_rate:>8.3f} "
            f"{run.host_tokens / run.prompt_tokens if run.prompt_tokens else 0:>9.3f} {run.prefill_tokens:>14d} "
            f"{run.ttft_ms():>8.1f} {run.ttft_ms(0.9):>7.1f} {run.imbalance:>9.2f}"
        )
    return "\n".join(lines)


def summary(runs: list[RouteRun]) -> str:
    """One line per policy: its hit rate at each replica count, then, at the largest count, prefill
    tokens, TTFT (mean and 90th percentile, ms) and imbalance."""
    counts = sorted({run.replicas for run in runs})
    names = list(dict.fromkeys(run.policy for run in runs))
    by = {(run.policy, run.replicas): run for run in runs}
    largest = counts[-1]
    head = "".join(f"{count:>7d}" for count in counts)
    lines = [
        f"{'':<18} {'hit rate at replicas':>{7 * len(counts)}}   at {largest} replicas",
        f"{'policy':<18}{head}   {'prefill':>8} {'TTFT ms':>8} {'p90 ms':>7} {'imbalance':>9}",
    ]
    for name in names:
        rates = "".join(f"{by[name, count].hit_rate:>7.3f}" for count in counts)
        last = by[name, largest]
        lines.append(
            f"{name:<18}{rates}   {last.prefill_tokens:>8d} {last.ttft_ms():>8.1f} {last.ttft_ms(0.9):>7.1f} "
            f"{last.imbalance:>9.2f}"
        )
    return "\n".join(lines)


def document_sessions(
    sessions: int = 48,
    questions: int = 4,
    documents: int = 12,
    document_tokens: int = 160,
    system_tokens: int = 32,
    question_tokens: tuple[int, int] = (8, 24),
    vocab_size: int = 256,
    seed: int = 0,
) -> ChatWorkload:
    """Sessions over shared documents: each session picks one of ``documents`` (document i with weight
    1 / (i + 1): a few are popular) and asks ``questions`` questions about it; each prompt is the system
    prompt, the document and one question (the session's earlier questions are not kept). Many sessions
    share a document's blocks, and a document's blocks end up on several replicas."""
    if sessions < 1 or questions < 1 or documents < 1 or document_tokens < 1:
        raise ValueError("sessions, questions, documents and document_tokens must be positive")
    rng = random.Random(seed)
    system = random_tokens(system_tokens, vocab_size, rng)
    texts = [random_tokens(document_tokens, vocab_size, rng) for _ in range(documents)]
    popularity = [1 / (index + 1) for index in range(documents)]
    turns = []
    for _ in range(sessions):
        text = texts[rng.choices(range(documents), popularity)[0]]
        turns.append(
            [system + text + random_tokens(rng.randint(*question_tokens), vocab_size, rng) for _ in range(questions)]
        )
    parameters = {
        "sessions": sessions,
        "questions": questions,
        "documents": documents,
        "document_tokens": document_tokens,
        "system_tokens": system_tokens,
        "question_tokens": list(question_tokens),
        "vocab_size": vocab_size,
        "seed": seed,
    }
    return ChatWorkload(turns, parameters, "document_sessions")


WORKLOADS = {
    "chats": lambda args: multi_turn_chats(args.conversations, args.turns, seed=args.seed),
    "sharegpt": lambda args: trace_chats("sharegpt", args.conversations, args.turns, seed=args.seed),
    "documents": lambda args: document_sessions(2 * args.conversations, args.turns, seed=args.seed),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        default="chats",
        help="chats: multi_turn_chats (default); sharegpt: chats whose message lengths follow "
        "data/workloads/sharegpt.json; documents: 2 x --conversations sessions of --turns questions over "
        "12 shared documents",
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
    parser.add_argument(
        "--ttl", type=int, default=TTL_ROUNDS, help=f"the approximate router's TTL in rounds (default {TTL_ROUNDS})"
    )
    parser.add_argument(
        "--host-blocks",
        type=int,
        default=0,
        help="a host tier of this many blocks per replica (notebook 11's TieredRadixCache, write-back); "
        "the policies are then least loaded, session affinity, cache-aware (GPU events) and tier-aware",
    )
    parser.add_argument("--seeded", action="store_true", help="add the cache-aware router on hashes seeded per replica")
    add_bookkeeping_arguments(parser)


def load_classes(args: argparse.Namespace, tiered: bool) -> dict[str, Any]:
    notebook = "11_cache_tiers_and_routing"
    classes = {
        "CacheAwareRouter": load_impl(args, notebook, "CacheAwareRouter"),
        "RadixCache": load_impl(args, "10_radix_cache", "RadixCache"),
        "PagedKVCache": load_impl(args, "04_fork_and_copy_on_write", "PagedKVCache"),
    }
    if tiered:
        classes["TieredRadixCache"] = load_impl(args, notebook, "TieredRadixCache")
        classes["TierAwareRouter"] = load_impl(args, notebook, "TierAwareRouter")
    return classes


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_positive_integers(args, ("conversations", "turns", "block_size", "batch", "ttl"))
    if any(count < 1 for count in args.replicas) or (args.blocks is not None and args.blocks < 1):
        raise SystemExit("--replicas and --blocks must be positive integers")
    if args.host_blocks < 0:
        raise SystemExit(f"--host-blocks must be 0 or more, got {args.host_blocks}")
    classes = load_classes(args, tiered=bool(args.host_blocks))
    workload = WORKLOADS[args.workload](args)
    cost = cost_model_from(args, args.block_size)
    blocks = default_blocks(workload, args.block_size) if args.blocks is None else args.blocks
    names = TIERED_POLICIES if args.host_blocks else POLICIES + ((SEEDED,) if args.seeded else ())
    runs = compare(
        classes,
        workload,
        tuple(args.replicas),
        names,
        blocks,
        args.block_size,
        args.batch,
        args.overlap_weight,
        cost,
        args.seed,
        args.host_blocks,
        args.ttl,
    )
    print(
        f"workload: {workload.name} {workload.parameters}; {workload.requests} requests, {workload.prompt_tokens} "
        f"prompt tokens; {blocks} blocks of {args.block_size} per replica"
        + (f" over a host tier of {args.host_blocks}" if args.host_blocks else "")
        + f", batch {args.batch} per replica, overlap_weight {args.overlap_weight}, TTL {args.ttl} rounds"
    )
    print(cost.describe())
    print(table(runs))
    return {
        "workload": workload.name,
        "parameters": workload.parameters,
        "blocks_per_replica": blocks,
        "host_blocks_per_replica": args.host_blocks,
        "block_size": args.block_size,
        "batch_per_replica": args.batch,
        "overlap_weight": args.overlap_weight,
        "ttl_rounds": args.ttl,
        "cost_model": cost.as_dict(),
        "runs": [
            {
                "replicas": run.replicas,
                "policy": run.policy,
                "hit_rate": round(run.hit_rate, 4),
                "host_hit_rate": round(run.host_tokens / run.prompt_tokens, 4) if run.prompt_tokens else 0.0,
                "prefill_tokens": run.prefill_tokens,
                "ttft_ms_mean": round(run.ttft_ms(), 2),
                "ttft_ms_p90": round(run.ttft_ms(0.9), 2),
                "imbalance": round(run.imbalance, 3),
            }
            for run in runs
        ],
        "timed": "nothing: counts from the caches' bookkeeping, TTFT from the stated cost model",
    }


def series(runs: list[RouteRun]) -> dict[str, list[tuple[int, float, int]]]:
    """For the figure (``plots.tiers_routing``): policy -> (replicas, hit rate, prefill tokens)."""
    found: dict[str, list[tuple[int, float, int]]] = {}
    for run in runs:
        found.setdefault(run.policy, []).append((run.replicas, run.hit_rate, run.prefill_tokens))
    return found
