"""The warm-up puzzles' classic mistakes, recomputed: what a kernel with one of them would have stored.

Each function takes a case's inputs and a ``by`` naming the mistake ("right" for the answer itself)
and computes in float64 what a kernel written that way gives; ``diagnosis`` compares the learner's
output with these and names the one it matches. None means the mistake cannot be told apart on this
case (its addresses leave the pool, or it needs a shape the case does not have).
"""

from __future__ import annotations

import math

import torch

from .puzzle_cases import cdiv

_NEG_INF = -math.inf


def softmax_without_rescale(values: torch.Tensor, block: int) -> torch.Tensor:
    """What a tiled softmax gives when the running sum is never rescaled as the max grows."""
    rows = []
    for row in values.double():
        m, total = -math.inf, 0.0
        for start in range(0, row.numel(), block):
            tile = row[start : start + block]
            m = max(m, float(tile.max()))
            total += float(torch.exp(tile - m).sum())
        rows.append(torch.exp(row - m) / total)
    return torch.stack(rows).float()


def softmax_as_if_masked_lanes_were_zero(values: torch.Tensor, block: int) -> torch.Tensor:
    cols = values.shape[1]
    padded = cdiv(cols, block) * block
    zeros = torch.zeros(values.shape[0], padded - cols, dtype=values.dtype)
    wide = torch.cat([values, zeros], dim=1).double()
    m = wide.max(dim=1, keepdim=True).values
    return (torch.exp(values.double() - m) / torch.exp(wide - m).sum(dim=1, keepdim=True)).float()


def block_as(pool: torch.Tensor, physical: int, head: int, rows: int, by: str) -> torch.Tensor | None:
    """The [BLOCK, D] tile a kernel loads from ``pool`` (a view of a storage that starts where the
    pool does), right or as a bug does; None where the bug's addresses leave the pool's storage.

    by: "right" (rows < ``rows`` loaded, the rest 0), "unmasked" (every slot loaded), "columns"
    (the mask switched off columns >= rows instead), "swapped" (slot and column strides exchanged),
    "head and slot" (the head and slot strides exchanged), "contiguous" (the head and slot strides of
    a contiguous pool, worked out by hand: head * BLOCK * D, slot * D).
    """
    _, heads, block_size, head_dim = pool.shape
    s_block, s_head, s_slot = pool.stride(0), pool.stride(1), pool.stride(2)
    if by == "contiguous":
        s_head, s_slot = block_size * head_dim, head_dim
    if by == "head and slot":
        s_head, s_slot = s_slot, s_head
    flat = pool.as_strided((pool.untyped_storage().nbytes() // pool.element_size(),), (1,))
    slots = torch.arange(block_size)[:, None]  # [BLOCK, 1]
    columns = torch.arange(head_dim)[None, :]  # [1, D]
    base = physical * s_block + head * s_head
    at = base + (slots + columns * s_slot if by == "swapped" else slots * s_slot + columns)  # [BLOCK, D]
    if int(at.max()) >= flat.numel():
        return None
    tile = flat[at]
    if by == "unmasked":
        return tile
    if by == "columns":
        return torch.where(columns < rows, tile, torch.zeros(()))
    return torch.where(slots < rows, tile, torch.zeros(()))


def block_scores_as(q: torch.Tensor, k: torch.Tensor, block: int, scale: float, by: str) -> torch.Tensor | None:
    """The [cdiv(length, BLOCK) * BLOCK] scores, right or as a bug computes them (None: not this shape).

    by: "right"; "zero" (the slots past the length keep the score of a zero key, 0); "no scale";
    "summed over slots" (tl.sum over axis 0, possible only when D == BLOCK); "q along the slots"
    (q[:, None] in place of q[None, :], possible only when D == BLOCK).
    """
    length, head_dim = k.shape
    capacity = cdiv(length, block) * block
    keys = torch.zeros(capacity, head_dim, dtype=torch.float64)
    keys[:length] = k.double()
    q = q.double()
    valid = torch.arange(capacity) < length
    if by in ("summed over slots", "q along the slots"):
        if head_dim != block:
            return None
        tiles = keys.view(-1, block, head_dim)  # [blocks, BLOCK, D]
        if by == "summed over slots":
            raw = (tiles * q[None, None, :]).sum(dim=1)  # [blocks, D]: one number per column
        else:
            raw = (tiles * q[None, :, None]).sum(dim=2)  # [blocks, BLOCK]: q[s] times the row's sum
        scores = raw.reshape(-1) * scale
    else:
        scores = (keys @ q) * (1.0 if by == "no scale" else scale)
    filler = 0.0 if by == "zero" else _NEG_INF
    return torch.where(valid, scores, torch.full((), filler, dtype=torch.float64)).float()


def online_as(scores: torch.Tensor, v: torch.Tensor, block: int, by: str) -> torch.Tensor:
    """One query's attention output, computed block by block as the kernel does, right or with one bug.

    by: "right"; "acc not rescaled", "l not rescaled", "nothing rescaled" (alpha left out of those
    updates); "zero" (the slots past the length score 0 instead of -inf); "not divided" (acc stored, not
    acc / l). ``scores`` are already scaled; float64 throughout, float32 at the end.
    """
    length, head_dim = v.shape
    s_all, v_all = scores.double(), v.double()
    m, l, acc = -math.inf, 0.0, torch.zeros(head_dim, dtype=torch.float64)
    for start in range(0, length, block):
        s = s_all[start : start + block]
        values = v_all[start : start + block]
        if by == "zero" and s.numel() < block:
            s = torch.cat([s, torch.zeros(block - s.numel(), dtype=torch.float64)])
            values = torch.cat([values, torch.zeros(block - values.shape[0], head_dim, dtype=torch.float64)])
        m_new = max(m, float(s.max()))
        alpha = math.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = (l if by in ("l not rescaled", "nothing rescaled") else l * alpha) + float(p.sum())
        acc = (acc if by in ("acc not rescaled", "nothing rescaled") else acc * alpha) + p @ values
        m = m_new
    return (acc if by == "not divided" else acc / l).float()


def causal_as(q: torch.Tensor, k: torch.Tensor, start: int, scale: float, by: str) -> torch.Tensor:
    """The [T, start + T] scores, right or with one bug: "rows" (the mask compares row numbers, not
    positions), "strict" (key < query: the diagonal left out), "one past" (key <= query + 1), "zero"
    (masked scores 0, not -inf), "no scale"."""
    new_tokens, total = q.shape[0], k.shape[0]
    scores = (q.double() @ k.double().T) * (1.0 if by == "no scale" else scale)
    rows = torch.arange(new_tokens)[:, None]
    keys = torch.arange(total)[None, :]
    queries = rows if by == "rows" else start + rows
    allowed = {"strict": keys < queries, "one past": keys <= queries + 1}.get(by, keys <= queries)
    filler = 0.0 if by == "zero" else _NEG_INF
    return torch.where(allowed, scores, torch.full((), filler, dtype=torch.float64)).float()
