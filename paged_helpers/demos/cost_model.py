"""The stated cost model of ``run.py tiers`` and ``run.py route``: bytes, bandwidths and FLOPs.

The model is stated, not measured: a block's bytes follow from a model's shape; moving a block takes bytes
over a link's bandwidth; recomputing (prefilling) tokens takes ``2 x parameters x tokens`` FLOPs at
a peak rate times a model FLOP utilisation (MFU). Attention's own FLOPs, which grow with the prefix,
are left out, so recompute is, if anything, underestimated. The defaults are round numbers of the
order of current hardware and a model of about Qwen3-8B's shape; every demo prints them. Where a
CUDA GPU is present, ``measured_host_to_gpu`` times the real copy (pinned host memory to the GPU),
which ``run.py tiers`` prints beside the stated links.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields, replace

import torch


@dataclass(frozen=True)
class CostModel:
    """One model of a GPU serving a transformer: what moving or recomputing a KV block costs."""

    layers: int = 36
    kv_heads: int = 8
    head_dim: int = 128
    bytes_per_value: int = 2  # bfloat16
    parameters: float = 8.2e9
    peak_flops: float = 1000e12  # FLOP/s
    mfu: float = 0.4
    pcie_bytes_per_s: float = 64e9  # nominal PCIe 5.0 x16, one direction
    nvlink_bytes_per_s: float = 450e9  # an NVLink-class host link, nominal
    block_size: int = 16

    def block_bytes(self) -> int:
        """Keys and values of one block, every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.block_size * self.bytes_per_value

    def transfer_s(self, blocks: int, bytes_per_s: float) -> float:
        return blocks * self.block_bytes() / bytes_per_s

    def prefill_s(self, tokens: int) -> float:
        return 2 * self.parameters * tokens / (self.peak_flops * self.mfu)

    def describe(self) -> str:
        block = self.block_bytes()
        return (
            f"cost model (stated, not measured): {self.layers} layers x {self.kv_heads} KV heads x {self.head_dim} "
            f"x {self.bytes_per_value} B, blocks of {self.block_size}: {block / 2**20:.2f} MiB per block; "
            f"PCIe {self.pcie_bytes_per_s / 1e9:.0f} GB/s "
            f"({self.transfer_s(1, self.pcie_bytes_per_s) * 1e6:.1f} us/block), "
            f"NVLink {self.nvlink_bytes_per_s / 1e9:.0f} GB/s "
            f"({self.transfer_s(1, self.nvlink_bytes_per_s) * 1e6:.1f} us/block); "
            f"recompute {self.parameters / 1e9:.1f}e9 parameters at {self.peak_flops / 1e12:.0f} TFLOP/s x "
            f"{self.mfu:.0%} MFU ({self.prefill_s(self.block_size) * 1e6:.0f} us per block of tokens)"
        )

    def as_dict(self) -> dict:
        return {field.name: getattr(self, field.name) for field in fields(self)}


COST_MODEL = CostModel()


def measured_host_to_gpu(block_bytes: int, blocks: int = 64, repeats: int = 5) -> float | None:
    """Bytes per second of copying ``blocks`` blocks from pinned host memory to the GPU, the load-back
    of a host tier (the best of ``repeats`` timed copies, after one warm-up); None without CUDA."""
    if not torch.cuda.is_available():
        return None
    host = torch.empty(blocks * block_bytes, dtype=torch.uint8, pin_memory=True)
    device = torch.empty_like(host, device="cuda")
    device.copy_(host, non_blocking=True)  # warm-up: the first copy pays for mapping the pages
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        device.copy_(host, non_blocking=True)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return host.numel() / best


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pcie-gbps", type=float, default=COST_MODEL.pcie_bytes_per_s / 1e9, help="PCIe GB/s (default 64)"
    )
    parser.add_argument(
        "--nvlink-gbps", type=float, default=COST_MODEL.nvlink_bytes_per_s / 1e9, help="NVLink GB/s (default 450)"
    )
    parser.add_argument(
        "--tflops", type=float, default=COST_MODEL.peak_flops / 1e12, help="peak TFLOP/s (default 1000)"
    )
    parser.add_argument("--mfu", type=float, default=COST_MODEL.mfu, help="model FLOP utilisation (default 0.4)")


def cost_model_from(args: argparse.Namespace, block_size: int) -> CostModel:
    for name in ("pcie_gbps", "nvlink_gbps", "tflops", "mfu"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    return replace(
        COST_MODEL,
        pcie_bytes_per_s=args.pcie_gbps * 1e9,
        nvlink_bytes_per_s=args.nvlink_gbps * 1e9,
        peak_flops=args.tflops * 1e12,
        mfu=args.mfu,
        block_size=block_size,
    )
