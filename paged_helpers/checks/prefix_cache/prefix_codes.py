"""What check_prefix_cache's prompts are made of: token ids, and the number that stands for a prefix.

The check stands in for the forward pass: the key it writes at a position is ``prefix_code`` of the
prompt up to and including that position, so a reused block read back names the history it was
computed for. The cache has one layer, one head of one dimension, and blocks of ``BLOCK`` tokens.
"""

from __future__ import annotations

import random
import zlib
from array import array

BLOCK = 4
VOCAB = 1000


def prefix_code(prefix: list[int]) -> float:
    """The number the check stores as the key of the last position of ``prefix`` (exact in float32)."""
    return float(zlib.crc32(array("q", prefix).tobytes()) % (1 << 22) + 1)


def draw_tokens(rng: random.Random, count: int) -> list[int]:
    """``count`` token ids drawn from ``rng``, one ``randrange`` each."""
    return [rng.randrange(VOCAB) for _ in range(count)]
