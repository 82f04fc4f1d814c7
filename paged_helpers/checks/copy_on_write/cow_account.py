"""The copy-on-write check's own account of a scene: which tokens each sequence holds, and who wrote them.

The check stands in for the forward pass: every token's keys and values are numbers that encode
who wrote it, where and in which layer (``key_of``, ``value_of``: exact in float32), so a key read
back from the wrong block names the write that put it there. The account is the check's, never the
learner's: only the scene (``cow_scene.Scene``) changes it, by what each step must have done.
"""

from __future__ import annotations

from ..reading.ledger import Ledger

# The scene's cache: 2 layers, blocks of 4 tokens, 2 KV heads of 2 dimensions.
LAYERS, BLOCK, KV_HEADS, HEAD_DIM = 2, 4, 2, 2


def key_of(base: int, layer: int) -> float:
    """The key every head and dimension holds for the token ``base``, in ``layer`` (exact in float32)."""
    return base + 0.25 * layer


def value_of(base: int, layer: int) -> float:
    return -(base + 0.25 * layer)


class Account:
    """Every live sequence's history, and the writer of every token.

    ``history[seq][p]`` is the token id (``base``) that ``seq`` has at position p: 1000 times the
    writer's number (``writer_ids``, in order of first write) plus the position it was written at.
    The ledger (``ledger.writers``) maps a base back to the sequence that wrote it and where, for
    messages, and holds the pool against the learner's own tables.
    """

    def __init__(self, num_blocks: int) -> None:
        self.history: dict[str, list[int]] = {}
        self.ledger = Ledger(num_blocks)
        self.writer_ids: dict[str, int] = {}

    def created(self, seq: str) -> None:
        self.history[seq] = []

    def forked(self, parent: str, child: str) -> None:
        """The child holds every token the parent holds (the same bases: the same keys and values)."""
        self.history[child] = list(self.history[parent])

    def freed(self, seq: str) -> None:
        del self.history[seq]

    def live(self) -> list[str]:
        return list(self.history)

    def writer(self, seq: str) -> int:
        """``seq``'s number as a writer, given on its first write."""
        return self.writer_ids.setdefault(seq, len(self.writer_ids) + 1)

    def base_of(self, seq: str, position: int) -> int:
        """The token id ``seq`` writes at ``position``."""
        return 1000 * self.writer_ids[seq] + position

    def stored(self, seq: str, position: int, base: int) -> None:
        """``seq`` wrote token ``base`` at ``position``, the next one of its history."""
        self.history[seq].append(base)
        self.ledger.stored(base, seq, position)
