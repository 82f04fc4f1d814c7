"""The paged decode kernel: a correctness pass on the CPU, a bandwidth benchmark on a GPU.

Decode attention does almost no arithmetic per byte: each new token reads its sequence's
whole K/V history once. Its speed is therefore measured as achieved memory bandwidth: bytes
of K and V that the answer depends on, divided by the time, as a fraction of the device's
peak. Three ways of computing the same decode step are compared:

  paged kernel    the learner's ``paged_decode_attention``, reading the pool through the table
  gather + attend index the pool through the table (a copy of the history into a contiguous
                  tensor), then SDPA: what the cache's ``update`` did before the kernel
  SDPA contiguous ``torch.nn.functional.scaled_dot_product_attention`` on a contiguous cache of
                  the same tokens (no paging at all: the bar to reach)

over batch sizes, context lengths and block sizes. Every contender is timed alike, with
``triton.testing.do_bench`` (which empties L2 before every timed run), and the timed region holds
only device work: the learner's launcher is called once per shape outside it (its input validation
copies to the host), its answer is compared with SDPA there, and what is timed is a replay of the
Triton launches it made. For each shape the kernel's ``num_warps`` is chosen among 4 and 8 by
compiling both for this GPU (no spills, then the faster). Peak bandwidth comes from the device's
own properties (memory clock and bus width), or --peak-gbs. In Triton's interpreter (no GPU)
timing means nothing, so there the demo only runs a tiny correctness pass.

    python run.py kernel [--impl DIR] [--batch-sizes 1 8 32] [--context-lengths 512 2048 8192]
                         [--block-sizes 16 32 64 128] [--peak-gbs 4800]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from ..device import DEVICE, INFO
from ..reference import paged_decode_reference
from .implementation import add_impl_argument, load_impl

__all__ = [
    "Contenders",
    "add_arguments",
    "benchmark",
    "build_contenders",
    "correctness_pass",
    "format_result",
    "l2_flush",
    "peak_bandwidth_gbs",
    "run",
]

INTERPRETER_NOTE = (
    "No GPU: timing is meaningless in Triton's interpreter (each program runs as Python), so only a tiny "
    "correctness pass was run. Run this on a CUDA machine for the benchmark."
)


def peak_bandwidth_gbs(override: float | None = None) -> float | None:
    """The device's peak memory bandwidth in GB/s: the override, else from the driver's memory clock
    and bus width (double data rate); None when neither is known (no GPU, or an old driver)."""
    if override is not None:
        return override
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(DEVICE)
    clock_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9
    return None


def _paged_batch(
    batch: int,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    length: int,
    block_size: int,
    dtype: torch.dtype,
    seed: int = 0,
):
    """A pool holding ``batch`` sequences of ``length`` tokens in scrambled blocks, plus queries."""
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    per_sequence = -(-length // block_size)
    num_blocks = batch * per_sequence
    shape = (num_blocks, kv_heads, block_size, head_dim)
    k_pool = torch.randn(shape, generator=generator, device=DEVICE, dtype=dtype)
    v_pool = torch.randn(shape, generator=generator, device=DEVICE, dtype=dtype)
    order = torch.randperm(num_blocks, generator=generator, device=DEVICE)
    tables = order.reshape(batch, per_sequence).to(torch.int32)  # [B, max_blocks]
    lengths = torch.full((batch,), length, dtype=torch.int32, device=DEVICE)
    q = torch.randn((batch, q_heads, head_dim), generator=generator, device=DEVICE, dtype=dtype)
    return q, k_pool, v_pool, tables, lengths


def correctness_pass(paged_decode_attention: Callable) -> dict:
    """Two short sequences through the learner's kernel against the reference (seconds in the interpreter)."""
    dtype = torch.float32 if DEVICE.type == "cpu" else torch.float16
    q, k_pool, v_pool, tables, lengths = _paged_batch(2, 4, 2, 16, 12, 4, dtype)
    lengths = torch.tensor([5, 12], dtype=torch.int32, device=DEVICE)
    started = time.perf_counter()
    out = paged_decode_attention(q, k_pool, v_pool, tables, lengths, 4)
    seconds = time.perf_counter() - started
    expected = paged_decode_reference(q, k_pool, v_pool, tables, lengths, 4, compute_dtype=torch.float64)
    return {
        "device": str(DEVICE),
        "note": INTERPRETER_NOTE if INFO.triton_interpreted else "correctness pass only",
        "shapes": "batch 2, 4 query heads, 2 KV heads, head_dim 16, blocks of 4, lengths 5 and 12",
        "max_abs_error": float((out.double() - expected.double()).abs().max()),
        "seconds": round(seconds, 3),
    }


def _time_ms(function: Callable[[], object]) -> float:
    """Mean milliseconds of ``function`` by ``triton.testing.do_bench``, which empties L2 before every
    timed run (it zeroes a buffer of its own: see ``l2_flush``), so each run reads K/V from HBM."""
    import triton.testing

    return float(triton.testing.do_bench(function, warmup=25, rep=100))


def l2_flush() -> dict:
    """The buffer do_bench writes before each timed run, against this GPU's L2: the flush holds only
    if the buffer is the larger (Triton 3.9 zeroes 256 MB; an H100's L2 is 50 MB)."""
    from triton import runtime

    buffer = runtime.driver.active.get_empty_cache_for_benchmark()
    written = buffer.numel() * buffer.element_size()
    l2 = getattr(torch.cuda.get_device_properties(DEVICE), "L2_cache_size", 0) or None
    return {"bytes_written": written, "l2_bytes": l2, "larger_than_l2": None if l2 is None else written > l2}


@dataclass
class Contenders:
    """One shape's three ways of computing a decode step, ready to time.

    ``timed`` maps each name to a zero-argument callable holding device work only (no input
    validation, no host copy); everything else (the learner's launcher, with its validation,
    and the comparison with SDPA) happened when this was built.
    """

    timed: dict[str, Callable[[], object]]
    max_abs_error_vs_sdpa: float
    kv_bytes: int
    kernel_launches: list = field(default_factory=list)


def build_contenders(
    paged_decode_attention: Callable,
    batch: int,
    length: int,
    block_size: int,
    q_heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    num_warps: int | None = None,
) -> Contenders:
    """Inputs for one shape, the learner's answer checked against SDPA, and the timed callables."""
    import torch.nn.functional as F

    from ..running.gpu_compile import record_launches

    q, k_pool, v_pool, tables, lengths = _paged_batch(batch, q_heads, kv_heads, head_dim, length, block_size, dtype)
    # The same tokens, contiguous: [B, Hkv, L, D].
    positions = torch.arange(length, device=DEVICE)
    physical = tables.long()[:, positions // block_size]  # [B, L]
    slots = positions % block_size  # [L]
    keys = k_pool[physical, :, slots].transpose(1, 2).contiguous()
    values = v_pool[physical, :, slots].transpose(1, 2).contiguous()
    query = q[:, :, None, :]  # [B, Hq, 1, D]

    # Outside the timed region: the launcher (validation included) once, its answer checked.
    answer = paged_decode_attention(q, k_pool, v_pool, tables, lengths, block_size)
    expected = F.scaled_dot_product_attention(query, keys, values, enable_gqa=True)[:, :, 0]
    error = float((answer.float() - expected.float()).abs().max())
    _, launches = record_launches(paged_decode_attention, (q, k_pool, v_pool, tables, lengths, block_size))
    overrides = {} if num_warps is None else {"num_warps": num_warps}

    def paged() -> None:
        for launch in launches:
            launch.replay(**overrides)

    def gathered() -> torch.Tensor:
        # What a cache's update did before the kernel: copy the history out, then attend.
        history_k = k_pool[physical, :, slots].transpose(1, 2)  # [B, Hkv, L, D]
        history_v = v_pool[physical, :, slots].transpose(1, 2)
        return F.scaled_dot_product_attention(query, history_k, history_v, enable_gqa=True)

    def sdpa() -> torch.Tensor:
        return F.scaled_dot_product_attention(query, keys, values, enable_gqa=True)

    return Contenders(
        timed={"paged": paged, "gather": gathered, "sdpa": sdpa},
        max_abs_error_vs_sdpa=error,
        kv_bytes=2 * batch * length * kv_heads * head_dim * q.element_size(),
        kernel_launches=launches,
    )


# num_warps tried for the paged kernel at each shape (Triton's default is 4).
WARP_CHOICES = (4, 8)


def _compiled_warps(launches: list, capability: int) -> dict[int, dict]:
    """Registers and spills of the recorded launches at each of WARP_CHOICES, compiled for this GPU."""
    from ..running.gpu_compile import compile_launches, describe_launch

    facts = {}
    for warps in WARP_CHOICES:
        results = compile_launches([describe_launch(launch, num_warps=warps) for launch in launches], (capability,))
        facts[warps] = {
            "ok": all(r.ok for r in results),
            "registers": max((r.registers or 0) for r in results),
            "spill_bytes": sum((r.spill_bytes or 0) for r in results),
        }
    return facts


def _choose_warps(contenders_for: Callable[[int], Contenders], facts: dict[int, dict]) -> tuple[int, float]:
    """The fastest num_warps among those that compile without spills (else the fewest spills)."""
    clean = [w for w, f in facts.items() if f["ok"] and not f["spill_bytes"]]
    candidates = clean or [min(facts, key=lambda w: (not facts[w]["ok"], facts[w]["spill_bytes"]))]
    timings = {w: _time_ms(contenders_for(w).timed["paged"]) for w in candidates}
    best = min(timings, key=timings.get)
    return best, timings[best]


def benchmark(
    paged_decode_attention: Callable,
    batch_sizes: Sequence[int] = (1, 8, 32),
    context_lengths: Sequence[int] = (512, 2048, 8192),
    block_sizes: Sequence[int] = (16, 32, 64, 128),
    q_heads: int = 32,
    kv_heads: int = 8,
    head_dim: int = 128,
    dtype: torch.dtype = torch.bfloat16,
    peak_gbs: float | None = None,
) -> dict:
    """Achieved bandwidth of the paged kernel, the gather reference and SDPA (GPU); else a correctness pass.

    The default shape is one layer of a Qwen3-8B-like model (32 query heads, 8 KV heads, head_dim 128).
    """
    if DEVICE.type != "cuda" or INFO.triton_interpreted:
        return correctness_pass(paged_decode_attention)
    import triton

    peak = peak_bandwidth_gbs(peak_gbs)
    major, minor = torch.cuda.get_device_capability(DEVICE)
    rows = []
    for batch in batch_sizes:
        for length in context_lengths:
            for block_size in block_sizes:
                shape = (batch, length, block_size, q_heads, kv_heads, head_dim, dtype)
                rows.append(_measured_row(paged_decode_attention, shape, 10 * major + minor, peak))
                torch.cuda.empty_cache()
    return {
        "device": torch.cuda.get_device_name(DEVICE),
        "capability": f"sm_{major}{minor}",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "heads": f"{q_heads} query heads, {kv_heads} KV heads, head_dim {head_dim}",
        "peak_GBs": None if peak is None else round(peak, 1),
        "timed_region": (
            "device work only, each contender with triton.testing.do_bench: paged = replay of the kernel "
            "launches the learner's launcher made (validated and checked once, outside); gather = index the "
            "pool + SDPA; sdpa = SDPA on a contiguous cache"
        ),
        "bytes_counted": "K and V of every cached token, once: 2 * tokens * kv_heads * head_dim * itemsize",
        "l2_flush": l2_flush(),
        "rows": rows,
    }


def _measured_row(paged_decode_attention: Callable, shape: tuple, capability: int, peak: float | None) -> dict:
    """One shape's row: the kernel at its fastest num_warps, the gather path and SDPA, in ms, GB/s and share of peak."""
    batch, length, block_size = shape[:3]
    contenders = build_contenders(paged_decode_attention, *shape)
    facts = _compiled_warps(contenders.kernel_launches, capability)
    warps, paged_ms = _choose_warps(lambda w: build_contenders(paged_decode_attention, *shape, num_warps=w), facts)
    row = {
        "batch": batch,
        "context": length,
        "block_size": block_size,
        "max_abs_error_vs_sdpa": contenders.max_abs_error_vs_sdpa,
        "num_warps": warps,
        "registers": facts[warps]["registers"],
        "spill_bytes": facts[warps]["spill_bytes"],
    }
    timings = {"paged": paged_ms}
    timings.update({name: _time_ms(contenders.timed[name]) for name in ("gather", "sdpa")})
    for name, ms in timings.items():
        gbs = contenders.kv_bytes / (ms * 1e-3) / 1e9
        row[f"{name}_ms"] = round(ms, 4)
        row[f"{name}_GBs"] = round(gbs, 1)
        if peak:
            row[f"{name}_of_peak"] = round(gbs / peak, 3)
    return row


def format_result(result: dict) -> str:
    """A readable table of ``benchmark``'s result (or the correctness pass's lines) for a notebook."""
    if "rows" not in result:
        return "\n".join(f"{key}: {value}" for key, value in result.items())
    header = [f"{key}: {result[key]}" for key in ("device", "torch", "triton", "dtype", "heads", "peak_GBs")]
    has_peak = result.get("peak_GBs") is not None

    def cell(row: dict, name: str) -> str:
        share = f" ({row[f'{name}_of_peak']:.0%})" if has_peak else ""
        return f"{row[f'{name}_GBs']:>8.0f}{share:<7}"

    lines = [
        *header,
        "",
        "batch  context  block warps |  paged GB/s      gather GB/s     SDPA GB/s   (share of peak)",
    ]
    for row in result["rows"]:
        lines.append(
            f"{row['batch']:>5}  {row['context']:>7}  {row['block_size']:>5} {row['num_warps']:>5} | "
            f"{cell(row, 'paged')}  {cell(row, 'gather')}  {cell(row, 'sdpa')}"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_impl_argument(parser)
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=[1, 8, 32],
        help="sequences per step (GPU; default 1 8 32)",
    )
    parser.add_argument(
        "--context-lengths",
        type=int,
        nargs="+",
        default=[512, 2048, 8192],
        help="tokens cached per sequence (GPU; default 512 2048 8192)",
    )
    parser.add_argument(
        "--block-sizes",
        type=int,
        nargs="+",
        default=[16, 32, 64, 128],
        help="tokens per block (GPU; default 16 32 64 128)",
    )
    parser.add_argument(
        "--dtype",
        choices=["bfloat16", "float16"],
        default="bfloat16",
        help="K/V dtype (GPU; default bfloat16)",
    )
    parser.add_argument("--peak-gbs", type=float, default=None, help="device peak bandwidth in GB/s")


def run(args: argparse.Namespace) -> dict:
    paged_decode_attention = load_impl(args, "07_paged_decode_kernel", "paged_decode_attention")
    return benchmark(
        paged_decode_attention,
        batch_sizes=args.batch_sizes,
        context_lengths=args.context_lengths,
        block_sizes=args.block_sizes,
        dtype=getattr(torch, args.dtype),
        peak_gbs=args.peak_gbs,
    )
