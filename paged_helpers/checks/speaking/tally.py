"""What a running check has done, for its pass line, and how it keeps quiet.

``count_call`` counts each call into the learner's code and the scenarios named, for the line a
passing check prints ("41 scenarios passed (230 calls to your code)"); the ``@check`` decorator
(``checks.registry``) opens one tally per check call. Checks never write to stderr: nbgrader gives a
test cell zero points for any stderr output, so ``quiet()`` silences warnings and sends stray stderr
writes to stdout.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["count_call", "device_problem", "open_tally", "quiet", "summary"]

# What the running check has asked of the learner's code: scenarios named and calls made.
# Scoped to one check call by the decorator; None outside a check.
_TALLY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("check_tally", default=None)


def count_call(scenario: str) -> None:
    tally = _TALLY.get()
    if tally is not None:
        tally["calls"] += 1
        if scenario:
            tally["scenarios"].add(scenario)


def summary(tally: dict[str, Any]) -> str:
    """'41 scenarios passed (230 calls to your code)', from what call_learner saw."""
    calls, scenarios = tally["calls"], len(tally["scenarios"])
    calls_part = f"{calls} call{'s' if calls != 1 else ''} to your code"
    if scenarios:
        return f"{scenarios} scenario{'s' if scenarios != 1 else ''} passed ({calls_part})"
    return f"passed ({calls_part})" if calls else "passed"



@contextlib.contextmanager
def open_tally() -> Iterator[dict[str, Any]]:
    """One check call's tally, counted by ``count_call`` until the call returns."""
    tally: dict[str, Any] = {"calls": 0, "scenarios": set()}
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence warnings and route stderr to stdout for the duration of a check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(sys.stdout):
            yield


def device_problem() -> str | None:
    """The device's sentence for the learner when Triton cannot run as intended (see device.py)."""
    from ...device import INFO

    return INFO.problem
