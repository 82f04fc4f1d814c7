"""What ``set_batch`` must leave: the batch in the order given, and its rows of block tables as a tensor.

Row i of ``table_tensor`` starts with the block table of ``seqs[i]``, unchanged; shorter rows are
padded to the longest table with real block ids (a kernel, notebook 07, must never see an id like -1).
"""

from __future__ import annotations

import torch

from ..speaking.failure import fail

__all__ = ["expect_batch_rows"]


def expect_batch_rows(cache, seqs: list, account_tables: dict, num_blocks: int, where: str) -> None:
    """``cache.batch`` is ``seqs``; ``cache.table_tensor`` holds their tables (the check's), row by row."""
    if list(getattr(cache, "batch", [])) != list(seqs):
        fail(
            f"{where}: cache.batch",
            list(seqs),
            getattr(cache, "batch", "missing"),
            "set_batch keeps the sequences in the order given: row i of the batch is seqs[i].",
        )
    tensor = getattr(cache, "table_tensor", None)
    tables = [account_tables[seq] for seq in seqs]
    width = max(len(table) for table in tables)
    if not isinstance(tensor, torch.Tensor) or tensor.ndim != 2 or tensor.shape[0] != len(seqs):
        got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        fail(
            f"{where}: table_tensor",
            f"a tensor [{len(seqs)}, >= {width}]",
            got,
            "table_tensor has one row per sequence of the batch, in batch order.",
        )
    if tensor.dtype not in (torch.int64, torch.int32):
        fail(
            f"{where}: table_tensor.dtype",
            "torch.long (integer block ids)",
            tensor.dtype,
            "block ids index the pool: build the tensor with dtype=torch.long.",
        )
    if tensor.shape[1] < width:
        fail(
            f"{where}: table_tensor's width",
            f"at least {width} (the longest table)",
            tensor.shape[1],
            "pad every row to the longest table in the batch, not to the first one's length.",
        )
    rows = tensor.tolist()
    for row, (seq, table) in enumerate(zip(seqs, tables, strict=True)):
        if rows[row][: len(table)] != table:
            other = [s for s, t in zip(seqs, tables, strict=True) if t and rows[row][: len(t)] == t]
            hint = (
                f"row {row} holds the table of {other[0]!r}: rows must follow the order of seqs as given."
                if other
                else "row i starts with the block table of seqs[i], unchanged."
            )
            fail(f"{where}: row {row} of table_tensor (sequence {seq!r})", f"starts with {table}", rows[row], hint)
        padding = rows[row][len(table) :]
        if any(not 0 <= block < num_blocks for block in padding):
            fail(
                f"{where}: the padding of row {row} (sequence {seq!r})",
                f"real block ids in 0..{num_blocks - 1}",
                padding,
                "pad shorter rows with a real block id such as 0. Padded entries are only read at "
                "positions the causal mask hides, but a kernel (notebook 07) must never see an id like -1.",
            )
