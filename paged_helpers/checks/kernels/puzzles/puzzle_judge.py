"""The one runner every warm-up puzzle shares: how an answer is compared, and the order a wrong one is judged in.

Every puzzle's case ends the same way. Its launch (``puzzle_launches``) hands over an ``Attempt`` (what the
kernel stored, what it should have stored, and the puzzle's own idea of equal) and the puzzle's
``Diagnosis``; ``judge`` then speaks in one order, the first finding failing the check:

1. the answer is right: nothing to say;
2. an element of the output still holds ``UNWRITTEN``: no program stored it;
3. the answer is what a classic mistake of the puzzle gives (recomputed in ``puzzle_mistakes``): name it;
4. odd values the puzzle knows (NaN, the poison past a row, row 0 where another row belongs);
5. the worst element, with the puzzle's general hint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ....device import DEVICE
from ...reading.strict import strict_allclose
from ...speaking.failure import fail

ATOL = RTOL = 1e-5

# What the check fills an output with before the kernel runs: a value no scenario's answer holds
# (a whole number: every value of the pool of puzzle 5 ends in .5).
UNWRITTEN = 1234.0

Compare = Callable[[torch.Tensor, torch.Tensor], bool]
Mistakes = Sequence[tuple[torch.Tensor | None, str]]  # (what the mistake gives, the hint naming it)


@dataclass(frozen=True)
class Attempt:
    """One launch of one case: the scenario's words, what came back, what was expected.

    ``same`` is the puzzle's equality (exact bits, 1e-5, or the scores' 1e-4); ``resembles`` is how
    close an answer must be to a classic mistake's to be named as it (``same`` where not given).
    """

    scenario: str
    shown: str  # what the message says was expected
    got: torch.Tensor
    expected: torch.Tensor
    same: Compare
    resembles: Compare | None = None

    @property
    def right(self) -> bool:
        return self.same(self.got, self.expected)

    @property
    def unwritten(self) -> torch.Tensor:
        return unwritten(self.got)


class Diagnosis:
    """The questions ``judge`` asks, in its order; each puzzle's (``diagnosis``, ``scores_diagnosis``)
    answers those it has something to say to."""

    def unwritten(self, attempt: Attempt) -> None:
        """Fail: some element of the output still holds ``UNWRITTEN``."""
        raise NotImplementedError

    def mistakes(self, attempt: Attempt) -> Mistakes:
        return ()

    def odd_values(self, attempt: Attempt) -> None:
        """Fail if the output holds values that tell what went wrong (NaN, poison)."""

    def last_word(self, attempt: Attempt) -> tuple[str, str]:
        """What came back, and the puzzle's general hint."""
        raise NotImplementedError


def judge(attempt: Attempt, diagnosis: Diagnosis) -> None:
    """Fail with the first finding, in the order the module's docstring gives; return if the answer is right."""
    if attempt.right:
        return
    if bool(attempt.unwritten.any()):
        diagnosis.unwritten(attempt)
    resembles = attempt.resembles or attempt.same
    for wrong, hint in diagnosis.mistakes(attempt):
        if wrong is not None and not attempt.same(wrong, attempt.expected) and resembles(attempt.got, wrong):
            fail(attempt.scenario, attempt.shown, "what one classic mistake gives, named below", hint)
    diagnosis.odd_values(attempt)
    got, hint = diagnosis.last_word(attempt)
    fail(attempt.scenario, attempt.shown, got, hint)


def unwritten(got: torch.Tensor) -> torch.Tensor:
    return got == UNWRITTEN


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunction():
        return a.shape == b.shape and bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return strict_allclose(got, expected, atol=ATOL, rtol=RTOL)


def softmax_resembles(got: torch.Tensor, wrong: torch.Tensor) -> bool:
    """A softmax is named as a mistake's within 1e-4 (the mistake is recomputed in float64)."""
    return torch.allclose(got, wrong, atol=1e-4, rtol=1e-4)


# Puzzles 6 to 8 compare numbers a kernel computed from products and exponentials in float32: scores
# near 1000 keep about 1e-4 of absolute precision there, so these puzzles are held to 1e-4 (as the
# attention kernels of notebooks 07 and 09 are). A tl.dot of float32 operands on an NVIDIA GPU runs in
# TF32 by default (10 bits of mantissa): the check allows for it there.
def _score_tolerance() -> tuple[float, float]:
    return (1e-4, 1e-4) if DEVICE.type == "cpu" else (2e-3, 2e-3)


def scores_close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Close, with -inf where -inf is expected (and nowhere else)."""
    atol, rtol = _score_tolerance()
    return strict_allclose(got, expected, atol=atol, rtol=rtol)


def describe_worst(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, ...]) -> str:
    error = (got - expected).abs().nan_to_num(nan=math.inf)
    index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
    return _at(got, expected, axes, index)


def describe_scores(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, ...]) -> str:
    """The element that differs most (an infinity where a number belongs counts as the most)."""
    same = (got == expected) | (torch.isnan(got) & torch.isnan(expected))
    error = torch.where(same, torch.zeros(()), (got - expected).abs().nan_to_num(nan=math.inf, posinf=math.inf))
    index = tuple(int(i) for i in torch.nonzero(error == error.max())[0])
    return _at(got, expected, axes, index)


def _at(got: torch.Tensor, expected: torch.Tensor, axes: tuple[str, ...], index: tuple[int, ...]) -> str:
    where = ", ".join(f"{name} {i}" for name, i in zip(axes, index, strict=True))
    return f"at {where}: {float(got[index]):.6g} instead of {float(expected[index]):.6g}"
