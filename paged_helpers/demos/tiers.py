"""Host tier: hit rate, prefill saved and copies against host-tier size, for three write policies.

Seeded multi-turn chats (``workloads.multi_turn_chats``; with ``--one-off-clients N``, plus N sessions
of unrelated one-off prompts among them) are served in rounds by one replica, the way ``run.py radix``
serves them (first come first served, up to ``--batch`` requests a round), on a GPU pool of
``--gpu-blocks`` blocks: too few for every chat's history. The cache is notebook 10's ``RadixCache``
alone (host size 0), or notebook 11's ``TieredRadixCache`` over a host tier of 0.5, 1, 2, 4 and 8 times
the GPU pool, write-back, write-through, or selective: write-through that stores a block on the host
only from the second request that asks for it on (``admitting_after_reuse``: vLLM's reuse filter on
its CPU offloading, SGLang's ``write_through_selective``).

Per row: hit rate (prompt tokens served from the GPU tree or loaded back from the host / prompt
tokens), the host's share of it, prefill tokens and those saved against no host tier, blocks
written to the host and loaded back (a block written and never loaded back is a wasted copy; with
a host smaller than the GPU pool most writes are: Dynamo's "churn"), and, from the stated cost
model (``demos/cost_model.py``), the time the loads take over PCIe and over NVLink against the
time recomputing the same tokens would take. The caches' bookkeeping runs on pools of one layer,
one head of size one (the copies are real, of tiny blocks): no model runs, and the timings come
from the cost model only. The classes are the learner's, loaded from ``--impl DIR``.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..learner_view.access import create_holding
from ..workloads import ChatWorkload, multi_turn_chats, random_tokens
from .bookkeeping_cli import add_bookkeeping_arguments, require_positive_integers
from .cost_model import COST_MODEL, CostModel, cost_model_from, measured_host_to_gpu
from .implementation import load_impl
from .radix import RadixServer, ServerRun, _reserve, serve_chats

HOST_MULTIPLES = (0, 0.5, 1, 2, 4, 8)
POLICIES = ("write-back", "write-through")
SELECTIVE = "selective"  # write-through, storing a block only from its second request on
ALL_POLICIES = (*POLICIES, SELECTIVE)
STORE_THRESHOLD = 2
BOOKKEEPING_SHAPE = {"layers": 1, "kv_heads": 1, "head_dim": 1}


class TieredServer:
    """A ``TieredRadixCache`` on a PagedKVCache: one request's engine steps, with the host tier.

    ``start(seq, prompt)``: match all but the last prompt token on the GPU and lock the node;
    ``match_host`` the next whole blocks and ``load_back`` them into fresh GPU blocks (on
    MemoryError nothing is loaded: load_back unpinned its slots); create seq holding the matched
    and loaded blocks; reserve the rest (evicting when short). Returns the tokens reused, or None if
    the pool cannot hold the request. ``reused[seq]`` is (tokens from the GPU, tokens from the host).
    ``prefilled`` and ``finish`` are notebook 10's (``RadixServer``).
    """

    def __init__(self, tiered: Any, cache: Any) -> None:
        self.tiered, self.radix, self.cache = tiered, tiered, cache
        self.locks: dict[str, Any] = {}
        self.reused: dict[str, tuple[int, int]] = {}

    def start(self, seq: str, prompt: list[int]) -> int | None:
        size = self.cache.block_size
        node, blocks = self.tiered.match(prompt[:-1])
        self.tiered.lock(node)
        slots = self.tiered.match_host(prompt[:-1], len(blocks))
        try:
            loaded = self.tiered.load_back(slots)
        except MemoryError:
            loaded = []
        reused = create_holding(self.cache, seq, list(blocks) + list(loaded))
        for block in loaded:  # load_back's reference goes to the table
            self.cache.allocator.release(block)
        if not _reserve(self.cache, seq, len(prompt) - reused, self.tiered.evict):
            self.tiered.unlock(node)
            self.cache.free(seq)
            return None
        self.locks[seq] = node
        self.reused[seq] = (len(blocks) * size, len(loaded) * size)
        return reused

    prefilled = RadixServer.prefilled
    finish = RadixServer.finish


def admitting_after_reuse(TieredRadixCache: Any, store_threshold: int = 2) -> type:  # noqa: N803
    """The learner's class, copying a block to the host only once ``store_threshold`` requests have
    asked for it (``asked``: every whole block of every request's prompt, counted at ``match_host``,
    which a server calls once per request). A block refused on its way out of the GPU is dropped, as
    when every host slot is pinned. vLLM's ``FilterReusedOffloadingManager`` does this with the lookups
    its offloading manager sees (``store_threshold``, 2 by default); SGLang's HiCache calls it
    ``write_through_selective`` (hit counts decide what is backed up)."""
    if not isinstance(store_threshold, int) or store_threshold < 2:
        raise ValueError(f"store_threshold must be an integer of at least 2, got {store_threshold!r}")

    class Admitting(TieredRadixCache):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.asked: Counter = Counter()
            self.refused = 0

        def match_host(self, tokens: Any, gpu_blocks: int) -> Any:
            self.asked.update(self.block_keys(tokens))
            return super().match_host(tokens, gpu_blocks)

        def offload(self, key: Any, block: int) -> Any:
            if key not in self.host_entries and self.asked[key] < store_threshold:
                self.refused += 1
                return None
            return super().offload(key, block)

    return Admitting


def counting(TieredRadixCache: Any) -> type:  # noqa: N803
    """The learner's class, counting the blocks ``offload`` writes to the host (a copy, not a touch)."""

    class Counting(TieredRadixCache):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.writes = 0

        def offload(self, key: Any, block: int) -> Any:
            dirty = key not in self.host_entries
            slot = super().offload(key, block)
            if dirty and slot is not None:
                self.writes += 1
            return slot

    return Counting


@dataclass
class TierRow:
    """One host size and write policy."""

    host_blocks: int
    policy: str
    run: ServerRun
    host_tokens: int
    writes: int
    loads: int

    @property
    def hit_rate(self) -> float:
        return self.run.hit_rate


def serve_one(
    classes: dict[str, Any],
    workload: ChatWorkload,
    gpu_blocks: int,
    host_blocks: int,
    policy: str,
    block_size: int,
    batch: int,
) -> TierRow:
    cache = classes["PagedKVCache"](num_blocks=gpu_blocks, block_size=block_size, **BOOKKEEPING_SHAPE)
    if host_blocks == 0:
        server: Any = RadixServer(classes["RadixCache"], cache)
    else:
        if policy not in ALL_POLICIES:
            raise ValueError(f"policy must be one of {ALL_POLICIES}, got {policy!r}")
        made = classes["TieredRadixCache"]
        if policy == SELECTIVE:
            made = admitting_after_reuse(made, STORE_THRESHOLD)
        tiered = counting(made)(cache, host_blocks, "write-through" if policy == SELECTIVE else policy)
        server = TieredServer(tiered, cache)
    run = serve_chats(workload, server, ServerRun("radix" if host_blocks == 0 else "tiered", "fcfs"), batch)
    if host_blocks == 0:
        return TierRow(0, "none", run, 0, 0, 0)
    host_tokens = sum(host for _, host in server.reused.values())
    return TierRow(host_blocks, policy, run, host_tokens, server.tiered.writes, host_tokens // block_size)


def sweep(
    TieredRadixCache: Any,
    RadixCache: Any,
    PagedKVCache: Any,
    workload: ChatWorkload,  # noqa: N803
    gpu_blocks: int = 48,
    block_size: int = 16,
    batch: int = 4,
    multiples: tuple = HOST_MULTIPLES,
    policies: tuple[str, ...] = ALL_POLICIES,
) -> list[TierRow]:
    """No host tier, then each host size (``multiples`` x the GPU pool) for each write policy: write-back,
    write-through, and write-through storing a block only from its second request on (``SELECTIVE``)."""
    classes = {"TieredRadixCache": TieredRadixCache, "RadixCache": RadixCache, "PagedKVCache": PagedKVCache}
    rows = []
    for multiple in multiples:
        host = round(multiple * gpu_blocks)
        for policy in policies if host else ("none",):
            rows.append(serve_one(classes, workload, gpu_blocks, host, policy, block_size, batch))
    return rows


def table(rows: list[TierRow], cost: CostModel = COST_MODEL, measured_bytes_per_s: float | None = None) -> str:
    """One line per host size and policy; a column of measured load times where a GPU measured its copy."""
    base = rows[0].run.prefill_tokens
    lines = [
        f"{'host':>5} {'policy':<13} {'hit rate':>8} {'from host':>9} {'prefill':>8} {'saved':>7} "
        f"{'writes':>7} {'loads':>6} {'loads/writes':>12} {'PCIe ms':>8} {'NVLink ms':>9} {'recompute ms':>12}"
        + (f" {'measured ms':>11}" if measured_bytes_per_s else "")
    ]
    for row in rows:
        useful = f"{row.loads / row.writes:>12.2f}" if row.writes else f"{'-':>12}"
        lines.append(
            f"{row.host_blocks:>5d} {row.policy:<13} {row.hit_rate:>8.3f} "
            f"{row.host_tokens / row.run.prompt_tokens:>9.3f} {row.run.prefill_tokens:>8d} "
            f"{base - row.run.prefill_tokens:>7d} {row.writes:>7d} {row.loads:>6d} {useful} "
            f"{cost.transfer_s(row.loads, cost.pcie_bytes_per_s) * 1e3:>8.2f} "
            f"{cost.transfer_s(row.loads, cost.nvlink_bytes_per_s) * 1e3:>9.2f} "
            f"{cost.prefill_s(row.host_tokens) * 1e3:>12.2f}"
            + (f" {cost.transfer_s(row.loads, measured_bytes_per_s) * 1e3:>11.2f}" if measured_bytes_per_s else "")
        )
    return "\n".join(lines)


def with_one_off_prompts(
    workload: ChatWorkload,
    clients: int = 4,
    prompts: int = 6,
    tokens: tuple[int, int] = (128, 224),
    vocab_size: int = 256,
    seed: int = 0,
) -> ChatWorkload:
    """``workload``'s chats plus ``clients`` sessions that each send ``prompts`` unrelated prompts (the
    chats' system prompt, then a document of its own, ``tokens`` long): blocks asked for once and never
    again, arriving among the chats' turns."""
    if clients < 0 or prompts < 1:
        raise ValueError(f"clients must be 0 or more and prompts positive, got {clients}, {prompts}")
    rng = random.Random(f"one-off prompts {seed}")
    system = workload.turns[0][0][: workload.parameters.get("system_tokens", 0)]
    extra = [
        [list(system) + random_tokens(rng.randint(*tokens), vocab_size, rng) for _ in range(prompts)]
        for _ in range(clients)
    ]
    parameters = {
        **workload.parameters,
        "one_off_clients": clients,
        "one_off_prompts": prompts,
        "one_off_tokens": list(tokens),
    }
    return ChatWorkload(workload.turns + extra, parameters, f"{workload.name} + one-off prompts")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conversations", type=int, default=12, help="chats (default 12)")
    parser.add_argument("--turns", type=int, default=6, help="turns per chat (default 6)")
    parser.add_argument("--gpu-blocks", type=int, default=48, help="GPU pool, blocks (default 48)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    parser.add_argument("--batch", type=int, default=4, help="requests admitted per round (default 4)")
    parser.add_argument(
        "--one-off-clients",
        type=int,
        default=0,
        help="add this many sessions of 6 unrelated one-off prompts of 128-224 tokens among the chats (default 0)",
    )
    add_bookkeeping_arguments(parser)


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_positive_integers(args, ("conversations", "turns", "gpu_blocks", "block_size", "batch"))
    TieredRadixCache = load_impl(args, "11_cache_tiers_and_routing", "TieredRadixCache")  # noqa: N806
    RadixCache = load_impl(args, "10_radix_cache", "RadixCache")  # noqa: N806
    PagedKVCache = load_impl(args, "04_fork_and_copy_on_write", "PagedKVCache")  # noqa: N806
    if args.one_off_clients < 0:
        raise SystemExit(f"--one-off-clients must be 0 or more, got {args.one_off_clients}")
    workload = multi_turn_chats(args.conversations, args.turns, seed=args.seed)
    if args.one_off_clients:
        workload = with_one_off_prompts(workload, args.one_off_clients, seed=args.seed)
    cost = cost_model_from(args, args.block_size)
    rows = sweep(TieredRadixCache, RadixCache, PagedKVCache, workload, args.gpu_blocks, args.block_size, args.batch)
    print(
        f"workload: {workload.name} {workload.parameters}; {workload.requests} requests, {workload.prompt_tokens} "
        f"prompt tokens; GPU pool {args.gpu_blocks} blocks of {args.block_size}, batch {args.batch}"
    )
    print(cost.describe())
    measured = measured_host_to_gpu(cost.block_bytes())
    if measured:
        print(
            f"measured on this GPU: pinned host -> GPU copies at {measured / 1e9:.1f} GB/s "
            f"({cost.transfer_s(1, measured) * 1e6:.1f} us per block of the model above)"
        )
    print(table(rows, cost, measured))
    return {
        "workload": workload.name,
        "parameters": workload.parameters,
        "gpu_blocks": args.gpu_blocks,
        "block_size": args.block_size,
        "batch": args.batch,
        "cost_model": cost.as_dict(),
        "rows": [
            {
                "host_blocks": row.host_blocks,
                "policy": row.policy,
                "hit_rate": round(row.hit_rate, 4),
                "host_hit_rate": round(row.host_tokens / row.run.prompt_tokens, 4),
                "prefill_tokens": row.run.prefill_tokens,
                "prefill_tokens_saved": rows[0].run.prefill_tokens - row.run.prefill_tokens,
                "host_writes": row.writes,
                "host_loads": row.loads,
                "load_ms_pcie": round(cost.transfer_s(row.loads, cost.pcie_bytes_per_s) * 1e3, 3),
                "load_ms_nvlink": round(cost.transfer_s(row.loads, cost.nvlink_bytes_per_s) * 1e3, 3),
                "recompute_ms": round(cost.prefill_s(row.host_tokens) * 1e3, 3),
                **({"load_ms_measured": round(cost.transfer_s(row.loads, measured) * 1e3, 3)} if measured else {}),
            }
            for row in rows
        ],
        "measured_host_to_gpu_bytes_per_s": measured,
        "timed": (
            "the host-to-GPU copy, on this GPU; the rest counts from the caches' bookkeeping and the stated cost model"
            if measured
            else "nothing: counts from the caches' bookkeeping, times from the stated cost model (no GPU here)"
        ),
    }


def series(rows: list[TierRow]) -> dict[str, list[tuple[int, float, int]]]:
    """For the figure (``plots.tiers_routing``): write policy -> (host blocks, hit rate, prefill tokens),
    each starting from the row without a host tier."""
    none = [(0, row.hit_rate, row.run.prefill_tokens) for row in rows if row.host_blocks == 0]
    found: dict[str, list[tuple[int, float, int]]] = {}
    for row in rows:
        if row.host_blocks:
            found.setdefault(row.policy, list(none)).append((row.host_blocks, row.hit_rate, row.run.prefill_tokens))
    return found
