"""Gather-then-attend: the reference answers for the paged attention kernels.

Shapes (the chapter's):
  q decode        [B, q_heads, head_dim]            one new token per sequence
  q prefill       [T, q_heads, head_dim]            T new tokens of ONE sequence
  k_pool, v_pool  [num_blocks, kv_heads, block_size, head_dim]
  block_tables    int [B, max_blocks]               logical block -> physical block (rows padded)
  lengths         int [B]                           tokens in each sequence's cache (>= 1)

Query head h reads KV head h // group, where group = q_heads // kv_heads. The scores are
scaled by 1 / sqrt(head_dim). Work is done in ``compute_dtype`` (float32 unless asked
otherwise; the checks ask for float64) and the result is returned in q's dtype.
"""

from __future__ import annotations

import math

import torch

__all__ = ["gather_history", "paged_decode_reference", "paged_prefill_reference"]


def gather_history(
    pool: torch.Tensor, block_tables: torch.Tensor, lengths: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy every sequence's cached tokens out of the pool, in logical order.

    Returns (history [B, kv_heads, max_len, head_dim], valid bool [B, max_len]); positions
    at or past a sequence's length are zero and marked invalid.
    """
    max_len = int(lengths.max())
    positions = torch.arange(max_len, device=pool.device)  # [max_len]
    logical_blocks = (positions // block_size).clamp(max=block_tables.shape[1] - 1)
    physical = block_tables.long()[:, logical_blocks]  # [B, max_len]
    history = pool[physical, :, positions % block_size]  # [B, max_len, H, D]
    valid = positions[None, :] < lengths.to(pool.device).long()[:, None]  # [B, max_len]
    history = torch.where(
        valid[:, :, None, None], history, torch.zeros((), dtype=pool.dtype, device=pool.device)
    )
    return history.transpose(1, 2), valid


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Plain softmax attention. q [B, Hq, Tq, D]; k, v [B, Hkv, Tk, D]; allowed bool [B, 1, Tq, Tk]."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [B, Hq, Tk, D]
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, Hq, Tq, Tk]
    scores = scores.masked_fill(~allowed, -math.inf)
    return torch.softmax(scores, dim=-1) @ v  # [B, Hq, Tq, D]


def paged_decode_reference(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: torch.Tensor,
    lengths: torch.Tensor,
    block_size: int,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Decode attention of q [B, Hq, D] over each sequence's first lengths[b] cached tokens."""
    keys, valid = gather_history(k_pool.to(compute_dtype), block_tables, lengths, block_size)
    values, _ = gather_history(v_pool.to(compute_dtype), block_tables, lengths, block_size)
    out = _attend(q.to(compute_dtype)[:, :, None, :], keys, values, valid[:, None, None, :])
    return out[:, :, 0, :].to(q.dtype)  # [B, Hq, D]


def paged_prefill_reference(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_table: torch.Tensor,
    start: int,
    block_size: int,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Causal attention of the T new tokens q [T, Hq, D] of one sequence.

    New token t sits at position start + t. Its keys and values, and those of the ``start``
    tokens before it (the history), are already in the pool at the positions block_table
    maps them to. Token t attends to positions 0 .. start + t.
    """
    new_tokens = q.shape[0]
    total = torch.tensor([start + new_tokens], device=k_pool.device)
    keys, _ = gather_history(k_pool.to(compute_dtype), block_table[None, :], total, block_size)
    values, _ = gather_history(v_pool.to(compute_dtype), block_table[None, :], total, block_size)
    query_positions = start + torch.arange(new_tokens, device=q.device)  # [T]
    key_positions = torch.arange(start + new_tokens, device=q.device)  # [start + T]
    allowed = key_positions[None, :] <= query_positions[:, None]  # [T, start + T]
    queries = q.to(compute_dtype).transpose(0, 1)[None]  # [1, Hq, T, D]
    out = _attend(queries, keys, values, allowed[None, None])
    return out[0].transpose(0, 1).to(q.dtype)  # [T, Hq, D]
