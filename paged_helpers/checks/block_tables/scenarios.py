"""Notebook 01's scenarios: the calls of ``physical_slot`` and ``utilization_sweep``, as data.

``SLOT_STORY`` runs its steps in order on one ``random.Random(seed)``: the chapter's example first
(the message is easiest to follow there), then every position of a seeded scrambled table for each
block size, then the bad arguments. Only the scrambled tables draw from the seed. ``SWEEP_STORY``
is the stretch's four sets of requests, the last one seeded.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ..story import Story
from .slot_calls import expect_refused, expect_slot
from .sweep_calls import SWEEP_BLOCK_SIZES, expect_sweep

__all__ = ["SLOT_STORY", "SWEEP_STORY"]

# The chapter's table: logical blocks 0, 1, 2 live in physical blocks 5, 1, 7 (blocks of 4 tokens).
CHAPTER_TABLE = [5, 1, 7]

# (position, why) on the chapter's table: its example, then both sides of each block boundary.
CHAPTER_SLOTS = (
    (9, "the chapter's example"),
    (0, "the first position"),
    (8, "the first position of logical block 2: on a block boundary"),
    (7, "the last slot of logical block 1, just before a boundary"),
    (11, "the last slot of the last block"),
)

# (position, block_size, why, the argument the ValueError must name) on the chapter's table.
BAD_ARGUMENTS = (
    (-1, 4, "a negative position", "position"),
    (12, 4, "one past the last slot of the table", "position"),
    (0, 0, "a block size of 0", "block_size"),
)

SCRAMBLED_BLOCK_SIZES = (1, 3, 4, 16)


def scrambled_table(rng: random.Random, blocks: int, pool: int) -> list[int]:
    """``blocks`` distinct physical ids from a pool of ``pool``, neither contiguous nor in order."""
    while True:
        table = rng.sample(range(pool), blocks)
        if any(table[i] + 1 != table[i + 1] for i in range(blocks - 1)) and table != list(range(blocks)):
            return table


def _chapter_example(physical_slot: Callable, rng: random.Random) -> None:
    for position, why in CHAPTER_SLOTS:
        expect_slot(physical_slot, CHAPTER_TABLE, position, 4, why)


def _scrambled_tables(physical_slot: Callable, rng: random.Random) -> None:
    for block_size in SCRAMBLED_BLOCK_SIZES:
        table = scrambled_table(rng, blocks=rng.randint(3, 6), pool=64)
        for position in range(len(table) * block_size):
            expect_slot(physical_slot, table, position, block_size, "a scrambled table")


def _bad_arguments(physical_slot: Callable, rng: random.Random) -> None:
    for position, block_size, why, argument in BAD_ARGUMENTS:
        expect_refused(physical_slot, CHAPTER_TABLE, position, block_size, why, argument=argument)


SLOT_STORY = Story(visible=(_chapter_example, _scrambled_tables, _bad_arguments))


def sweep_cases(rng: random.Random) -> list[tuple[str, list[int]]]:
    """(description, request lengths) of each call: exact fits, one token, a boundary, a seeded mix."""
    return [
        ("one request of exactly 32 tokens (a whole number of blocks for sizes up to 32)", [32]),
        ("one request of 1 token", [1]),
        ("requests of 16, 17 and 15 tokens: on, one past and one before a boundary of 16", [16, 17, 15]),
        ("32 seeded requests of 20-500 tokens, like run.py paged", [rng.randint(20, 500) for _ in range(32)]),
    ]


def _every_set_of_requests(utilization_sweep: Callable, rng: random.Random) -> str:
    cases = sweep_cases(rng)
    for description, lengths in cases:
        expect_sweep(utilization_sweep, description, lengths)
    return f"{len(cases)} sets of requests x {len(SWEEP_BLOCK_SIZES)} block sizes"


SWEEP_STORY = Story(visible=(_every_set_of_requests,))
