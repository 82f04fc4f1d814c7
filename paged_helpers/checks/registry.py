"""The ``@check`` decorator and ``REGISTRY``: every public check, registered where it is defined.

A check returns None when the learner's code is right and raises ``CheckFailed`` (an
AssertionError, so nbgrader counts the cell as failed) with a message in four parts: the scenario
that failed, what was expected, what came back, and a hint in the learner's terms. The decorator
keeps it quiet, prints its pass line, and records a ``CheckInfo``; every table of checks (the
package's names, the course map, the handouts, the no-solution test) is derived from ``REGISTRY``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .reading.learner_code import graded_run
from .speaking.failure import CheckFailed, NotImplementedYet
from .speaking.hidden import HIDDEN_LABEL
from .speaking.tally import device_problem, open_tally, quiet, summary

__all__ = ["REGISTRY", "CheckInfo", "check"]


@dataclass(frozen=True)
class CheckInfo:
    """What a public check verifies: the registry every table of checks is derived from.

    ``notebook`` is the notebook whose graded cells call the check, ``builds`` the learner's
    definition it is handed first, and ``partners`` the learner's earlier definitions it takes
    after that, as ``(notebook, name)`` pairs (a prefix cache is checked on the learner's own
    paged cache). ``graded`` is False for optional exercises. ``kernel`` is True for a check that
    is handed a ``@triton.jit`` kernel and judges its text (``running.learner_kernel``): the grader
    hands it the kernel as the submitted notebook defines it, and never asks the learner's process.
    """

    name: str
    function: Callable[..., None]
    notebook: str
    builds: str
    partners: tuple[tuple[str, str], ...] = ()
    graded: bool = True
    kernel: bool = False


# Filled by @check as the check modules are imported (paged_helpers.checks imports them all).
REGISTRY: dict[str, CheckInfo] = {}


def check(
    *,
    notebook: str,
    builds: str,
    partners: tuple[tuple[str, str], ...] = (),
    graded: bool = True,
    kernel: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., None]]:
    """Decorator for public checks: registers the check, keeps it quiet, prints one line on success.

    The decorated function raises ``CheckFailed`` on a bug; it may return a short summary of what
    it verified ("41 scenarios"), which the wrapper prints after the check's name. Every check
    takes the keyword ``unfinished``: "raise" (the default: unfinished code is a failure) or
    "note" (print "not implemented yet" and return, so that Run All goes on in a fresh notebook).
    In a graded run (``graded_run()``, decided before any learner code runs) unfinished code
    always raises, so an unfinished exercise scores zero whatever the cell asked for.
    With no summary of its own, the line says how many scenarios and calls to the learner's
    code passed; a hidden call's line says it is one (``_hidden_label``), naming no seed.
    """
    def decorate(function: Callable[..., Any]) -> Callable[..., None]:
        @functools.wraps(function)
        def wrapper(*args: Any, unfinished: str = "raise", **kwargs: Any) -> None:
            if unfinished not in ("raise", "note"):
                raise ValueError(f"unfinished must be 'raise' or 'note', got {unfinished!r}")
            # Read before the learner's code runs: code under test cannot switch grading off.
            mode = "raise" if graded_run() else unfinished
            try:
                with open_tally() as tally, quiet():
                    passed = function(*args, **kwargs)
            except NotImplementedYet as error:
                if mode == "raise":
                    raise
                print(f"{function.__name__}: {error}")
                return None
            except CheckFailed as error:
                problem = device_problem()
                if problem is None:
                    raise
                # e.g. triton imported before paged_helpers: say so first, not "0 active drivers"
                raise error.reworded(f"{problem}\n{error}") from error.__cause__
            print(f"{function.__name__}{_hidden_label(function, kwargs)}: {passed or summary(tally)}")
            return None

        earlier = REGISTRY.get(function.__name__)
        # importlib.reload of a check module re-registers its checks; two modules may not share a name
        if earlier is not None and earlier.function.__module__ != function.__module__:
            raise RuntimeError(
                f"two checks are named {function.__name__}: in {earlier.function.__module__} and {function.__module__}"
            )
        REGISTRY[function.__name__] = CheckInfo(
            function.__name__, wrapper, notebook, builds, tuple(partners), graded, kernel
        )
        return wrapper

    return decorate




def _hidden_label(function: Callable[..., Any], kwargs: dict[str, Any]) -> str:
    """What a hidden call's pass line says after the check's name, so it reads apart from the visible one.

    A call is hidden when it asks for ``hidden=True`` or passes a ``seed`` other than the check's
    default (the visible calls use the default; the hidden regions pass a seed, which the grader
    replaces with a secret one). The seed itself is never printed.
    """
    seed = inspect.signature(function).parameters.get("seed")
    other_seed = "seed" in kwargs and seed is not None and kwargs["seed"] != seed.default
    return HIDDEN_LABEL if kwargs.get("hidden") is True or other_seed else ""
