"""The shapes a warm-up puzzle's story takes, each over the one runner (``puzzle_launches.run_cases``).

``listed_story``: puzzles 1 to 4, a list of visible cases and, hidden, one list drawn from the seed.
``table_step`` and ``drawn_kind``: puzzles 5 to 8, a visible table of cases (their values from one
seeded generator) and hidden kinds, each one case drawn from the seed (then its values, from the same
``rng``, where the case does not carry them).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from ...story import Story
from ..launching import KernelUnderTest
from .puzzle_launches import Launch, run_cases


def listed_story(
    launch: Launch, told: str, visible: Callable[[], object], draw: Callable, values: Callable = lambda cases: None
) -> Story:
    """A story of a list of cases: its visible list; hidden, the same run on a list drawn from the seed.
    ``values(cases)`` gives the generator of the cases' values; ``told`` is the pass line, with the count."""

    def run(kernel: KernelUnderTest, cases) -> str:
        run_cases(kernel, launch, cases, values(cases))
        return told.format(len(cases))

    return Story(
        visible=(lambda kernel, _rng: run(kernel, visible()),),
        hidden={"sizes drawn from the grader's seed": lambda kernel, rng: run(kernel, draw(rng))},
    )


def table_step(launch: Launch, cases: tuple, values_seed: int) -> Callable:
    """A visible step: every case of the table, their values from one generator seeded ``values_seed``."""
    return lambda kernel, _rng: run_cases(kernel, launch, cases, torch.Generator().manual_seed(values_seed))


def drawn_kind(launch: Launch, draw: Callable[[random.Random], object], *, with_values: bool = True) -> Callable:
    """A hidden kind: ``draw(rng)`` gives the case; then, ``with_values``, its values from the same rng."""

    def run(kernel: KernelUnderTest, rng: random.Random) -> None:
        case = draw(rng)
        values = torch.Generator().manual_seed(rng.getrandbits(31)) if with_values else None
        run_cases(kernel, launch, (case,), values)

    return run
