"""The previous chapter's cache: every request reserves a fixed-capacity slot.

``StaticKVCache`` speaks the same protocol as the learner's paged cache (create, set_batch,
update, free), so the model, the engine loop and the demos run on either. It is the baseline
the course measures the paged cache against: a request that stores 50 tokens still holds a
slot of ``capacity`` tokens until it finishes.

Invariants: a sequence owns exactly one slot from creation until ``free``; ``lengths[seq]``
counts the tokens written, which never exceed ``capacity``.
"""

from __future__ import annotations

import torch


class SlotsExhausted(MemoryError):
    """Every slot is taken: the caller must wait for a request to finish (or preempt one)."""


class StaticKVCache:
    """``slots`` slots of ``capacity`` tokens; per layer, K and V pools [slots, kv_heads, capacity, head_dim]."""

    def __init__(
        self,
        layers: int,
        slots: int,
        capacity: int,
        kv_heads: int,
        head_dim: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        shape = (slots, kv_heads, capacity, head_dim)
        self.k_pool = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.v_pool = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.capacity, self.device = capacity, torch.device(device)
        self.free_slots = list(range(slots))
        self.slot_of: dict[object, int] = {}
        self.lengths: dict[object, int] = {}
        self.batch: list[object] = []

    @property
    def num_slots(self) -> int:
        return self.k_pool[0].shape[0]

    def create(self, seq: object) -> None:
        if seq in self.slot_of:
            raise ValueError(f"sequence {seq!r} already exists; free it first or pick a new id")
        if not self.free_slots:
            raise SlotsExhausted(
                f"all {self.num_slots} slots are in use; free a sequence before creating {seq!r}"
            )
        self.slot_of[seq] = self.free_slots.pop(0)
        self.lengths[seq] = 0

    def reserve(self, seq: object, new_tokens: int) -> None:
        """Fail early, before any model work, if ``seq`` would outgrow its slot."""
        if self.lengths[seq] + new_tokens > self.capacity:
            raise SlotsExhausted(
                f"sequence {seq!r} would reach {self.lengths[seq] + new_tokens} tokens; its slot holds {self.capacity}"
            )

    def set_batch(self, seqs: list[object]) -> None:
        missing = [s for s in seqs if s not in self.slot_of]
        if missing:
            raise KeyError(f"set_batch got sequences that were never created: {missing}")
        self.batch = list(seqs)
        self.slot_tensor = torch.tensor([self.slot_of[s] for s in self.batch], device=self.device)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor):
        """k, v [B, kv_heads, T, D] at positions [B, T] -> the slots' first `span` tokens."""
        if positions.ndim == 1:
            positions = positions.expand(k.shape[0], -1)
        if int(positions.max()) >= self.capacity:
            raise SlotsExhausted(f"position {int(positions.max())} is past the slot capacity {self.capacity}")
        slots = self.slot_tensor[:, None].expand_as(positions)  # [B, T]
        self.k_pool[layer][slots, :, positions] = k.transpose(1, 2)
        self.v_pool[layer][slots, :, positions] = v.transpose(1, 2)
        if layer == len(self.k_pool) - 1:
            for row, seq in enumerate(self.batch):
                self.lengths[seq] = max(self.lengths[seq], int(positions[row].max()) + 1)
        span = int(positions.max()) + 1
        keys = self.k_pool[layer][self.slot_tensor, :, :span]  # [B, kv_heads, span, D]
        values = self.v_pool[layer][self.slot_tensor, :, :span]
        return keys, values, torch.arange(span, device=k.device)

    def free(self, seq: object) -> None:
        self.free_slots.append(self.slot_of.pop(seq))
        self.lengths.pop(seq)
