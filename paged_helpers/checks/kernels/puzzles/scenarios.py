"""The warm-up puzzles' scenarios: each puzzle's visible cases, how hidden ones are drawn, and its story.

Puzzles 1 to 4 run their list of visible cases, and hidden, the same list drawn from the grader's
seed (one hidden kind). Puzzle 5 runs a table of visible cases, and hidden, every one of its
``HIDDEN_BLOCK_KINDS``, each a case drawn from the seed; puzzles 6 to 8 do the same
(``scores_scenarios``). Every ``rng`` call is in the order the draws were first written in: a seed
draws the same cases (and, from ``rng.getrandbits(31)``, the same values) on every run.
"""

from __future__ import annotations

import random
from dataclasses import replace

import torch

from ...story import Story
from ..launching import KernelUnderTest
from .puzzle_cases import BlockCase
from .puzzle_launches import (
    launch_gather_rows,
    launch_load_block,
    launch_row_max,
    launch_scale,
    launch_softmax,
    run_cases,
)
from .story_shapes import drawn_kind, listed_story

# --------------------------------------------------------------------------- puzzle 1: scale

SCALE_CASES = ((1, 8, 2.5), (8, 8, 2.5), (13, 8, 2.5), (29, 8, 2.5), (29, 16, 2.5))  # (n, BLOCK, factor)


def _random_scale_cases(rng) -> tuple:
    """Three lengths, every draw: shorter than one tile, whole tiles, several tiles with a ragged end."""
    blocks = [rng.choice((4, 8, 16, 32)) for _ in range(3)]
    lengths = (
        rng.randint(1, blocks[0] - 1),
        blocks[1] * rng.randint(2, 4),
        blocks[2] * rng.randint(1, 4) + rng.randint(1, blocks[2] - 1),
    )
    factors = rng.sample((2.5, -0.75, 3.0), 3)
    return tuple(zip(lengths, blocks, factors, strict=True))


def _scale_values(cases: tuple) -> torch.Generator:
    """The values of x: seeded by the cases themselves (hidden cases come from the grader's seed)."""
    return torch.Generator().manual_seed(6 if cases == SCALE_CASES else hash(cases) & 0x7FFFFFFF)


SCALE_STORY = listed_story(
    launch_scale,
    "{} lengths, from one element to several tiles with a ragged end",
    lambda: SCALE_CASES,
    _random_scale_cases,
    _scale_values,
)

# --------------------------------------------------------------------------- puzzle 2: row max


def _row_max_inputs(generator: torch.Generator) -> list[tuple[str, torch.Tensor]]:
    mixed = torch.randn(3, 5, generator=generator)
    mixed[1] = -1.0 - torch.rand(5, generator=generator)  # a row of negative numbers only
    return [
        ("3 rows of 5 (row 1 entirely negative)", mixed),
        ("4 rows of 8 (a power of two: no masked lanes)", torch.randn(4, 8, generator=generator)),
        ("2 rows of 1", -torch.rand(2, 1, generator=generator) - 0.5),
    ]


def _random_row_max_inputs(rng) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    # every draw: a width that is a power of two, one that is not (masked lanes), and any width
    widths = (rng.choice((2, 4, 8)), rng.choice((3, 5, 6, 7, 9, 10, 11, 12)), rng.randint(1, 12))
    for cols in widths:
        rows = rng.randint(1, 5)
        values = torch.randn(rows, cols, generator=generator)
        values[rng.randrange(rows)] = -1.0 - torch.rand(cols, generator=generator)  # one row all negative
        cases.append((f"{rows} rows of {cols}", values))
    return cases


ROW_MAX_STORY = listed_story(
    launch_row_max,
    "{} shapes, including an all-negative row",
    lambda: _row_max_inputs(torch.Generator().manual_seed(62)),
    _random_row_max_inputs,
)

# --------------------------------------------------------------------------- puzzle 3: gather rows

GATHER_CASES = (
    ("5 rows from a table of 7, scrambled, row 4 twice", [4, 0, 6, 4, 2], 7, 8),
    ("1 row", [3], 4, 16),
    ("6 rows in table order", [0, 1, 2, 3, 4, 5], 6, 8),
)


def _random_gather_cases(rng) -> list[tuple]:
    """Three gathers, every draw: a row picked twice, rows out of order, and one row that is not row 0."""
    cases = []
    for kind in ("twice", "out of order", "one"):
        table_rows, width = rng.randint(3, 9), rng.choice((4, 8, 16))
        if kind == "one":
            picks = [rng.randrange(1, table_rows)]
        else:
            picks = rng.sample(range(table_rows), rng.randint(2, min(table_rows, 6)))
            if picks == sorted(picks):
                picks.reverse()
            if kind == "twice":
                picks.insert(rng.randrange(len(picks) + 1), rng.choice(picks))
        cases.append((f"{len(picks)} rows from a table of {table_rows}", picks, table_rows, width))
    return cases


GATHER_ROWS_STORY = listed_story(launch_gather_rows, "{} index tables", lambda: GATHER_CASES, _random_gather_cases)

# --------------------------------------------------------------------------- puzzle 4: tiled softmax


def _softmax_cases(generator: torch.Generator) -> list[tuple[str, torch.Tensor, int]]:
    rising = torch.linspace(-3.0, 3.0, 19)[None, :] + 0.1 * torch.randn(2, 19, generator=generator)
    return [
        ("2 rows of 19 whose max is in the last tile", rising, 8),
        (
            "3 rows of 12 with scores near 1000 (exp overflows without the max)",
            1000 + torch.randn(3, 12, generator=generator),
            8,
        ),
        ("2 rows of 5, all negative, one tile with masked lanes", -3.0 - torch.rand(2, 5, generator=generator), 8),
        ("1 row of 1", torch.tensor([[0.25]]), 4),
    ]


def _random_softmax_cases(rng) -> list[tuple[str, torch.Tensor, int]]:
    generator = torch.Generator().manual_seed(rng.getrandbits(31))
    cases = []
    # every draw: scores around 0, all negative, and where exp overflows without the max (in an order
    # drawn), the first spanning several tiles with a ragged end, the second whole tiles
    for index, shift in enumerate(rng.sample((0.0, -3.0, 1000.0), 3)):
        rows, block = rng.randint(1, 3), rng.choice((4, 8))
        ragged, whole = block * rng.randint(1, 2) + rng.randint(1, block - 1), block * rng.randint(2, 3)
        cols = (ragged, whole, rng.randint(1, 24))[index]
        cases.append((f"{rows} rows of {cols}", shift + 2 * torch.randn(rows, cols, generator=generator), block))
    return cases


SOFTMAX_STORY = listed_story(
    launch_softmax,
    "{} shapes, including a max in the last tile and scores near 1000",
    lambda: _softmax_cases(torch.Generator().manual_seed(64)),
    _random_softmax_cases,
)

# --------------------------------------------------------------------------- puzzle 5: one block of the pool

BLOCK_CASES = (
    # Physical block 3, not 2: a kernel with the strides of a smaller pool hard-coded (s_block 32 where this
    # pool's is 64) would read 2 * 32, exactly logical block 1, and be told it skipped the table.
    BlockCase("a full block in the middle of a sequence", (5, 3, 7), 9, 8, 2, 4, 21, 1, 1),
    BlockCase("the last block, 3 of its 8 slots hold tokens", (3, 0, 6), 8, 8, 2, 4, 19, 2, 0),
    BlockCase("one token in a block of 4, head 2 of 3", (4, 1), 6, 4, 3, 4, 5, 1, 2),
    BlockCase(
        "a pool whose slots lie 6 apart, not head_dim 4 (a view of a wider tensor)", (2, 0), 4, 4, 2, 4, 7, 0, 1,
        "padded",
    ),
    BlockCase(
        "a pool stored [blocks, block_size, heads, head_dim] and viewed as [blocks, heads, block_size, head_dim] "
        "(its heads lie closer together than its slots)",
        (1, 4), 6, 4, 2, 4, 6, 1, 1, "slot-major",
    ),
)  # fmt: skip


def random_block_case(description: str, rng, layout: str | None = None) -> BlockCase:
    """A case drawn from ``rng`` (a random.Random): sizes, a scrambled table, a ragged length, a layout."""
    block_size = rng.choice((4, 8, 16))
    head_dim = rng.choice(tuple(d for d in (4, 8, 16) if d <= block_size))
    heads = rng.randint(1, 4)
    logical_blocks = rng.randint(2, 5)
    num_blocks = logical_blocks + rng.randint(2, 6)
    table = tuple(rng.sample([b for b in range(num_blocks)], logical_blocks))
    if all(physical == logical for logical, physical in enumerate(table)):
        table = table[1:] + table[:1]  # a table that maps each block to itself would hide a skipped lookup
    length = rng.randint((logical_blocks - 1) * block_size + 1, logical_blocks * block_size)
    logical = rng.randrange(logical_blocks)
    layout = layout or rng.choice(("contiguous", "contiguous", "padded", "slot-major"))
    return BlockCase(
        description, table, num_blocks, block_size, heads, head_dim, length, logical, rng.randrange(heads), layout
    )


def _last_token_alone(rng) -> BlockCase:
    case = random_block_case("hidden", rng)
    logical = len(case.table) - 1
    return replace(case, logical=logical, length=logical * case.block_size + 1)


def _last_head(rng) -> BlockCase:
    heads = rng.randint(3, 6)
    return replace(random_block_case("hidden", rng), heads=heads, head=heads - 1)


def _not_contiguous(rng) -> BlockCase:
    """Heads closer together than slots (slot-major): exchanged head and slot strides, or a contiguous
    pool's strides worked out by hand, read other elements; at least two heads, a head other than 0."""
    heads = rng.randint(2, 4)
    case = random_block_case("hidden", rng, layout="slot-major")
    return replace(case, heads=heads, head=rng.randrange(1, heads))


HIDDEN_BLOCK_KINDS = {
    "the last block of a sequence with a single token in it": drawn_kind(
        launch_load_block, _last_token_alone, with_values=False
    ),
    "the last head of a pool with several heads": drawn_kind(launch_load_block, _last_head, with_values=False),
    "a random block of a random pool and table": drawn_kind(
        launch_load_block, lambda rng: random_block_case("hidden", rng), with_values=False
    ),
    "a pool that is not contiguous (its heads closer together than its slots)": drawn_kind(
        launch_load_block, _not_contiguous, with_values=False
    ),
}


def load_block_story(seed: int) -> Story:
    """The table's blocks, and one drawn from ``seed`` (a hidden seed draws only hidden kinds, whose
    messages show none of their sizes)."""

    def visible(kernel: KernelUnderTest, _rng: random.Random) -> str:
        drawn = random_block_case(f"a block drawn with seed {seed}", random.Random(f"load_block/{seed}"))
        cases = (*BLOCK_CASES, drawn)
        run_cases(kernel, launch_load_block, cases, None)
        return (
            f"{len(cases)} blocks, including a partly filled last block with stale slots and two pools that are "
            "not contiguous"
        )

    return Story(visible=(visible,), hidden=HIDDEN_BLOCK_KINDS)
