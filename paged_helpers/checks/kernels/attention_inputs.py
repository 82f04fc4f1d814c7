"""The kernel checks' cases (notebooks 07 and 09) and the seeded tensors each is drawn into, in the learner's shapes.

A ``DecodeCase`` or ``PrefillCase`` says the sizes and the oddities of one scenario; ``decode_inputs``
and ``prefill_inputs`` draw its tensors from its seed and the check's. Every pool is filled with
random keys and values everywhere, stale slots included, so a kernel that reads past a sequence's
length gets a different answer; block ids are handed out in a shuffled order, so a kernel that skips
the table gets a different answer too. ``layout`` lays a pool out in memory other than contiguously
(a kernel must use the strides it is handed) and ``stale="nan"`` poisons the stale slots (what a freed
block may hold; a value loaded without a mask poisons the answer even where its weight is 0). Nothing
here runs a kernel or computes attention; the tables of cases are ``scenarios``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...device import DEVICE

# Blocks left unused at the end of every pool, so that a kernel reading a few heads or blocks
# too far still reads inside the pool (and its answer can be recognised as a known bug).
_SPARE_BLOCKS = 8


@dataclass(frozen=True)
class DecodeCase:
    """One batch of decode queries over a scrambled pool."""

    scenario: str
    lengths: tuple[int, ...]
    block_size: int
    q_heads: int
    kv_heads: int
    head_dim: int
    table_padding: int = 0  # extra entries at the end of every table row (value: block 0)
    score_scale: float = 1.0  # multiplies q: large values make a sharply peaked softmax
    splits: int = 1  # only for the split-K check
    seed: int = 0
    negative_scores: bool = False  # every score near -150 (see _push_scores_down)
    layout: str = "contiguous"  # how the pools lie in memory (see _laid_out)
    stale: str = "random"  # what stale slots past the length hold: "random" or "nan"


@dataclass
class DecodeInputs:
    q: torch.Tensor
    k_pool: torch.Tensor
    v_pool: torch.Tensor
    block_tables: torch.Tensor
    lengths: torch.Tensor
    block_size: int

    def args(self) -> tuple:
        return (self.q, self.k_pool, self.v_pool, self.block_tables, self.lengths, self.block_size)


def _scrambled_pool(blocks_used: int, kv_heads: int, block_size: int, head_dim: int, generator: torch.Generator):
    """Random K and V everywhere (stale data in unused slots too) and a random order of block ids."""
    num_blocks = blocks_used + _SPARE_BLOCKS
    shape = (num_blocks, kv_heads, block_size, head_dim)
    k_pool = torch.randn(shape, generator=generator, dtype=torch.float64)
    v_pool = torch.randn(shape, generator=generator, dtype=torch.float64)
    # Physical ids come from the low part of the pool, shuffled; block 0 is used by someone.
    order = torch.randperm(blocks_used, generator=generator)
    return k_pool, v_pool, order


# How far below zero the scores of a negative_scores case sit: exp(-150) underflows to 0 in float32
# (anything below about -104 does), so a running max that starts at 0 instead of -inf sums zeros.
NEGATIVE_SCORE = -150.0


def _push_scores_down(q: torch.Tensor, k_pool: torch.Tensor) -> None:
    """Make every score q . k / sqrt(head_dim) about NEGATIVE_SCORE (+- 15), in place.

    Every key (stale slots too) gets +10 in dimension 0 and every query -(15 sqrt(head_dim))
    there: the product dominates the random rest, and the scores still differ from key to key.
    """
    head_dim = q.shape[-1]
    k_pool[..., 0] += 10.0
    q[..., 0] = NEGATIVE_SCORE / 10.0 * head_dim**0.5


# Values of head_dim padding in a "padded" pool: NaN, so a kernel reading them is seen at once.
_PADDING = 8
LAYOUTS = {
    "contiguous": "contiguous [blocks, kv_heads, block_size, head_dim]",
    "slot-major": "stored [blocks, block_size, kv_heads, head_dim] and viewed as [blocks, kv_heads, block_size, "
    "head_dim] (strides differ from a contiguous pool's)",
    "padded": "rows of head_dim padded to head_dim + 8 in memory, and the pool starting one block into its storage",
}


def _laid_out(pool: torch.Tensor, layout: str) -> torch.Tensor:
    """``pool`` (contiguous [N, kv_heads, block, D]) with the same values, laid out in memory as
    ``layout`` says (``LAYOUTS``): a kernel that assumes contiguous strides reads other values."""
    num_blocks, kv_heads, block_size, head_dim = pool.shape
    if layout == "contiguous":
        return pool
    if layout == "slot-major":
        stored = torch.empty((num_blocks, block_size, kv_heads, head_dim), dtype=pool.dtype, device=pool.device)
        return stored.permute(0, 2, 1, 3).copy_(pool)
    if layout == "padded":
        shape = (num_blocks + 1, kv_heads, block_size, head_dim + _PADDING)
        stored = torch.full(shape, float("nan"), dtype=pool.dtype, device=pool.device)
        return stored[1:, :, :, :head_dim].copy_(pool)
    raise ValueError(f"no such layout: {layout!r}")


def _poison_stale(pool: torch.Tensor, table: torch.Tensor, length: int) -> None:
    """NaN in the slots of the last block of a sequence of ``length`` tokens past its end, in place."""
    block_size = pool.shape[2]
    if length % block_size:
        pool[int(table[(length - 1) // block_size]), :, length % block_size :, :] = float("nan")


def decode_inputs(case: DecodeCase, dtype: torch.dtype, seed: int = 0) -> DecodeInputs:
    generator = torch.Generator().manual_seed(1000 + case.seed + 7919 * seed)
    per_sequence = [-(-length // case.block_size) for length in case.lengths]
    k_pool, v_pool, order = _scrambled_pool(sum(per_sequence), case.kv_heads, case.block_size, case.head_dim, generator)
    width = max(per_sequence) + case.table_padding
    tables = torch.zeros((len(case.lengths), width), dtype=torch.int32)
    used = 0
    for row, count in enumerate(per_sequence):
        tables[row, :count] = order[used : used + count].to(torch.int32)
        used += count
    q = torch.randn((len(case.lengths), case.q_heads, case.head_dim), generator=generator, dtype=torch.float64)
    q = q * case.score_scale
    if case.negative_scores:
        _push_scores_down(q, k_pool)
    if case.stale == "nan":
        for row, length in enumerate(case.lengths):
            _poison_stale(k_pool, tables[row], length)
            _poison_stale(v_pool, tables[row], length)
    return DecodeInputs(
        q=q.to(dtype).to(DEVICE),
        k_pool=_laid_out(k_pool.to(dtype).to(DEVICE), case.layout),
        v_pool=_laid_out(v_pool.to(dtype).to(DEVICE), case.layout),
        block_tables=tables.to(DEVICE),
        lengths=torch.tensor(case.lengths, dtype=torch.int32, device=DEVICE),
        block_size=case.block_size,
    )


@dataclass(frozen=True)
class PrefillCase:
    """New tokens of one sequence at positions start .. start + new_tokens - 1."""

    scenario: str
    start: int
    new_tokens: int
    block_size: int
    q_heads: int
    kv_heads: int
    head_dim: int
    table_padding: int = 1
    score_scale: float = 1.0
    seed: int = 0
    negative_scores: bool = False  # every score near -150 (see _push_scores_down)
    layout: str = "contiguous"  # how the pools lie in memory (see _laid_out)
    stale: str = "random"  # what stale slots past start + new_tokens hold: "random" or "nan"


@dataclass
class PrefillInputs:
    q: torch.Tensor
    k_pool: torch.Tensor
    v_pool: torch.Tensor
    block_table: torch.Tensor
    start: int
    block_size: int

    def args(self) -> tuple:
        return (self.q, self.k_pool, self.v_pool, self.block_table, self.start, self.block_size)


def prefill_inputs(case: PrefillCase, dtype: torch.dtype, seed: int = 0) -> PrefillInputs:
    generator = torch.Generator().manual_seed(2000 + case.seed + 7919 * seed)
    blocks = -(-(case.start + case.new_tokens) // case.block_size)
    k_pool, v_pool, order = _scrambled_pool(blocks, case.kv_heads, case.block_size, case.head_dim, generator)
    table = torch.zeros(blocks + case.table_padding, dtype=torch.int32)
    table[:blocks] = order.to(torch.int32)
    q = torch.randn((case.new_tokens, case.q_heads, case.head_dim), generator=generator, dtype=torch.float64)
    if case.negative_scores:
        _push_scores_down(q, k_pool)
    if case.stale == "nan":
        _poison_stale(k_pool, table, case.start + case.new_tokens)
        _poison_stale(v_pool, table, case.start + case.new_tokens)
    return PrefillInputs(
        q=(q * case.score_scale).to(dtype).to(DEVICE),
        k_pool=_laid_out(k_pool.to(dtype).to(DEVICE), case.layout),
        v_pool=_laid_out(v_pool.to(dtype).to(DEVICE), case.layout),
        block_table=table.to(DEVICE),
        start=case.start,
        block_size=case.block_size,
    )
