"""The seeded scenarios of the kernel checks (notebooks 07 and 09): inputs in the learner's shapes.

Every pool is filled with random keys and values everywhere, stale slots included, so a kernel
that reads past a sequence's length gets a different answer; block ids are handed out in a
shuffled order, so a kernel that skips the table gets a different answer too. The kernel checks
add cases the launchers never make: pools laid out in memory other than contiguously
(``layout``: a kernel must use the strides it is handed) and stale slots holding NaN
(``stale="nan"``: what a freed block may hold; a value loaded without a mask poisons the answer
even where its weight is 0). Sizes keep each scenario near 100 program-iterations or fewer in
Triton's interpreter. Nothing here runs a kernel or computes attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...device import DEVICE

__all__ = [
    "BENCHMARK_DECODE_CASE",
    "DECODE_CASES",
    "GPU_COMPILE_DECODE_CASES",
    "GPU_COMPILE_PREFILL_CASES",
    "KERNEL_DECODE_CASES",
    "KERNEL_PREFILL_CASES",
    "LAYOUTS",
    "NEGATIVE_SCORE",
    "SPLIT_K_CASES",
    "PREFILL_CASES",
    "DecodeCase",
    "DecodeInputs",
    "PrefillCase",
    "PrefillInputs",
    "decode_inputs",
    "prefill_inputs",
]

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


DECODE_CASES: tuple[DecodeCase, ...] = (
    DecodeCase(
        "one sequence of 11 tokens in a scrambled block table (blocks of 4, 2 heads, no grouping)",
        lengths=(11,),
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=16,
    ),
    DecodeCase(
        "four sequences of 1, 8, 9 and 24 tokens (one token; exactly one block; one past a block "
        "boundary; exactly three blocks), blocks of 8, tables padded to 5 blocks, group size 2",
        lengths=(1, 8, 9, 24),
        block_size=8,
        q_heads=4,
        kv_heads=2,
        head_dim=32,
        table_padding=2,
        seed=1,
    ),
    DecodeCase(
        "group size 4 (8 query heads share 2 KV heads), blocks of 16, lengths 17 and 40",
        lengths=(17, 40),
        block_size=16,
        q_heads=8,
        kv_heads=2,
        head_dim=16,
        seed=2,
    ),
    DecodeCase(
        "one KV head shared by 4 query heads, head_dim 64, blocks of 2, length 13",
        lengths=(13,),
        block_size=2,
        q_heads=4,
        kv_heads=1,
        head_dim=64,
        seed=3,
    ),
    DecodeCase(
        "a sharply peaked softmax (scores in the hundreds), length 20, blocks of 4",
        lengths=(20,),
        block_size=4,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        score_scale=100.0,
        seed=4,
    ),
    DecodeCase(
        "a long sequence: 64 tokens in 16 blocks of 4, head_dim 8",
        lengths=(64,),
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=8,
        seed=5,
    ),
    DecodeCase(
        "every score far below zero (about -150): sequences of 5 and 12 tokens, blocks of 4",
        lengths=(5, 12),
        block_size=4,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        seed=7,
        negative_scores=True,
    ),
)

# What only the kernel check runs (the launchers take contiguous pools): the kernel launched by the
# check on pools laid out otherwise, and on stale slots that hold NaN.
KERNEL_DECODE_CASES: tuple[DecodeCase, ...] = (
    *DECODE_CASES,
    DecodeCase(
        "a pool that is not contiguous: " + LAYOUTS["slot-major"] + "; lengths 6 and 13, blocks of 4, group size 2",
        lengths=(6, 13),
        block_size=4,
        q_heads=4,
        kv_heads=2,
        head_dim=16,
        seed=8,
        layout="slot-major",
    ),
    DecodeCase(
        "a pool whose " + LAYOUTS["padded"] + "; lengths 3 and 10, blocks of 8",
        lengths=(3, 10),
        block_size=8,
        q_heads=2,
        kv_heads=2,
        head_dim=16,
        seed=9,
        layout="padded",
    ),
    DecodeCase(
        "stale slots past each length hold NaN (a freed block keeps whatever its last owner left): lengths 5, 9 "
        "and 15, blocks of 4",
        lengths=(5, 9, 15),
        block_size=4,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        seed=10,
        stale="nan",
    ),
)

SPLIT_K_CASES: tuple[DecodeCase, ...] = (
    DecodeCase(
        "one split (it must give the plain decode answer), length 11, blocks of 4",
        lengths=(11,),
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=16,
        splits=1,
    ),
    DecodeCase(
        "2 splits over sequences of 1, 8, 9 and 24 tokens, blocks of 8, group size 2, padded tables",
        lengths=(1, 8, 9, 24),
        block_size=8,
        q_heads=4,
        kv_heads=2,
        head_dim=32,
        table_padding=2,
        splits=2,
        seed=1,
    ),
    DecodeCase(
        "3 splits of a 64-token sequence in 16 blocks of 4 (splits of unequal size)",
        lengths=(64,),
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=8,
        splits=3,
        seed=5,
    ),
    DecodeCase(
        "more splits than blocks: 4 splits over sequences of 1 and 5 tokens (some splits own no block)",
        lengths=(1, 5),
        block_size=4,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        splits=4,
        seed=6,
    ),
    DecodeCase(
        "3 splits with a sharply peaked softmax (scores in the hundreds), group size 4, length 20",
        lengths=(20,),
        block_size=4,
        q_heads=4,
        kv_heads=1,
        head_dim=16,
        score_scale=100.0,
        splits=3,
        seed=4,
    ),
    DecodeCase(
        "2 splits with every score far below zero (about -150): sequences of 5 and 12 tokens, blocks of 4",
        lengths=(5, 12),
        block_size=4,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        splits=2,
        seed=7,
        negative_scores=True,
    ),
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


PREFILL_CASES: tuple[PrefillCase, ...] = (
    PrefillCase(
        "a fresh prompt: 11 new tokens, no history, blocks of 4, 2 heads",
        start=0,
        new_tokens=11,
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=16,
    ),
    PrefillCase(
        "chunked prefill: 8 tokens already cached (exactly two blocks), 6 new ones, blocks of 4",
        start=8,
        new_tokens=6,
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=16,
        seed=1,
    ),
    PrefillCase(
        "a history that ends mid-block: 5 tokens cached, 9 new ones starting mid-block, blocks of 4, group size 2",
        start=5,
        new_tokens=9,
        block_size=4,
        q_heads=4,
        kv_heads=2,
        head_dim=16,
        seed=2,
    ),
    PrefillCase(
        "a chunk of 20 new tokens starting mid-block at position 13, blocks of 8, group size 4",
        start=13,
        new_tokens=20,
        block_size=8,
        q_heads=4,
        kv_heads=1,
        head_dim=32,
        seed=3,
    ),
    PrefillCase(
        "one new token after 30 cached ones (prefill of a single token), blocks of 16",
        start=30,
        new_tokens=1,
        block_size=16,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        seed=4,
    ),
    PrefillCase(
        "a sharply peaked softmax (scores in the hundreds): 4 cached tokens, 8 new, blocks of 4",
        start=4,
        new_tokens=8,
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=16,
        score_scale=100.0,
        seed=5,
    ),
    PrefillCase(
        "every score far below zero (about -150): 3 cached tokens, 6 new, blocks of 4",
        start=3,
        new_tokens=6,
        block_size=4,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        seed=6,
        negative_scores=True,
    ),
)


KERNEL_PREFILL_CASES: tuple[PrefillCase, ...] = (
    *PREFILL_CASES,
    PrefillCase(
        "a pool that is not contiguous: " + LAYOUTS["slot-major"] + "; 6 cached tokens, 7 new, blocks of 4",
        start=6,
        new_tokens=7,
        block_size=4,
        q_heads=2,
        kv_heads=1,
        head_dim=16,
        seed=7,
        layout="slot-major",
    ),
    PrefillCase(
        "a pool whose " + LAYOUTS["padded"] + "; 2 cached tokens, 5 new, blocks of 8, group size 2",
        start=2,
        new_tokens=5,
        block_size=8,
        q_heads=4,
        kv_heads=2,
        head_dim=16,
        seed=8,
        layout="padded",
    ),
    PrefillCase(
        "stale slots past the last new token hold NaN: 5 cached tokens, 6 new (the last block 3/4 full), blocks of 4",
        start=5,
        new_tokens=6,
        block_size=4,
        q_heads=2,
        kv_heads=2,
        head_dim=16,
        seed=9,
        stale="nan",
    ),
)


# --------------------------------------------------------------------------- GPU compile shapes


def _extremes(cases: tuple) -> tuple:
    """The case with the smallest block and the one with the smallest head_dim (deduplicated):
    the tiles where a GPU's minimum shapes bite first."""
    picked = [
        min(cases, key=lambda c: (c.block_size, c.head_dim)),
        min(cases, key=lambda c: (c.head_dim, c.block_size)),
    ]
    return tuple(dict.fromkeys(picked))


# One decode step of one layer of a Qwen3-8B-like model at the benchmark's largest block: the
# largest tile the GPU path runs (most registers per thread).
BENCHMARK_DECODE_CASE = DecodeCase(
    "the benchmark's shape: 32 query heads, 8 KV heads, head_dim 128, blocks of 128",
    lengths=(129,),
    block_size=128,
    q_heads=32,
    kv_heads=8,
    head_dim=128,
)

# What the kernel checks compile for CUDA targets: the smallest check tiles, where a GPU's minimum
# shapes bite (a GPU runs the same checks). Not the benchmark's largest tile: a design that holds a
# 3-D tile there can take minutes to compile, and a verdict must not hang on the machine's speed
# (its registers and spills are the benchmark's business: ``python run.py gpu-check``).
GPU_COMPILE_DECODE_CASES: tuple[DecodeCase, ...] = _extremes(DECODE_CASES)
GPU_COMPILE_PREFILL_CASES: tuple[PrefillCase, ...] = _extremes(PREFILL_CASES)
