"""The seeded scenarios of the kernel checks (notebooks 07 and 09): the tables of cases.

The launchers' cases (``DECODE_CASES``, ``PREFILL_CASES``, ``SPLIT_K_CASES``), what only the kernel
checks add (pools laid out otherwise, stale slots holding NaN), and the shapes the kernels are
compiled at for CUDA targets. Sizes keep each scenario near 100 program-iterations or fewer in
Triton's interpreter. A case's tensors are drawn by ``attention_inputs`` (re-exported here, where
the tests and the demos import them from).
"""

from __future__ import annotations

from dataclasses import replace

from .attention_inputs import (
    LAYOUTS,
    NEGATIVE_SCORE,
    DecodeCase,
    DecodeInputs,
    PrefillCase,
    PrefillInputs,
    decode_inputs,
    prefill_inputs,
)

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
        "a pool with " + LAYOUTS["padded"] + "; lengths 3 and 10, blocks of 8",
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


def _split(case: DecodeCase, scenario: str, splits: int, **changes) -> DecodeCase:
    """One of ``DECODE_CASES`` (its sizes and seed, but for ``changes``) shared out over ``splits`` splits."""
    return replace(case, scenario=scenario, splits=splits, **changes)


SPLIT_K_CASES: tuple[DecodeCase, ...] = (
    _split(DECODE_CASES[0], "one split (it must give the plain decode answer), length 11, blocks of 4", 1),
    _split(
        DECODE_CASES[1], "2 splits over sequences of 1, 8, 9 and 24 tokens, blocks of 8, group size 2, padded tables", 2
    ),
    _split(DECODE_CASES[5], "3 splits of a 64-token sequence in 16 blocks of 4 (splits of unequal size)", 3),
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
    _split(
        DECODE_CASES[4],
        "3 splits with a sharply peaked softmax (scores in the hundreds), group size 4, length 20",
        3,
        q_heads=4,
    ),
    _split(
        DECODE_CASES[6],
        "2 splits with every score far below zero (about -150): sequences of 5 and 12 tokens, blocks of 4",
        2,
    ),
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
        "a pool with " + LAYOUTS["padded"] + "; 2 cached tokens, 5 new, blocks of 8, group size 2",
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
