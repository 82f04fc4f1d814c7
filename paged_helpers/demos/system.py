"""The whole system on one workload and one KV budget: an ablation, one switch per row.

Rows, each the learner's engine (notebook 08) on the same seeded workload (half the requests open
with one system prompt), the same model and the same KV memory:

    static slots       one block of ``capacity`` tokens per request (the previous chapter's cache)
    paged              the same memory in blocks of ``block_size``; no prefix cache
    paged + prefix     and the prefix cache of notebook 05
    paged + prefix + kernels
                       and attention on the learner's kernels (notebooks 07 and 09) instead of
                       the gather: ``model.PagedAttention``

Columns: tokens/s (engine time only; on a CPU the kernels run in Triton's interpreter, so that
row's time measures Python, labelled as such), peak concurrency, KV memory held (blocks taken,
in tokens) against used (tokens written in them) at the peak and on average, prefill tokens the
prefix cache saved, and whether the outputs equal the static row's (greedy decoding: they must).

The classes come from the notebooks in ``--impl`` (default: the course's notebooks/ folder).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ..checkpoint import tiny_qwen3
from ..device import DEVICE
from ..model import PagedAttention
from ..serving import BusyClock, EngineMetrics, Serving, one_thread
from ..workloads import serving_workload
from .equal_memory import check_budget, check_fits
from .implementation import add_impl_argument, load_impl

COMMAND = "system"
ROWS = ("static slots", "paged", "paged + prefix", "paged + prefix + kernels")


class NoPrefixCache:
    """The prefix cache switched off: every prompt is computed in full, nothing is published."""

    def __init__(self, cache: Any) -> None:
        self.cache, self.entries = cache, {}

    def attach(self, seq: Any, prompt: list[int]) -> int:
        self.cache.create(seq)
        return 0

    def remember(self, seq: Any, tokens: list[int]) -> None:
        return None

    def evict(self, blocks_wanted: int) -> None:
        return None


class _OnKernels:
    """The model with its attention switch set: the engine calls it as it calls the model."""

    def __init__(self, model: Any, attention: PagedAttention) -> None:
        self._model, self._attention = model, attention

    def __call__(self, tokens, positions=None, cache=None):
        return self._model(tokens, positions, cache, attention=self._attention)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def kv_reading(cache: Any, block_size: int) -> tuple[int, int]:
    """(tokens held, tokens used) of ``cache`` now: blocks taken from the pool, and the slots written in them.

    A block several tables name (a fork, a shared prefix) counts once, as full as its fullest holder;
    a block only the prefix cache holds is a full block (it caches whole blocks).
    """
    num_blocks = len(cache.allocator.refs)
    held_blocks = num_blocks - cache.allocator.num_free
    filled: dict[int, int] = {}
    for seq, table in cache.tables.items():
        length = cache.lengths[seq]
        for index, block in enumerate(table):
            slots = max(0, min(block_size, length - index * block_size))
            filled[block] = max(filled.get(block, 0), slots)
    only_cached = held_blocks - len(filled)
    return held_blocks * block_size, sum(filled.values()) + max(0, only_cached) * block_size


def ablation(
    engine_class: Any,
    cache_class: Any,
    prefix_class: Any,
    decode: Any,
    prefill: Any,
    requests: int = 5,
    slots: int = 2,
    capacity: int = 128,
    block_size: int = 16,
    chunk_size: int = 32,
    max_step_tokens: int = 128,
    seed: int = 0,
    prompt_range: tuple[int, int] = (8, 24),
    output_range: tuple[int, int] = (2, 5),
    shared_prefix_tokens: int = 32,
    arrival_every: int = 1,
) -> dict[str, Any]:
    """Serve one workload on the four rows of ``ROWS`` at one budget; returns the table as a dict."""
    check_budget(slots, block_size, capacity)
    model = tiny_qwen3(seed=0)
    config = model.config
    workload = serving_workload(
        count=requests,
        vocab_size=config.vocab_size,
        prompt_range=prompt_range,
        output_range=output_range,
        shared_prefix_tokens=shared_prefix_tokens,
        # One arrival per step: a request sharing the system prompt can find it published by an earlier one.
        arrival_every=arrival_every,
        seed=seed,
    )
    check_fits(workload, capacity)
    budget = slots * capacity
    rig = _Rig(model, PagedAttention(decode=decode, prefill=prefill), engine_class, cache_class, prefix_class)
    layout = {"static slots": (slots, capacity)}
    layout.update({row: (budget // block_size, block_size) for row in ROWS[1:]})

    rows = {}
    outputs = {}
    for row in ROWS:
        blocks, size = layout[row]
        engine, cache = rig.engine(row, blocks, size, chunk_size=chunk_size, max_step_tokens=max_step_tokens)
        figures, outputs[row] = _serve_row(engine, cache, size, workload)
        rows[row] = {
            "blocks": blocks,
            "block_size": size,
            **figures,
            "outputs_match_static": outputs[row] == outputs["static slots"],
        }
    interpreted = DEVICE.type != "cuda"
    return {
        "device": DEVICE.type,
        "kernel_timing": "Triton interpreter (Python, not a GPU kernel)" if interpreted else "compiled GPU kernels",
        "requests": requests,
        "kv_budget_tokens": budget,
        "rows": rows,
        "outputs_identical": all(row["outputs_match_static"] for row in rows.values()),
    }


@dataclass(frozen=True)
class _Rig:
    """What every row shares: the model, the learner's kernels and classes; a row differs only in its switches."""

    model: Any
    kernels: PagedAttention
    engine_class: Any
    cache_class: Any
    prefix_class: Any

    def engine(self, row: str, blocks: int, size: int, *, chunk_size: int, max_step_tokens: int) -> tuple[Any, Any]:
        """(the learner's engine, its cache) for ``row``: ``blocks`` blocks of ``size`` tokens, its switches set."""
        config = self.model.config
        cache = self.cache_class(
            config.num_hidden_layers,
            blocks,
            size,
            config.num_key_value_heads,
            config.head_dim,
            device=self.model.device,
            dtype=self.model.dtype,
        )
        prefix = NoPrefixCache(cache) if row == "paged" else self.prefix_class(cache)
        runner = _OnKernels(self.model, self.kernels) if row.endswith("kernels") else self.model
        engine = self.engine_class(runner, cache, prefix, chunk_size=chunk_size, max_step_tokens=max_step_tokens)
        return engine, cache


def _serve_row(engine: Any, cache: Any, size: int, workload: Any) -> tuple[dict[str, Any], Any]:
    """(the row's figures, its outputs): the workload served to the end, KV memory read after every step."""
    clock = BusyClock()
    engine.metrics = EngineMetrics(clock=clock)
    serving = Serving(engine, workload)
    held_used = []
    with one_thread():
        while not serving.done:
            with clock:
                serving.step()
            held_used.append(kv_reading(cache, size))
    summary = engine.metrics.summary()
    peak_held, used_at_peak = max(held_used, key=lambda pair: pair[0], default=(0, 0))
    busy = [(held, used) for held, used in held_used if held]
    figures = {
        "tokens_per_second": summary["tokens_per_second"],
        "seconds": summary["seconds"],
        "peak_concurrent": summary["peak_running"],
        "peak_kv_held_tokens": peak_held,
        "kv_used_at_peak_tokens": used_at_peak,
        "mean_kv_utilisation": round(sum(u / h for h, u in busy) / len(busy), 3) if busy else 0.0,
        "prefill_tokens_saved": summary["prefill_tokens_saved"],
    }
    return figures, serving.outputs


def format_table(result: dict[str, Any]) -> str:
    """The ablation as aligned text, one line per row."""
    header = ("", "tok/s", "peak conc.", "KV held/used at peak", "mean use", "prefill saved", "same out")
    lines = [header]
    for name, row in result["rows"].items():
        speed = f"{row['tokens_per_second']:.1f}"
        if name.endswith("kernels") and result["device"] != "cuda":
            speed += " (interp.)"
        lines.append(
            (
                name,
                speed,
                str(row["peak_concurrent"]),
                f"{row['peak_kv_held_tokens']}/{row['kv_used_at_peak_tokens']}",
                f"{row['mean_kv_utilisation']:.0%}",
                str(row["prefill_tokens_saved"]),
                "yes" if row["outputs_match_static"] else "NO",
            )
        )
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    text = [
        "  ".join(
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    ]
    note = (
        f"{result['requests']} requests, {result['kv_budget_tokens']} KV tokens per row; "
        f"kernel timings: {result['kernel_timing']}"
    )
    return "\n".join([*text, note])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_argument(parser)
    # Small by default: on a CPU the kernel row runs every program of the kernels as Python.
    parser.add_argument("--requests", type=int, default=5, help="requests in the workload (default 5)")
    parser.add_argument("--slots", type=int, default=2, help="static slots; the budget is slots x capacity")
    parser.add_argument("--capacity", type=int, default=128, help="tokens per static slot (default 128)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per paged block (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    engine_class = load_impl(args, "08_continuous_batching", "ContinuousBatchingEngine")
    cache_class = load_impl(args, "04_fork_and_copy_on_write", "PagedKVCache")
    prefix_class = load_impl(args, "05_prefix_caching", "PrefixCache")
    decode = load_impl(args, "07_paged_decode_kernel", "paged_decode_attention")
    prefill = load_impl(args, "09_paged_prefill_kernel", "paged_prefill_attention")
    result = ablation(
        engine_class,
        cache_class,
        prefix_class,
        decode,
        prefill,
        requests=args.requests,
        slots=args.slots,
        capacity=args.capacity,
        block_size=args.block_size,
        seed=args.seed,
    )
    print(format_table(result))
    return result
