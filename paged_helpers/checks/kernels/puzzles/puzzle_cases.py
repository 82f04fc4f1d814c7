"""The warm-up puzzles' cases as objects: puzzle 5's block of a coded pool, puzzle 7's attention, puzzle 8's chunk.

Puzzles 1 to 4 and 6 need no more than a tuple; these three carry sizes the scenario's words and the
launch both read. ``BlockCase`` also owns its pool: notebook 03's and 07's layout, [num_blocks, heads,
block_size, head_dim], handed to the kernel as its strides in that order (s_block, s_head, s_slot), as
07's kernel is. A pool element holds its own offset from the first element of the pool's storage plus
0.5, so every value the kernel stored says which address it loaded from (``where_from``); 0 (a masked
lane) and ``puzzle_judge.UNWRITTEN`` (never written) are whole numbers, so neither can be taken for a pool
value. The slots past the sequence's length in its last block hold NaN (what an earlier sequence left
there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# How a pool lies in memory (``BlockCase.layout``): its storage's shape, and which of the storage's
# axes are the pool's (block, head, slot, column).
POOL_LAYOUTS = ("contiguous", "padded", "slot-major")
_POOL_PADDING = 2  # columns of storage past head_dim in each slot of a "padded" pool

# Puzzle 2's poison, in the columns past each row: a max that sees it was not masked.
ROW_MAX_POISON = 1e4


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def storage_axes(layout: str) -> tuple[int, int, int, int]:
    """Where the pool's axes (block, head, slot, column) are in the storage's axes."""
    return (0, 2, 1, 3) if layout == "slot-major" else (0, 1, 2, 3)


@dataclass(frozen=True)
class BlockCase:
    """Puzzle 5: one block (``logical``, through ``table``) of one head of a pool, for a sequence of ``length``."""

    description: str
    table: tuple[int, ...]  # logical block -> physical block
    num_blocks: int
    block_size: int
    heads: int
    head_dim: int
    length: int
    logical: int
    head: int
    layout: str = "contiguous"  # one of POOL_LAYOUTS

    @property
    def rows(self) -> int:
        """How many slots of the logical block hold tokens."""
        return min(self.block_size, self.length - self.logical * self.block_size)

    @property
    def storage_shape(self) -> tuple[int, int, int, int]:
        """The shape of the tensor whose view the pool is."""
        if self.layout == "slot-major":
            return self.num_blocks, self.block_size, self.heads, self.head_dim
        padding = _POOL_PADDING if self.layout == "padded" else 0
        return self.num_blocks, self.heads, self.block_size, self.head_dim + padding

    @property
    def strides(self) -> tuple[int, int, int]:
        """The pool's (s_block, s_head, s_slot), as the launcher passes them."""
        pool = torch.empty(self.storage_shape).permute(*storage_axes(self.layout))
        return pool.stride(0), pool.stride(1), pool.stride(2)

    @property
    def scenario(self) -> str:
        stale = self.length % self.block_size
        slots = f"slot {stale}" if stale == self.block_size - 1 else f"slots {stale} to {self.block_size - 1}"
        stale_note = f", {slots} of physical block {self.table[-1]} stale (NaN)" if stale else ""
        return (
            f"load_block: {self.description}: pool [{self.num_blocks}, {self.heads}, {self.block_size}, "
            f"{self.head_dim}]{self.strides_note}, block table {list(self.table)}, length {self.length}"
            f"{stale_note}, logical block {self.logical}, head {self.head}, grid (1,)"
        )

    @property
    def strides_note(self) -> str:
        if self.layout == "contiguous":
            return ""
        s_block, s_head, s_slot = self.strides
        return f" with strides (s_block {s_block}, s_head {s_head}, s_slot {s_slot}, 1)"

    def coded_pool(self) -> torch.Tensor:
        """The 4-D pool [num_blocks, heads, block_size, head_dim]: a view of a coded storage (its own
        tensor) laid out as ``layout`` says; the stale slots of the sequence's last block NaN."""
        storage = self.storage_shape
        coded = (0.5 + torch.arange(math.prod(storage), dtype=torch.float32)).view(storage)
        pool = coded.permute(*storage_axes(self.layout))[..., : self.head_dim]
        used = self.length - (len(self.table) - 1) * self.block_size  # tokens in the sequence's last block
        pool[self.table[-1], :, used:] = math.nan
        return pool

    def where_from(self, value: float) -> str:
        """The pool element whose code is ``value``, as ``pool[block, head, slot, column]``."""
        if math.isnan(value):
            return "NaN (a stale slot past the sequence's length)"
        if value == 0.0:
            return "0 (a masked lane)"
        shape = self.storage_shape
        offset = int(value - 0.5)
        if value != offset + 0.5 or not 0 <= offset < math.prod(shape):
            return f"{value:g} (not a pool value)"
        index = []
        for size in reversed(shape):
            offset, rest = divmod(offset, size)
            index.insert(0, rest)
        block, head, slot, column = (index[axis] for axis in storage_axes(self.layout))
        padding = f" (padding past head_dim {self.head_dim}, not part of the pool)" if column >= self.head_dim else ""
        return f"pool[{block}, {head}, {slot}, {column}]{padding}"


@dataclass(frozen=True)
class AttentionCase:
    """Puzzle 7: one query's attention over ``length`` keys read ``block`` at a time; ``profile`` shapes the scores."""

    description: str
    length: int
    block: int
    head_dim: int
    profile: str  # "rising" (the max in the last block), "negative" (about -150), "huge" (about 1000), "early"

    @property
    def scenario(self) -> str:
        return (
            f"online_attention: {self.description}: length {self.length}, BLOCK = {self.block}, D = {self.head_dim}, "
            f"scale 1/sqrt({self.head_dim}), grid (1,)"
        )


@dataclass(frozen=True)
class CausalCase:
    """Puzzle 8: ``new_tokens`` queries at positions ``start`` and on, against every key up to the last."""

    description: str
    start: int
    new_tokens: int
    tile: int
    block: int
    head_dim: int

    @property
    def total(self) -> int:
        return self.start + self.new_tokens

    @property
    def grid(self) -> tuple[int, int]:
        return cdiv(self.new_tokens, self.tile), cdiv(self.total, self.block)

    @property
    def scenario(self) -> str:
        return (
            f"causal_scores: {self.description}: start {self.start}, new_tokens {self.new_tokens}, TILE = "
            f"{self.tile}, BLOCK = {self.block}, D = {self.head_dim}, grid {self.grid}"
        )
