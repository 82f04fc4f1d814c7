"""The routing demo's simulation: replicas that serve chats in rounds, and a router that places each request.

``serve_routed`` runs one policy on one replica count (``route.compare`` runs them all): the chats'
turns arrive in rounds (``_Sessions``: think times drawn once from the seed, the order within a
round drawn each round), the router places each admitted request on a replica (``_Fleet``), the
replica's server (notebook 10's tree, or notebook 11's tiered cache, on notebook 04's PagedKVCache
in its bookkeeping shape) prefills what its cache lacks, and what each replica's cache stored or
removed since its last report reaches the router as KV events, as the policy hears them. The run's
account is a ``RouteRun``: prompt tokens, cached tokens (from the host tier too), prefill per
replica, time to first token from the stated cost model.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..checks.tiers.keys import chain_keys, chain_step, root_digest, seeded_root
from ..workloads import ChatWorkload
from .cost_model import COST_MODEL, CostModel
from .prompt_counts import PromptCounts
from .radix import RadixServer
from .tiers import TieredServer

BOOKKEEPING_SHAPE = {"layers": 1, "kv_heads": 1, "head_dim": 1}


@dataclass(frozen=True)
class Policy:
    """How to make a router for ``replicas`` replicas, and what it hears: "GPU" events only, "all"
    events (both media), or none. ``seeded``: each replica hashes its blocks from its own root."""

    make: Callable[[int], Any]
    hears: str = "GPU"
    seeded: bool = False


def tree_keys(radix: Any, root: bytes | None = None) -> set[str]:
    """The key of every block in a radix tree (edges of whole blocks), chained from ``root``."""
    size, found = radix.block_size, set()
    stack = [(radix.root, root_digest() if root is None else root)]
    while stack:
        node, parent = stack.pop()
        for child in node.children.values():
            digest, tokens = parent, list(child.tokens)
            for index in range(len(child.blocks)):
                digest = chain_step(digest, tokens[index * size : (index + 1) * size])
                found.add(digest.hex())
            stack.append((child, digest))
    return found


def block_keys(tokens: list[int], size: int) -> list[str]:
    """A request's keys as the router computes them (notebook 05's chain, as hex)."""
    return chain_keys(tokens, size)


class Replica:
    """One replica: its server (notebook 10's tree, or notebook 11's tiered cache) and what it last
    reported, per medium. ``events()`` gives the changes since then as KV events."""

    def __init__(self, classes: dict[str, Any], blocks: int, block_size: int, host_blocks: int, root: Any) -> None:
        cache = classes["PagedKVCache"](num_blocks=blocks, block_size=block_size, **BOOKKEEPING_SHAPE)
        if host_blocks:
            tiered = classes["TieredRadixCache"](cache, host_blocks, "write-back")
            self.server: Any = TieredServer(tiered, cache)
        else:
            self.server = RadixServer(classes["RadixCache"], cache)
        self.cache, self.root, self.host = cache, root, bool(host_blocks)
        self.known: dict[str, set] = {"GPU": set(), "CPU": set()}

    def holds(self) -> dict[str, set]:
        held = {"GPU": tree_keys(self.server.radix, self.root), "CPU": set()}
        if self.host:  # the learner's host entries, keyed by 05's chain (a seeded replica has no host)
            held["CPU"] = set(self.server.tiered.host_entries)
        return held

    def events(self) -> list[tuple[str, list, str]]:
        now, found = self.holds(), []
        for medium in ("GPU", "CPU"):
            gone, new = self.known[medium] - now[medium], now[medium] - self.known[medium]
            if gone:
                found.append(("removed", sorted(gone), medium))
            if new:
                found.append(("stored", sorted(new), medium))
        self.known = now
        return found


@dataclass
class RouteRun(PromptCounts):
    """What one policy did with one replica count."""

    policy: str
    replicas: int
    prompt_tokens: int = 0
    cached_tokens: int = 0
    host_tokens: int = 0  # of cached_tokens, those loaded back from a host tier
    prefill_by_replica: list[int] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list, repr=False)
    rounds: int = 0
    final_holds: list[dict[str, set]] = field(default_factory=list, repr=False)  # each replica's keys at the end

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
    classes: dict[str, Any],
    policy: Policy,
    run: RouteRun,
    blocks: int,
    block_size: int,
    batch: int,
    cost: CostModel = COST_MODEL,
    seed: int = 0,
    host_blocks: int = 0,
) -> RouteRun:
    """Serve every session of ``workload`` on ``run.replicas`` replicas routed by ``policy``."""
    replicas = run.replicas
    router = policy.make(replicas)
    sessions = _Sessions(workload, seed)  # drawn up front: every policy sees the same arrivals
    fleet = _Fleet(
        [
            Replica(classes, blocks, block_size, host_blocks, seeded_root(f"{seed}/{r}") if policy.seeded else None)
            for r in range(replicas)
        ],
        router,
        policy,
        run,
    )
    run.prefill_by_replica = [0] * replicas
    round_number = 0
    while sessions.unfinished():
        if hasattr(router, "tick"):
            router.tick(round_number)
        running: list[tuple[int, str]] = []
        clock = [0.0] * replicas  # prefill seconds spent by each replica this round
        for c in sessions.waiting(round_number, seed)[: batch * replicas]:
            turn = sessions.next_turn[c]
            if fleet.admit(workload.turns[c][turn], f"chat{c}-turn{turn}", c, running, clock, cost, block_size):
                sessions.advance(c, round_number)
        if not running and not sessions.any_later(round_number):
            raise RuntimeError(f"round {round_number}: no request fits in an empty pool; give the replicas more blocks")
        for replica, seq in running:
            fleet.replicas[replica].server.finish(seq)
        round_number += 1
    run.rounds = round_number
    run.final_holds = [replica.holds() for replica in fleet.replicas]
    return run


class _Sessions:
    """Each chat's next turn and the round it can arrive in: a user reads 0-2 rounds, then types.

    The think times are drawn once, up front, from ``seed``; the order in which the ready chats
    arrive within a round is drawn each round, from ``seed`` and the round.
    """

    def __init__(self, workload: ChatWorkload, seed: int) -> None:
        arrivals = random.Random(seed)
        self.think = [[arrivals.randrange(3) for _ in chat] for chat in workload.turns]  # rounds a user reads
        self.turns = workload.turns
        count = len(workload.turns)
        self.next_turn, self.ready_at = [0] * count, [0] * count
        self.order = list(range(count))  # arrival order within a round, drawn each round

    def unfinished(self) -> bool:
        return any(turn < len(chat) for turn, chat in zip(self.next_turn, self.turns, strict=True))

    def waiting(self, round_number: int, seed: int) -> list[int]:
        """The chats ready in this round with a turn left, earliest ready first, then by arrival."""
        random.Random(f"{seed}/{round_number}").shuffle(self.order)  # who arrives first within a round
        return sorted(
            (
                c
                for c in range(len(self.turns))
                if self.next_turn[c] < len(self.turns[c]) and self.ready_at[c] <= round_number
            ),
            key=lambda c: (self.ready_at[c], self.order[c]),
        )

    def advance(self, c: int, round_number: int) -> None:
        """Chat ``c``'s turn was served this round: its next one arrives after the user's think time."""
        self.next_turn[c] += 1
        self.ready_at[c] = round_number + 1 + self.think[c][self.next_turn[c] - 1]

    def any_later(self, round_number: int) -> bool:
        return any(ready > round_number for ready in self.ready_at)


@dataclass
class _Fleet:
    """The replicas, the router that places each request on one, and the run's account of what they did."""

    replicas: list[Replica]
    router: Any
    policy: Policy
    run: RouteRun

    def report(self, replica: int) -> None:
        """Tell the router what ``replica``'s cache stored and removed since its last report, as it hears."""
        for kind, keys, medium in self.replicas[replica].events():
            if self.policy.hears == "all":
                self.router.on_event(replica, kind, keys, medium)
            elif self.policy.hears == "GPU" and medium == "GPU":
                self.router.on_event(replica, kind, keys)

    def admit(
        self,
        prompt: list[int],
        seq: str,
        chat: int,
        running: list[tuple[int, str]],
        clock: list[float],
        cost: CostModel,
        block_size: int,
    ) -> bool:
        """Place and prefill one request; False when its replica's pool is full (it waits a round)."""
        replicas, run = len(self.replicas), self.run
        decode = [sum(len(self.replicas[r].cache.tables[s]) for rr, s in running if rr == r) for r in range(replicas)]
        keys = block_keys(prompt[:-1], block_size)
        router = self.router
        replica = router.place(chat, keys, decode) if hasattr(router, "place") else router.choose(keys, decode)
        server = self.replicas[replica].server
        reused = server.start(seq, prompt)
        if reused is None:  # that replica's pool is full of running requests: wait for the next round
            self.report(replica)
            return False
        server.cache.lengths[seq] = len(prompt)  # what the forward pass would have written
        server.prefilled(seq, prompt)
        self.report(replica)
        computed = len(prompt) - reused
        clock[replica] += cost.prefill_s(computed)
        run.ttft_s.append(clock[replica])
        run.prompt_tokens += len(prompt)
        run.cached_tokens += reused
        if self.replicas[replica].host:
            run.host_tokens += server.reused[seq][1]
        run.prefill_by_replica[replica] += computed
        running.append((replica, seq))
        return True
