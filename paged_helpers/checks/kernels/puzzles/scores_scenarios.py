"""The scenarios of puzzles 6 to 8, the moves of notebooks 07 and 09: block scores, online attention, causal scores.

Each puzzle runs a table of visible cases, their values from one generator of a fixed seed, and
hidden, every one of its kinds: a case drawn from the grader's seed, then its values from the same
``rng`` (``story_shapes.drawn_kind``). Every ``rng`` call is in the order the draws were first written in.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from ...story import Story
from .puzzle_cases import AttentionCase, CausalCase
from .puzzle_launches import launch_attention, launch_block_scores, launch_causal
from .story_shapes import drawn_kind, table_step

# --------------------------------------------------------------------------- puzzle 6: one block's scores

BLOCK_SCORES_CASES = (
    # (description, length, BLOCK, D)
    ("13 keys in blocks of 8, head_dim 8 (the last block holds 5)", 13, 8, 8),
    ("11 keys in blocks of 4, head_dim 16 (the last block holds 3)", 11, 4, 16),
    ("16 keys in blocks of 4: whole blocks", 16, 4, 8),
    ("1 key in a block of 4", 1, 4, 4),
)


def _ragged_length(rng, block: int) -> int:
    """Two to four blocks, the last one partly filled."""
    return block * rng.randint(1, 3) + rng.randint(1, block - 1)


def _ragged_scores(rng) -> tuple:
    block = rng.choice((4, 8))
    return "hidden", _ragged_length(rng, block), block, rng.choice((4, 8, 16))


def _whole_scores(rng) -> tuple:
    block = rng.choice((4, 8))
    return "hidden", block * rng.randint(2, 4), block, rng.choice((4, 8, 16))


def _square_scores(rng) -> tuple:
    block = rng.choice((4, 8))
    return "hidden", _ragged_length(rng, block), block, block


BLOCK_SCORES_STORY = Story(
    visible=(table_step(launch_block_scores, BLOCK_SCORES_CASES, values_seed=66),),
    hidden={
        "several blocks, the last one partly filled": drawn_kind(launch_block_scores, _ragged_scores),
        "whole blocks only": drawn_kind(launch_block_scores, _whole_scores),
        "a block as wide as it is long (head_dim = BLOCK), the last one partly filled": drawn_kind(
            launch_block_scores, _square_scores
        ),
    },
    told=f"{len(BLOCK_SCORES_CASES)} lengths, including a partly filled last block and a single key",
)

# --------------------------------------------------------------------------- puzzle 7: one query's attention, online

ATTENTION_CASES = (
    AttentionCase("the largest score in the last block, the last block holding 3 of 4", 11, 4, 8, "rising"),
    AttentionCase("one block of 8 (no masked slot), the largest score first", 8, 8, 8, "early"),
    AttentionCase("scores near 1000 (exp overflows without the max): 9 keys in blocks of 4", 9, 4, 8, "huge"),
    AttentionCase("every score far below zero (about -150): 10 keys in blocks of 4", 10, 4, 16, "negative"),
    AttentionCase("a single key", 1, 4, 8, "rising"),
)


def _attention_case(profile: str, *, ragged: bool) -> Callable[[random.Random], AttentionCase]:
    def draw(rng: random.Random) -> AttentionCase:
        block = rng.choice((4, 8))
        length = _ragged_length(rng, block) if ragged else block * rng.randint(2, 4)
        return AttentionCase("hidden", length, block, rng.choice((8, 16)), profile)

    return draw


ATTENTION_STORY = Story(
    visible=(table_step(launch_attention, ATTENTION_CASES, values_seed=67),),
    hidden={
        "the largest score in the last block, the last block partly filled": drawn_kind(
            launch_attention, _attention_case("rising", ragged=True)
        ),
        "every score far below zero": drawn_kind(launch_attention, _attention_case("negative", ragged=True)),
        "scores near 1000": drawn_kind(launch_attention, _attention_case("huge", ragged=False)),
        "whole blocks, the largest score in the first": drawn_kind(
            launch_attention, _attention_case("early", ragged=False)
        ),
    },
    told=f"{len(ATTENTION_CASES)} sequences, including a max in the last block and scores far below zero",
)

# --------------------------------------------------------------------------- puzzle 8: a tile of causal scores

CAUSAL_CASES = (
    CausalCase("9 new tokens after 5 cached ones (the history ends mid-block)", 5, 9, 4, 4, 16),
    CausalCase("a fresh prompt: 8 new tokens, no history", 0, 8, 8, 4, 16),
    CausalCase("one new token after 12 cached ones (a tile holding one query)", 12, 1, 4, 8, 16),
    CausalCase("6 new tokens after 8 cached ones (the history ends on a block boundary), head_dim 32", 8, 6, 4, 8, 32),
)


def _causal_case(kind: str) -> Callable[[random.Random], CausalCase]:
    def draw(rng: random.Random) -> CausalCase:
        tile, block, head_dim = rng.choice((4, 8)), rng.choice((4, 8)), rng.choice((16, 32))
        if kind == "mid-block":  # start mid-block, a partly filled last tile, keys ending mid-block
            start = block * rng.randint(0, 2) + rng.randint(1, block - 1)
            new_tokens = tile * rng.randint(1, 2) + rng.randint(1, tile - 1)
            if (start + new_tokens) % block == 0:
                start += 1 if start % block < block - 1 else -1
        elif kind == "fresh":
            start, new_tokens = 0, rng.randint(2, 3 * tile)
        else:
            start, new_tokens = rng.randint(block, 4 * block), 1
        return CausalCase("hidden", start, new_tokens, tile, block, head_dim)

    return draw


CAUSAL_STORY = Story(
    visible=(table_step(launch_causal, CAUSAL_CASES, values_seed=68),),
    hidden={
        "a chunk after a history that ends mid-block, its last tile partly filled": drawn_kind(
            launch_causal, _causal_case("mid-block")
        ),
        "a fresh prompt (no history)": drawn_kind(launch_causal, _causal_case("fresh")),
        "one new token after a history": drawn_kind(launch_causal, _causal_case("one")),
    },
    told=f"{len(CAUSAL_CASES)} chunks, including a history that ends mid-block and a tile holding one query",
)
