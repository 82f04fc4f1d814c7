"""One shape for every check's scenarios: visible steps, hidden kinds, and how a case is drawn.

    STORY = Story(
        visible=(_basic, _sharing, _random_walk),        # each step(*learner, rng), in this order
        hidden={"a pool of a single block": _pool_of_one, ...},   # description -> step(*learner, rng)
        told="3 scenarios",                               # the pass line (None: the last step's)
    )

    @check(notebook="02_block_allocator", builds="BlockAllocator")
    def check_block_allocator(BlockAllocator, *, seed=0, hidden=False):
        return STORY.tell(BlockAllocator, seed=seed, hidden=hidden)

A visible call runs the visible steps in order, on one ``random.Random(seed)``, so each step starts
where the last left off (a step may walk a whole story on a run object of its own). A hidden call
runs every hidden kind in full instead (``speaking.hidden.run_hidden_scenarios``): the grader's
secret seed picks sizes, orders and names within a kind, never which kinds run or how far, and a
failure says the kind and its hint without numbers. A scenario written as a case object (08's
stages: ``run(*learner)``, and a ``draw(rng)`` that makes a hidden one) becomes a step through
``ran`` and ``drawn``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .speaking.hidden import run_hidden_scenarios

__all__ = ["Case", "Story", "drawn", "ran"]

Step = Callable[..., Any]  # step(*learner, rng)


class Case(Protocol):
    """A scenario as an object: what it holds is its description, ``run`` plays it on the learner's code."""

    def run(self, *learner: Any) -> Any: ...


@dataclass(frozen=True)
class Story:
    """A check's scenarios. ``visible``: steps run in order on the visible call; ``hidden``: kinds
    (description -> step), every one run in full on a hidden call; ``told``: the visible call's pass
    line (None: what the last visible step returned, and if that is None too, the scenarios and calls
    the check counted)."""

    visible: tuple[Step, ...]
    hidden: Mapping[str, Step] = field(default_factory=dict)
    told: str | None = None

    def __post_init__(self) -> None:
        if not self.visible:
            raise ValueError("a story needs at least one visible step")

    def tell(self, *learner: Any, seed: int = 0, hidden: bool = False) -> str | None:
        """Run the visible steps (``hidden=False``) or every hidden kind (``hidden=True``) on ``learner``."""
        if hidden:
            if not self.hidden:
                raise ValueError("this check has no hidden scenarios: call it without hidden=True")
            run_hidden_scenarios(dict(self.hidden), seed, *learner)
            return None
        rng = random.Random(seed)
        for step in self.visible:
            last = step(*learner, rng)
        return self.told if self.told is not None else last


def ran(case: Case) -> Step:
    """A visible step that plays ``case`` (its numbers fixed in the table) on the learner's code."""

    def step(*learner_and_rng: Any) -> None:
        case.run(*learner_and_rng[:-1])

    step.__name__ = f"ran({type(case).__name__})"
    return step


def drawn(draw: Callable[[random.Random], Case]) -> Step:
    """A hidden kind from a case class's ``draw(rng)``: draws a case, then plays it on the learner's code."""

    def step(*learner_and_rng: Any) -> None:
        *learner, rng = learner_and_rng
        draw(rng).run(*learner)

    step.__name__ = f"drawn({getattr(draw, '__qualname__', 'draw')})"
    return step
