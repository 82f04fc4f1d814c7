"""Continuous batching at equal KV memory: static slots against paged blocks + prefix cache.

A static slot is a block as large as the longest context the engine accepts: the previous
chapter's engine reserves ``capacity`` tokens per request because nobody knows how long an
answer will be. So the baseline is the learner's own engine, cache and prefix cache with
``block_size = capacity`` and ``slots`` blocks: one block, one slot, per request (and no
prefix can ever fill a block, so nothing is shared). The paged run cuts the same memory
into blocks of ``block_size`` tokens. Same engine loop, same model, chunk size, step budget
and seeded workload (mixed lengths, half the requests opening with one system prompt):
only the granularity of memory differs, which is what the benchmark measures.

The classes come from the notebooks in ``--impl`` (default: the course's notebooks/ folder).
"""

from __future__ import annotations

import argparse

from ..checkpoint import tiny_qwen3
from ..serving import BusyClock, EngineMetrics, ProgressBar, Serving, one_thread
from ..workloads import serving_workload
from .equal_memory import check_budget, check_fits
from .implementation import add_impl_argument, load_impl


def load_learner_engine(args: argparse.Namespace):
    """(ContinuousBatchingEngine, PagedKVCache, PrefixCache) from the notebooks in ``args.impl``."""
    engine_class = load_impl(args, "08_continuous_batching", "ContinuousBatchingEngine")
    cache_class = load_impl(args, "04_fork_and_copy_on_write", "PagedKVCache")
    prefix_class = load_impl(args, "05_prefix_caching", "PrefixCache")
    return engine_class, cache_class, prefix_class


def compare_engines(
    engine_class,
    cache_class,
    prefix_class,
    requests: int = 48,
    slots: int = 2,
    capacity: int = 1024,
    block_size: int = 16,
    chunk_size: int = 64,
    max_step_tokens: int = 256,
    seed: int = 0,
    prompt_range: tuple[int, int] = (16, 96),
    output_range: tuple[int, int] = (8, 64),
    progress: bool = True,
) -> tuple[dict[str, float | int], EngineMetrics, EngineMetrics]:
    """Serve the workload on both engines; returns (the table, static metrics, paged metrics).

    The static run holds ``slots`` blocks of ``capacity`` tokens; the paged pool gets exactly
    as many token slots: ``slots * capacity / block_size`` blocks of ``block_size``.
    """
    check_budget(slots, block_size, capacity)
    model = tiny_qwen3(seed=0)
    config = model.config
    workload = serving_workload(
        count=requests,
        vocab_size=config.vocab_size,
        prompt_range=prompt_range,
        output_range=output_range,
        seed=seed,
    )
    check_fits(workload, capacity)
    num_blocks = slots * capacity // block_size
    shape = (config.num_hidden_layers,)
    heads = (config.num_key_value_heads, config.head_dim)

    def engine(blocks: int, size: int):
        cache = cache_class(*shape, blocks, size, *heads, device=model.device, dtype=model.dtype)
        return engine_class(model, cache, prefix_class(cache), chunk_size=chunk_size, max_step_tokens=max_step_tokens)

    static, paged = engine(slots, capacity), engine(num_blocks, block_size)
    with one_thread():
        outputs = _serve_interleaved({"static": static, "paged": paged}, workload, progress)
    table = {
        "requests": requests,
        "kv_budget_tokens": slots * capacity,
        "static_slots": slots,
        "slot_capacity": capacity,
        "paged_blocks": num_blocks,
        "block_size": block_size,
        **_compared(static.metrics.summary(), paged.metrics.summary()),
        "outputs_match": outputs["static"] == outputs["paged"],
    }
    return table, static.metrics, paged.metrics


def _compared(s: dict, p: dict) -> dict[str, float | int]:
    """The table's measured columns from the static (``s``) and paged (``p``) metrics summaries."""
    return {
        "static_peak_concurrent": s["peak_running"],
        "paged_peak_concurrent": p["peak_running"],
        "static_tokens_per_second": s["tokens_per_second"],
        "paged_tokens_per_second": p["tokens_per_second"],
        "static_seconds": s["seconds"],
        "paged_seconds": p["seconds"],
        "static_steps": s["steps"],
        "paged_steps": p["steps"],
        "prefill_tokens_saved": p["prefill_tokens_saved"],
        "prefix_hit_rate": p["prefix_hit_rate"],
        "preemptions": p["preemptions"],
        "static_mean_ttft_s": s["mean_time_to_first_token_s"],
        "paged_mean_ttft_s": p["mean_time_to_first_token_s"],
        "throughput_ratio": round(p["tokens_per_second"] / s["tokens_per_second"], 2),
    }


def _serve_interleaved(engines: dict, workload, progress: bool) -> dict[str, dict[str, list[list[int]]]]:
    """Alternate one step of each engine until all finish; each engine's metrics time only its own steps.

    Whatever else the machine does then slows every engine alike, so one run gives a fair ratio.
    """
    clocks = {name: BusyClock() for name in engines}
    servings = {}
    for name, engine in engines.items():
        engine.metrics = EngineMetrics(clock=clocks[name])
        servings[name] = Serving(engine, workload)
    bar = ProgressBar(len(engines) * len(workload), "serving") if progress else None
    while not all(serving.done for serving in servings.values()):
        for name, serving in servings.items():
            if not serving.done:
                with clocks[name]:
                    serving.step()
        if bar is not None:
            bar.update(
                sum(len(s.outputs) for s in servings.values()),
                "  ".join(f"{name} {len(s.outputs)}" for name, s in servings.items()),
            )
    if bar is not None:
        bar.close()
    return {name: serving.outputs for name, serving in servings.items()}


def format_table(table: dict[str, float | int]) -> str:
    """The comparison as aligned text rows: static | paged."""
    rows = [
        (
            "requests served concurrently at peak",
            table["static_peak_concurrent"],
            table["paged_peak_concurrent"],
        ),
        ("tokens per second", table["static_tokens_per_second"], table["paged_tokens_per_second"]),
        ("seconds", table["static_seconds"], table["paged_seconds"]),
        ("engine steps", table["static_steps"], table["paged_steps"]),
        ("mean time to first token (s)", table["static_mean_ttft_s"], table["paged_mean_ttft_s"]),
        ("prefill tokens saved", 0, table["prefill_tokens_saved"]),
        ("preemptions", 0, table["preemptions"]),
    ]
    lines = [
        f"KV budget {table['kv_budget_tokens']} tokens: {table['static_slots']} slots of "
        f"{table['slot_capacity']}, or {table['paged_blocks']} blocks of {table['block_size']}",
        f"{'':38}{'static':>10}{'paged':>10}",
    ]
    lines += [f"{name:38}{static:>10}{paged:>10}" for name, static, paged in rows]
    lines.append(
        f"throughput ratio (paged / static): {table['throughput_ratio']}x; outputs identical: {table['outputs_match']}"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_argument(parser)
    parser.add_argument("--requests", type=int, default=48, help="requests in the workload (default 48)")
    parser.add_argument("--slots", type=int, default=2, help="static slots; sets the shared KV budget (default 2)")
    parser.add_argument("--capacity", type=int, default=1024, help="tokens per static slot (default 1024)")
    parser.add_argument("--block-size", type=int, default=16, help="tokens per block (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument("--plot", default=None, help="save throughput and memory over time to this image file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> dict[str, float | int]:
    engine_class, cache_class, prefix_class = load_learner_engine(args)
    table, static, paged = compare_engines(
        engine_class,
        cache_class,
        prefix_class,
        requests=args.requests,
        slots=args.slots,
        capacity=args.capacity,
        block_size=args.block_size,
        seed=args.seed,
        progress=not args.no_progress,
    )
    print(format_table(table))
    if args.plot:
        from ..plots.engine_timeline import plot_engine_timelines

        figure = plot_engine_timelines(
            {"static slots": static, "paged + prefix cache": paged}, budget_tokens=table["kv_budget_tokens"]
        )
        figure.savefig(args.plot, dpi=100, bbox_inches="tight")
    return table
