"""Input validation for the paged attention launchers (notebooks 07 and 09).

A Triton kernel trusts every pointer and every number it is given: a wrong shape or an
out-of-range block number is not an error, it is a silent garbage read (or a segfault in the
interpreter). The launchers therefore call these functions first; each problem raises
TypeError or ValueError with a message that names the offending argument.

What is required, and why:
  * all tensors on one device (a kernel can't follow a pointer to another device);
  * q, k_pool, v_pool contiguous, floating point and of one dtype (the kernel computes
    addresses from strides and reads head_dim values in a row);
  * head_dim and block_size powers of two (``tl.arange`` needs a power-of-two length);
  * block tables and lengths integer tensors; every length >= 1 and within its table row;
    every block the lengths reach a real block of the pool.
Nothing here launches or resembles a kernel.
"""

from __future__ import annotations

import torch

__all__ = ["validate_decode_inputs", "validate_prefill_inputs"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_INTEGERS = (torch.int32, torch.int64)


def _require_tensor(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def _require_power_of_two(name: str, value: int) -> None:
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two (tl.arange needs one), got {value}")


def _validate_pools(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_size: int) -> None:
    """Shared by decode and prefill: q [..., Hq, D] against pools [N, Hkv, block_size, D]."""
    if not isinstance(block_size, int) or isinstance(block_size, bool):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    _require_power_of_two("block_size", block_size)
    for name, tensor in (("k_pool", k_pool), ("v_pool", v_pool)):
        if tensor.device != q.device:
            raise ValueError(f"{name} is on {tensor.device} but q is on {q.device}: put them on one device")
        if tensor.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {tensor.dtype} but q has {q.dtype}: use one dtype")
        if tensor.ndim != 4:
            raise ValueError(
                f"{name} must be [num_blocks, kv_heads, block_size, head_dim], got {tuple(tensor.shape)}"
            )
        if not tensor.is_contiguous():
            raise ValueError(f"{name} must be contiguous (the kernel computes addresses from its strides)")
    if q.dtype not in _FLOATS:
        raise TypeError(f"q must be float16, bfloat16 or float32, got {q.dtype}")
    if q.dtype == torch.bfloat16 and q.device.type == "cpu":
        raise TypeError(
            "q is bfloat16, which Triton's interpreter can't run on the CPU: use float32 or float16"
        )
    if not q.is_contiguous():
        raise ValueError("q must be contiguous")
    if k_pool.shape != v_pool.shape:
        raise ValueError(
            f"k_pool {tuple(k_pool.shape)} and v_pool {tuple(v_pool.shape)} must have the same shape"
        )
    _, kv_heads, pool_block_size, head_dim = k_pool.shape
    if pool_block_size != block_size:
        raise ValueError(
            f"block_size is {block_size} but k_pool holds blocks of {pool_block_size} tokens (dim 2)"
        )
    if q.shape[-1] != head_dim:
        raise ValueError(f"q has head_dim {q.shape[-1]} but k_pool has head_dim {head_dim}")
    _require_power_of_two("head_dim (last dim of q)", head_dim)
    if q.shape[-2] % kv_heads:
        raise ValueError(f"q has {q.shape[-2]} heads, not a multiple of the pool's {kv_heads} KV heads")


def _validate_table_rows(
    block_tables: torch.Tensor, lengths: torch.Tensor, block_size: int, num_blocks: int
) -> None:
    """lengths[b] >= 1, within row b of block_tables, and every block it reaches exists in the pool.

    Costs two small device-to-host copies (lengths and tables) and a few vector operations.
    """
    lengths_cpu = lengths.detach().cpu().long()
    if (lengths_cpu < 1).any():
        raise ValueError(f"lengths must all be >= 1, got {lengths_cpu.tolist()}")
    capacity = block_tables.shape[1] * block_size
    if (lengths_cpu > capacity).any():
        raise ValueError(
            f"lengths {lengths_cpu.tolist()} reach past the block tables: {block_tables.shape[1]} blocks "
            f"of {block_size} tokens hold at most {capacity}"
        )
    tables_cpu = block_tables.detach().cpu().long()  # [B, max_blocks]
    reached = torch.arange(tables_cpu.shape[1])[None, :] < -(-lengths_cpu[:, None] // block_size)
    outside = reached & ((tables_cpu < 0) | (tables_cpu >= num_blocks))
    if outside.any():
        row = int(outside.any(dim=1).nonzero()[0])
        raise ValueError(
            f"block_tables row {row} points outside the pool of {num_blocks} blocks: "
            f"{tables_cpu[row][reached[row]].tolist()}"
        )


def _validate_integer(name: str, tensor: torch.Tensor, device: torch.device, ndim: int) -> None:
    if tensor.device != device:
        raise ValueError(f"{name} is on {tensor.device} but q is on {device}: put them on one device")
    if tensor.dtype not in _INTEGERS:
        raise TypeError(f"{name} must be int32 or int64, got {tensor.dtype}")
    if tensor.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(tensor.shape)}")
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous")


def validate_decode_inputs(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_tables: torch.Tensor,
    lengths: torch.Tensor,
    block_size: int,
) -> None:
    """Check the decode launcher's inputs: q [B, Hq, D]; pools [N, Hkv, block_size, D];
    block_tables int [B, max_blocks]; lengths int [B]. Raises naming the argument at fault."""
    for name, value in (
        ("q", q),
        ("k_pool", k_pool),
        ("v_pool", v_pool),
        ("block_tables", block_tables),
        ("lengths", lengths),
    ):
        _require_tensor(name, value)
    if q.ndim != 3:
        raise ValueError(f"q must be [batch, q_heads, head_dim], got shape {tuple(q.shape)}")
    _validate_pools(q, k_pool, v_pool, block_size)
    _validate_integer("block_tables", block_tables, q.device, 2)
    _validate_integer("lengths", lengths, q.device, 1)
    if block_tables.shape[0] != q.shape[0] or lengths.shape[0] != q.shape[0]:
        raise ValueError(
            f"q has a batch of {q.shape[0]}, block_tables {block_tables.shape[0]} rows and lengths "
            f"{lengths.shape[0]} entries: they must agree"
        )
    _validate_table_rows(block_tables, lengths, block_size, k_pool.shape[0])


def validate_prefill_inputs(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_table: torch.Tensor,
    start: int,
    block_size: int,
) -> None:
    """Check the prefill launcher's inputs: q [T, Hq, D] for new positions start .. start + T - 1
    of one sequence; pools [N, Hkv, block_size, D]; block_table int [max_blocks]."""
    for name, value in (("q", q), ("k_pool", k_pool), ("v_pool", v_pool), ("block_table", block_table)):
        _require_tensor(name, value)
    if q.ndim != 3 or q.shape[0] < 1:
        raise ValueError(f"q must be [new_tokens >= 1, q_heads, head_dim], got shape {tuple(q.shape)}")
    if not isinstance(start, int) or isinstance(start, bool):
        raise TypeError(f"start must be an int (tokens already cached), got {type(start).__name__}")
    if start < 0:
        raise ValueError(f"start must be >= 0 (tokens already cached), got {start}")
    _validate_pools(q, k_pool, v_pool, block_size)
    _validate_integer("block_table", block_table, q.device, 1)
    total = start + q.shape[0]
    if total > block_table.shape[0] * block_size:
        raise ValueError(
            f"start + new tokens = {total} positions, but block_table has {block_table.shape[0]} blocks "
            f"of {block_size} tokens: reserve the blocks first"
        )
    total = torch.tensor([total])
    _validate_table_rows(block_table[None, :], total, block_size, k_pool.shape[0])
