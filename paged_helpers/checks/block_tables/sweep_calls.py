"""One call of the learner's ``utilization_sweep`` (the stretch), compared block size by block size.

Utilisation is tokens stored over slots reserved: every request holds whole blocks of its own, so
the slots reserved are ``block_size`` times the sum over requests of ``ceil(length / block_size)``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..reading.calls import call_learner
from ..reading.ledger import ceil_div
from ..speaking.failure import fail
from .diagnosis import sweep_hint

__all__ = ["SWEEP_BLOCK_SIZES", "expect_sweep"]

SWEEP_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def expect_sweep(utilization_sweep: Callable, description: str, lengths: list[int]) -> None:
    """``utilization_sweep(lengths, SWEEP_BLOCK_SIZES)`` is the exact utilisation of every block size."""
    scenario = f"utilization_sweep({description}, block_sizes={SWEEP_BLOCK_SIZES})"
    result = call_learner("utilization_sweep", utilization_sweep, list(lengths), SWEEP_BLOCK_SIZES, scenario=scenario)
    if not isinstance(result, dict) or sorted(result) != sorted(SWEEP_BLOCK_SIZES):
        fail(
            scenario,
            f"a dict with one entry per block size {list(SWEEP_BLOCK_SIZES)}",
            repr(result)[:200],
            "return {block_size: utilisation} for every block size you were given.",
        )
    for block_size in SWEEP_BLOCK_SIZES:
        reserved = block_size * sum(ceil_div(length, block_size) for length in lengths)
        expected = sum(lengths) / reserved
        got = result[block_size]
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9:
            fail(
                f"{scenario}, block size {block_size}",
                f"{expected:.6f} ({sum(lengths)} tokens in {reserved} reserved slots)",
                repr(got),
                sweep_hint(lengths, block_size, float(got), expected)
                if isinstance(got, (int, float))
                else "each value is a float: tokens stored / slots reserved.",
            )
