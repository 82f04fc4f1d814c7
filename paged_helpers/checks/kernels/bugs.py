"""Classic mistakes in paged attention kernels, recomputed so that a check can name them.

Each ``Bug`` says how a wrong kernel computes its answer (which keys a query sees, which KV
head it reads, whether the table is consulted, the scale, whether the online softmax rescales)
and what to tell the learner. ``decode_as(bug, inputs)`` and ``prefill_as(bug, inputs)`` replay
a scenario block by block in float64 the way that wrong kernel would; when the learner's output
matches, the check names the bug. These are deliberately wrong computations, not a kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .attention_inputs import DecodeInputs, PrefillInputs

__all__ = ["Bug", "DECODE_BUGS", "PREFILL_BUGS", "decode_as", "prefill_as"]


@dataclass(frozen=True)
class Bug:
    """A classic mistake: how to recompute its answer, and what to tell the learner."""

    diagnosis: str
    table_lookup: bool = True
    kv_head: str = "h // group"  # or "h", or "h % kv_heads"
    scale: str = "1/sqrt(d)"  # or "none", or "1/d"
    rescale: bool = True
    keys: str = "right"  # which key positions a query sees; see _allowed_keys
    values: str = "masked"  # or "unmasked": stale values enter the sum with weight 0 (NaN stays NaN)
    strides: str = "given"  # or "contiguous": the pool read as if it were contiguous in memory


_COMMON_BUGS = (
    Bug(
        "your kernel loaded values (V) of slots past the end of the sequence without a mask. Their scores are "
        "-inf, so their weight is exp(-inf) = 0, but these slots hold NaN here (a freed block keeps whatever its "
        "last owner left), and 0 x NaN = NaN: the whole output row became NaN. Load V with the same mask as K "
        "(mask=valid[:, None], other=0.0).",
        values="unmasked",
    ),
    Bug(
        "your kernel read the pool as if it were contiguous in memory: its addresses came from the shape "
        "(for example block * kv_heads * BLOCK * D) instead of the strides it was handed. Here the pool is "
        "laid out otherwise, as a pool taken from a larger buffer or stored in another order can be: build "
        "every address from s_pool_block, s_pool_head and s_pool_slot.",
        strides="contiguous",
    ),
    Bug(
        "your kernel read logical block i from physical block i: it never looked the block up in the block "
        "table. Load the physical block number from the table (row of this sequence, entry i) and build the "
        "K/V addresses from it.",
        table_lookup=False,
    ),
    Bug(
        "query head h read KV head h. With grouped-query attention, query heads h = g*group .. g*group + "
        "group - 1 share KV head g: use kv_head = h // group (group = q_heads // kv_heads).",
        kv_head="h",
    ),
    Bug(
        "query head h read KV head h % kv_heads. The query heads of a group are consecutive: query head h "
        "shares KV head h // group (group = q_heads // kv_heads).",
        kv_head="h % kv_heads",
    ),
    Bug(
        "the scores were not multiplied by scale = 1 / sqrt(head_dim): multiply q . k by it before the "
        "softmax (and pass 1 / math.sqrt(head_dim) from the launcher).",
        scale="none",
    ),
    Bug("the scores were scaled by 1 / head_dim instead of 1 / sqrt(head_dim).", scale="1/d"),
    Bug(
        "your online softmax does not rescale what it has already summed when the running max grows. "
        "With m_new = max(m, max(s)), multiply l and acc by alpha = exp(m - m_new) before adding this "
        "block's terms.",
        rescale=False,
    ),
)

DECODE_BUGS = (
    *_COMMON_BUGS,
    Bug(
        "positions at or past the sequence's length took part in the softmax: the last block is only partly "
        "filled. Mask slots with i * BLOCK + slot >= length: load them with a mask and give them a score of "
        "-inf.",
        keys="whole blocks",
    ),
    Bug(
        "positions at or past the sequence's length took part in the softmax (as zeros: the loads were "
        "masked, but their scores were not). Set the scores of slots with i * BLOCK + slot >= length to "
        "-inf before the max and the exp.",
        keys="whole blocks, zeros past the length",
    ),
)

PREFILL_BUGS = (
    *_COMMON_BUGS,
    Bug(
        "the causal mask is off by one: a new token did not attend to its own position. Token t sits at "
        "position start + t and sees keys 0 .. start + t inclusive (key_position <= query_position).",
        keys="strictly before",
    ),
    Bug(
        "the causal mask is off by one: a new token also attended to the next position. Token t sits at "
        "position start + t and sees keys 0 .. start + t inclusive, no further.",
        keys="one past",
    ),
    Bug(
        "the causal mask ignores the history: new token t was compared with position t instead of "
        "start + t. Query positions are start + row.",
        keys="positions from 0",
    ),
    Bug(
        "there is no causal mask: every new token attended to the whole chunk, later tokens included. "
        "Mask keys whose position is greater than the query's position.",
        keys="all",
    ),
    Bug(
        "the new tokens did not attend to the history: your loop skipped the blocks before the one holding "
        "position start. It must begin at logical block 0: the cached tokens are in the pool too, and every "
        "new token attends to them.",
        keys="from start's block",
    ),
)


@dataclass(frozen=True)
class _Query:
    """Where one query row sits: it should see keys 0 .. limit - 1 of the ``total`` in the cache.

    For decode, limit = total = the sequence's length and position is unused; for prefill,
    position = start + row and limit = position + 1.
    """

    limit: int
    total: int
    start: int = 0
    position: int = 0
    block_size: int = 1


def _allowed_keys(bug: Bug, positions: torch.Tensor, query: _Query) -> torch.Tensor:
    """Which of ``positions`` a query attends to under ``bug``."""
    rules = {
        "right": lambda: positions < query.limit,
        "whole blocks": lambda: torch.ones_like(positions, dtype=torch.bool),
        "whole blocks, zeros past the length": lambda: torch.ones_like(positions, dtype=torch.bool),
        "strictly before": lambda: positions < query.position,
        "one past": lambda: (positions <= query.position + 1) & (positions < query.total),
        "positions from 0": lambda: positions <= query.position - query.start,
        "all": lambda: positions < query.total,
        "from start's block": lambda: (
            (positions >= query.start - query.start % query.block_size) & (positions <= query.position)
        ),
    }
    return rules[bug.keys]()


def _keys_spanned(bug: Bug, query: _Query) -> int:
    """How many positions the buggy loop walks over (whole blocks are read up to this one)."""
    if bug.keys == "one past":
        return min(query.limit + 1, query.total)
    if bug.keys == "all":
        return query.total
    return query.limit


def _attend_like(
    bug: Bug, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, table: torch.Tensor, query: _Query
) -> torch.Tensor | None:
    """One query row q [Hq, D] as ``bug`` computes it, block by block.

    Returns None when the bug would read outside the pool (then it can't be recognised).
    """
    q_heads, head_dim = q.shape
    num_blocks, kv_heads, block_size, _ = k_pool.shape
    group = q_heads // kv_heads
    blocks = -(-_keys_spanned(bug, query) // block_size)
    positions = torch.arange(blocks * block_size)
    logical = positions // block_size
    physical = logical if not bug.table_lookup else table.long()[logical]
    allowed = _allowed_keys(bug, positions, query)
    scale = {"1/sqrt(d)": 1 / math.sqrt(head_dim), "none": 1.0, "1/d": 1 / head_dim}[bug.scale]
    flat_k = k_pool.reshape(num_blocks * kv_heads, block_size, head_dim)
    flat_v = v_pool.reshape(num_blocks * kv_heads, block_size, head_dim)
    out = torch.empty_like(q)
    for h in range(q_heads):
        kv = {"h // group": h // group, "h": h, "h % kv_heads": h % kv_heads}[bug.kv_head]
        rows = physical * kv_heads + kv
        if int(rows.max()) >= num_blocks * kv_heads:
            return None
        keys = flat_k[rows, positions % block_size]  # [P, D]
        values = flat_v[rows, positions % block_size]
        if bug.values == "masked":  # what a masked load gives where no key is: 0, never a stale NaN
            keys = torch.where(allowed[:, None], keys, 0.0)
            values = torch.where(allowed[:, None], values, 0.0)
        if bug.keys == "whole blocks, zeros past the length":
            keys = torch.where((positions < query.limit)[:, None], keys, 0.0)
            values = torch.where((positions < query.limit)[:, None], values, 0.0)
        scores = (keys @ q[h]) * scale
        scores = scores.masked_fill(~allowed, -math.inf)
        out[h] = _weighted_values(scores, values, block_size, bug.rescale)
    return out


def _weighted_values(scores: torch.Tensor, values: torch.Tensor, block_size: int, rescale: bool) -> torch.Tensor:
    """softmax(scores) @ values; without ``rescale``, as an online softmax that forgets to rescale.

    The buggy version walks the blocks, subtracts each new running max from the new block's
    scores only, and adds to sums that were computed against the older, smaller max.
    """
    if rescale:
        return torch.softmax(scores, dim=0) @ values
    m = torch.tensor(-math.inf, dtype=scores.dtype)
    total = torch.zeros((), dtype=scores.dtype)
    weighted = torch.zeros(values.shape[1], dtype=values.dtype)
    for first in range(0, scores.numel(), block_size):
        block_scores, block_values = scores[first : first + block_size], values[first : first + block_size]
        m = torch.maximum(m, block_scores.max())
        if torch.isinf(m) and m < 0:  # no key seen yet: nothing to add
            continue
        p = torch.exp(block_scores - m)
        total = total + p.sum()
        weighted = weighted + p @ block_values
    return weighted / total


def _pools(bug: Bug, k_pool: torch.Tensor, v_pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The pools as ``bug`` reads them, in float64 on the CPU; None when it reads outside their storage."""
    if bug.strides == "contiguous":
        if k_pool.is_contiguous():
            return None  # the same as the right answer: nothing to recognise
        try:
            k_pool, v_pool = (torch.as_strided(p, p.shape, torch.empty(p.shape).stride(), p.storage_offset())
                              for p in (k_pool, v_pool))  # fmt: skip
            k_pool, v_pool = k_pool.clone(), v_pool.clone()
        except RuntimeError:  # past the end of the storage
            return None
    return k_pool.double().cpu(), v_pool.double().cpu()


def decode_as(bug: Bug, inputs: DecodeInputs) -> torch.Tensor | None:
    pools = _pools(bug, inputs.k_pool, inputs.v_pool)
    if pools is None:
        return None
    q, (k_pool, v_pool) = inputs.q.double().cpu(), pools
    rows = []
    for b, length in enumerate(inputs.lengths.tolist()):
        row = _attend_like(bug, q[b], k_pool, v_pool, inputs.block_tables[b].cpu(), _Query(length, length))
        if row is None:
            return None
        rows.append(row)
    return torch.stack(rows)


def prefill_as(bug: Bug, inputs: PrefillInputs) -> torch.Tensor | None:
    pools = _pools(bug, inputs.k_pool, inputs.v_pool)
    if pools is None:
        return None
    q, (k_pool, v_pool) = inputs.q.double().cpu(), pools
    total = inputs.start + q.shape[0]
    rows = []
    for t in range(q.shape[0]):
        position = inputs.start + t
        query = _Query(position + 1, total, inputs.start, position, inputs.block_size)
        row = _attend_like(bug, q[t], k_pool, v_pool, inputs.block_table.cpu(), query)
        if row is None:
            return None
        rows.append(row)
    return torch.stack(rows)
