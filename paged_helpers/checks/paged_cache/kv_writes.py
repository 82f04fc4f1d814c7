"""The writes the check makes through the learner's ``update``, and where each key and value must land.

``BatchHarness`` adds to the bookkeeping steps the two an engine takes to run a forward pass:
``set_batch`` (the batch's rows of block tables) and ``update`` (every layer's keys and values of
the new tokens, written at their positions). It keeps ``written[seq]``, [2 (k, v), layers,
kv_heads, positions, head_dim]: every key and value the check wrote for ``seq``, cut back by
``truncate`` and forgotten by ``free``. Position p of a sequence lives in block
``table[p // block_size]`` at offset ``p % block_size``; ``update``'s reply must return the whole
history (``kv_history``), and ``lengths`` must be committed once, after the last layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..reading.strict import torch_unhooked
from ..speaking.failure import fail
from . import diagnosis
from .batch_rows import expect_batch_rows
from .cache_account import CacheSetup
from .cache_harness import CacheHarness
from .diagnosis import call_naming_cause
from .kv_history import expect_history_returned

__all__ = ["BatchHarness", "Write"]


@dataclass(frozen=True)
class Write:
    """One update call the check makes: which sequences, from which positions, with which k/v."""

    batch: list
    starts: list[int]
    new_tokens: int
    tables: dict  # seq -> its block table at the time of the write
    owners: dict  # every sequence's table, to name the owner of a wrongly written block

    def home(self, seq, position: int, block_size: int) -> tuple[int, int]:
        """Where position lives: (table[p // block_size], p % block_size)."""
        return self.tables[seq][position // block_size], position % block_size


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal with every __torch_function__ override off (learner tensors may carry one)."""
    with torch_unhooked():
        return bool(torch.equal(a, b))


def _positions(start: int, count: int) -> str:
    return f"position {start}" if count == 1 else f"positions {start}..{start + count - 1}"


class BatchHarness(CacheHarness):
    """The bookkeeping steps, plus ``set_batch`` and ``update`` with keys and values the check knows."""

    def __init__(self, PagedKVCache: type, setup: CacheSetup, device: torch.device, scenario: str) -> None:  # noqa: N803
        self.written: dict = {}
        self.generator = torch.Generator().manual_seed(0)
        super().__init__(PagedKVCache, setup, device, scenario)

    def forget_writes(self, seq) -> None:
        self.written.pop(seq, None)

    def cut_writes(self, seq, length: int) -> None:
        if seq in self.written:
            self.written[seq] = self.written[seq][:, :, :, :length]

    def set_batch(self, seqs: list) -> None:
        call_naming_cause(f"set_batch({seqs})", self.cache.set_batch, list(seqs), scenario=self.where)
        where = f"{self.where}: after set_batch({seqs})"
        expect_batch_rows(self.cache, seqs, self.ledger.tables, self.num_blocks, where)

    def update(self, batch: list, new_tokens: int) -> None:
        """reserve, set_batch, then update for every layer with known k/v: placement, reply, lengths."""
        setup, cache = self.setup, self.cache
        device = cache.k_pool[0].device
        starts = [self.learner_length(seq) for seq in batch]
        for seq in batch:
            self.reserve(seq, new_tokens)
        self.set_batch(batch)
        tables = self.ledger.tables
        write = Write(batch, starts, new_tokens, {seq: tables[seq] for seq in batch}, dict(tables))
        new_k, new_v = self._draw_and_record(write, device)
        at = ", ".join(f"{seq!r} at {_positions(s, new_tokens)}" for seq, s in zip(batch, starts, strict=True))
        where = f"{self.where}: update(layer, k, v, positions) writing {at}"
        positions = torch.tensor([[s + t for t in range(new_tokens)] for s in starts], device=device)  # [B, T]
        for layer in range(setup.layers):
            reply = call_naming_cause(
                f"update({layer}, k, v, positions)",
                cache.update,
                layer,
                new_k[layer],
                new_v[layer],
                positions,
                scenario=where,
                likely="positions index the table as table_tensor[row, p // block_size] and the block as "
                "offset p % block_size; an IndexError usually means one of these is computed differently.",
            )
            self.expect_placement(write, layer, "k_pool", new_k[layer], where)
            self.expect_placement(write, layer, "v_pool", new_v[layer], where)
            expect_history_returned(reply, batch, layer, where, self.written, setup.kv_heads, setup.head_dim)
        self.expect_lengths(write, where)
        self.expect_accounting(f"update writing {at}")

    def _draw_and_record(self, write: Write, device: torch.device) -> tuple[list, list]:
        """Each layer's new keys and values [B, kv_heads, T, head_dim], drawn from the harness's generator
        and added to ``written`` at their positions (anything written past them before is cut)."""
        setup = self.setup
        shape = (len(write.batch), setup.kv_heads, write.new_tokens, setup.head_dim)
        new_k = [torch.randn(shape, generator=self.generator).to(device) for _ in range(setup.layers)]
        new_v = [torch.randn(shape, generator=self.generator).to(device) for _ in range(setup.layers)]
        empty = torch.zeros(2, setup.layers, setup.kv_heads, 0, setup.head_dim, device=device)
        for row, seq in enumerate(write.batch):
            fresh = torch.stack([torch.stack([k[row] for k in new_k]), torch.stack([v[row] for v in new_v])])
            self.written[seq] = torch.cat([self.written.get(seq, empty)[:, :, :, : write.starts[row]], fresh], dim=3)
        return new_k, new_v

    def expect_placement(self, write: Write, layer: int, which: str, new: torch.Tensor, where: str) -> None:
        """Every new vector of ``new`` [B, kv_heads, T, head_dim] sits at its position's home in the pool."""
        pools = getattr(self.cache, which)
        size = self.cache.block_size
        for row, seq in enumerate(write.batch):
            for t in range(write.new_tokens):
                p = write.starts[row] + t
                block, offset = write.home(seq, p, size)
                if _same(pools[layer][block, :, offset], new[row, :, t]):
                    continue
                found = diagnosis.locate(pools, new[row, :, t])
                got = f"found at (layer, block, offset) {found[:3]}" if found else "not in the pool"
                hint = diagnosis.placement_hint(size, write.tables[seq], seq, layer, p, which, found, write.owners)
                occupant = [
                    (write.batch[r], write.starts[r] + u)
                    for r in range(len(write.batch))
                    for u in range(write.new_tokens)
                    if _same(pools[layer][block, :, offset], new[r, :, u])
                ]
                if not found and occupant:
                    home = write.home(*occupant[0], size)
                    got, hint = diagnosis.overwritten(occupant[0], home, which, block, offset, size)
                fail(
                    f"{where}: where the {which[0]} of {seq!r} at position {p} (layer {layer}) was stored, "
                    f"table {write.tables[seq]}, block_size {size}",
                    f"{which}[{layer}][{block}, :, {offset}]",
                    got,
                    hint,
                )

    def expect_lengths(self, write: Write, where: str) -> None:
        """After every layer has written, lengths[seq] is one past the highest position written for seq."""
        for row, seq in enumerate(write.batch):
            start = write.starts[row]
            expected, got = start + write.new_tokens, self.learner_length(seq)
            if got == expected:
                continue
            batch_end = max(s + write.new_tokens for s in write.starts)
            hint = diagnosis.lengths_hint(got, start, write.new_tokens, self.setup.layers, batch_end)
            fail(f"{where}: lengths[{seq!r}] after every layer has written", expected, got, hint)
