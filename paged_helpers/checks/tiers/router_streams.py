"""What the two router checks' event streams are made of: prompts sharing stems, and their block keys.

A block's key is the tuple of every token from the start of the prompt to the end of the block, so
the keys of one prompt chain (``chain``). A stream asks three requests after every event
(``draw_asks``); a replica's overlap with a request is how many of its keys, from the first, the
replica holds (``overlap``). ``routing`` and ``tier_routing`` draw their streams from these, each
on the check's rng in the order written.
"""

from __future__ import annotations

import random

__all__ = ["BLOCK", "chain", "draw_asks", "overlap", "prompts"]

BLOCK = 4


def chain(tokens: list[int]) -> list[tuple[int, ...]]:
    """The key of each whole block of ``tokens``: the tokens from the start to the block's end."""
    return [tuple(tokens[:end]) for end in range(BLOCK, len(tokens) + 1, BLOCK)]


def overlap(held: set, keys: list) -> int:
    """The expected overlap: the index of the first key ``held`` lacks (all of them when it lacks none)."""
    return next((index for index, key in enumerate(keys) if key not in held), len(keys))


def prompts(rng: random.Random, count: int, vocab: int, longest: int) -> list[list[int]]:
    """Prompts sharing prefixes: a few stems, each prompt a stem plus its own blocks."""
    stems = [[rng.randrange(vocab) for _ in range(BLOCK * rng.randint(1, 3))] for _ in range(3)]
    return [
        rng.choice(stems) + [rng.randrange(vocab) for _ in range(BLOCK * rng.randint(1, longest))] for _ in range(count)
    ]


def draw_asks(rng: random.Random, drawn_prompts: list[list[int]], replicas: int) -> list[tuple[list, list[int]]]:
    """The three requests asked after an event: (keys, decode_blocks of each replica) each."""
    asks = []
    for prompt in rng.sample(drawn_prompts, 3):
        keys_asked = chain(prompt)
        asks.append((keys_asked, [rng.randrange(0, 3 * len(keys_asked) + 1) for _ in range(replicas)]))
    return asks
