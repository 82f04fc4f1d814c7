"""The paged decode kernel: a correctness pass on the CPU, a bandwidth benchmark on a GPU.

Decode attention does almost no arithmetic per byte: each new token reads its sequence's
whole K/V history once. Its speed is therefore measured as achieved memory bandwidth: bytes
of K and V that the answer depends on, divided by the time, as a fraction of the device's
peak. Three ways of computing the same decode step are compared:

  paged kernel    the learner's ``paged_decode_attention``, reading the pool through the table
  gather + attend ``paged_helpers.reference.paged_decode_reference``: copy the history out of the
                  pool into a contiguous tensor, then plain attention (what the cache's
                  ``update`` did before the kernel)
  SDPA contiguous ``torch.nn.functional.scaled_dot_product_attention`` on a contiguous cache of
                  the same tokens (no paging at all: the bar to reach)

over batch sizes, context lengths and block sizes. In Triton's interpreter (no GPU) timing
means nothing, so there the demo only runs a tiny correctness pass.

    python run.py kernel [--impl DIR] [--batch-sizes 1 8 32] [--context-lengths 512 2048 8192]
                         [--block-sizes 16 32 64 128] [--peak-gbs 4800]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import torch

from ..device import DEVICE, INFO
from ..reference import paged_decode_reference
from .implementation import add_impl_argument, load_impl

__all__ = ["add_arguments", "run", "benchmark", "correctness_pass", "format_result", "peak_bandwidth_gbs"]

INTERPRETER_NOTE = (
    "No GPU: timing is meaningless in Triton's interpreter (each program runs as Python), so only a tiny "
    "correctness pass was run. Run this on a CUDA machine for the benchmark."
)

# Peak memory bandwidth in GB/s of common GPUs, for when the driver doesn't report clock and bus width.
_KNOWN_PEAKS_GBS = {
    "H200": 4800.0,
    "H100 SXM": 3350.0,
    "H100 PCIe": 2000.0,
    "H100": 3350.0,
    "A100-SXM4-80GB": 2039.0,
    "A100": 1555.0,
    "L40S": 864.0,
    "L4": 300.0,
    "RTX 4090": 1008.0,
    "RTX 3090": 936.0,
    "T4": 320.0,
}


def peak_bandwidth_gbs(override: float | None = None) -> float | None:
    """The device's peak memory bandwidth in GB/s: the override, the driver's figures, or a known table."""
    if override is not None:
        return override
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(DEVICE)
    clock_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:
        return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9  # double data rate
    for name, peak in _KNOWN_PEAKS_GBS.items():
        if name in props.name:
            return peak
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
    import triton.testing

    return float(triton.testing.do_bench(function, warmup=25, rep=100))


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
    import torch.nn.functional as F

    peak = peak_bandwidth_gbs(peak_gbs)
    rows = []
    for batch in batch_sizes:
        for length in context_lengths:
            for block_size in block_sizes:
                q, k_pool, v_pool, tables, lengths = _paged_batch(
                    batch, q_heads, kv_heads, head_dim, length, block_size, dtype
                )
                # The same tokens, contiguous: [B, Hkv, L, D].
                keys = k_pool[tables.long()].permute(0, 2, 1, 3, 4).reshape(batch, kv_heads, -1, head_dim)
                values = v_pool[tables.long()].permute(0, 2, 1, 3, 4).reshape(batch, kv_heads, -1, head_dim)
                keys, values = keys[:, :, :length].contiguous(), values[:, :, :length].contiguous()
                query = q[:, :, None, :]  # [B, Hq, 1, D]

                def paged(q=q, k_pool=k_pool, v_pool=v_pool, tables=tables, lengths=lengths, bs=block_size):
                    return paged_decode_attention(q, k_pool, v_pool, tables, lengths, bs)

                def gathered(
                    q=q, k_pool=k_pool, v_pool=v_pool, tables=tables, lengths=lengths, bs=block_size
                ):
                    return paged_decode_reference(q, k_pool, v_pool, tables, lengths, bs, compute_dtype=dtype)

                def sdpa(query=query, keys=keys, values=values):
                    return F.scaled_dot_product_attention(query, keys, values, enable_gqa=True)

                error = float((paged().float() - sdpa()[:, :, 0].float()).abs().max())
                kv_bytes = 2 * batch * length * kv_heads * head_dim * q.element_size()
                row = {
                    "batch": batch,
                    "context": length,
                    "block_size": block_size,
                    "max_abs_error_vs_sdpa": error,
                }
                for name, function in (("paged", paged), ("gather", gathered), ("sdpa", sdpa)):
                    ms = _time_ms(function)
                    gbs = kv_bytes / (ms * 1e-3) / 1e9
                    row[f"{name}_ms"] = round(ms, 4)
                    row[f"{name}_GBs"] = round(gbs, 1)
                    if peak:
                        row[f"{name}_of_peak"] = round(gbs / peak, 3)
                rows.append(row)
                del q, k_pool, v_pool, tables, lengths, keys, values, query
                torch.cuda.empty_cache()
    import triton

    return {
        "device": torch.cuda.get_device_name(DEVICE),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "heads": f"{q_heads} query heads, {kv_heads} KV heads, head_dim {head_dim}",
        "peak_GBs": None if peak is None else round(peak, 1),
        "paged_timing_includes": "the launcher's input validation (two small device-to-host copies)",
        "bytes_counted": "K and V of every cached token, once: 2 * tokens * kv_heads * head_dim * itemsize",
        "rows": rows,
    }


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
        "batch  context  block |  paged GB/s      gather GB/s     SDPA GB/s   (share of peak)",
    ]
    for row in result["rows"]:
        lines.append(
            f"{row['batch']:>5}  {row['context']:>7}  {row['block_size']:>5} | "
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
