"""How every check talks to a learner.

A check returns None when the learner's code is right and raises ``CheckFailed`` (an
AssertionError, so nbgrader counts the cell as failed) with a message in four parts:
the scenario that failed, what was expected, what came back, and a hint in the learner's
terms. Checks never write to stderr: nbgrader gives a test cell zero points for any stderr
output, so ``quiet()`` silences warnings and sends stray stderr writes to stdout.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ...running.graded import graded_run
from .failure import CheckFailed, Finding, LearnerWords, NotImplementedYet, python_exception_name, without_numbers

__all__ = [
    "HIDDEN_LABEL",
    "REGISTRY",
    "CheckInfo",
    "check",
    "count_call",
    "device_problem",
    "hidden_failure",
    "quiet",
    "run_hidden_scenarios",
]

# What the running check has asked of the learner's code: scenarios named and calls made.
# Scoped to one check call by the decorator; None outside a check.
_TALLY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("check_tally", default=None)


def count_call(scenario: str) -> None:
    tally = _TALLY.get()
    if tally is not None:
        tally["calls"] += 1
        if scenario:
            tally["scenarios"].add(scenario)


def _summary(tally: dict[str, Any]) -> str:
    """'41 scenarios passed (230 calls to your code)', from what call_learner saw."""
    calls, scenarios = tally["calls"], len(tally["scenarios"])
    calls_part = f"{calls} call{'s' if calls != 1 else ''} to your code"
    if scenarios:
        return f"{scenarios} scenario{'s' if scenarios != 1 else ''} passed ({calls_part})"
    return f"passed ({calls_part})" if calls else "passed"


HIDDEN_LABEL = " (hidden test; when graded, its scenarios come from the grader's secret seed)"


def _hidden_label(function: Callable[..., Any], kwargs: dict[str, Any]) -> str:
    """What a hidden call's pass line says after the check's name, so it reads apart from the visible one.

    A call is hidden when it asks for ``hidden=True`` or passes a ``seed`` other than the check's
    default (the visible calls use the default; the hidden regions pass a seed, which the grader
    replaces with a secret one). The seed itself is never printed.
    """
    seed = inspect.signature(function).parameters.get("seed")
    other_seed = "seed" in kwargs and seed is not None and kwargs["seed"] != seed.default
    return HIDDEN_LABEL if kwargs.get("hidden") is True or other_seed else ""


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
    import functools

    def decorate(function: Callable[..., Any]) -> Callable[..., None]:
        @functools.wraps(function)
        def wrapper(*args: Any, unfinished: str = "raise", **kwargs: Any) -> None:
            if unfinished not in ("raise", "note"):
                raise ValueError(f"unfinished must be 'raise' or 'note', got {unfinished!r}")
            # Read before the learner's code runs: code under test cannot switch grading off.
            mode = "raise" if graded_run() else unfinished
            tally = {"calls": 0, "scenarios": set()}
            token = _TALLY.set(tally)
            try:
                with quiet():
                    summary = function(*args, **kwargs)
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
            finally:
                _TALLY.reset(token)
            print(f"{function.__name__}{_hidden_label(function, kwargs)}: {summary or _summary(tally)}")
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


# ----- hidden scenarios ----------------------------------------------------------------------------


def run_hidden_scenarios(kinds: dict[str, Callable[..., None]], seed: int, *args: Any) -> None:
    """Run every one of ``kinds`` (description -> scenario function taking ``(*args, rng)``), sized by
    ``seed``: the hidden tests' scenarios, which the visible calls never run.

    The graders pass a seed nobody outside the grader knows, drawn afresh for each submission. The
    seed picks sizes, orders and names within each kind, never which kinds run or how far, so a
    bug that one draw catches, every draw catches, and resubmitting until a draw misses it is
    pointless. A failure names the kind and gives its hint (``hidden_failure``), never a number of
    the scenario or a word of the learner's code.
    """
    import random

    rng = random.Random(f"hidden scenarios/{seed}")
    for description in sorted(kinds):
        try:
            kinds[description](*args, rng)
        except NotImplementedYet:
            raise NotImplementedYet(
                f"not implemented yet: a hidden scenario ({description}) called code of yours that still raises "
                "NotImplementedError."
            ) from None
        except CheckFailed as error:
            raise hidden_failure(description, error) from None


def hidden_failure(description: str, error: CheckFailed) -> CheckFailed:
    """What a hidden scenario's failure may say: its kind, the check's hint with every number left out,
    and the name of the exception the learner's code raised when that is one of Python's own.

    Nothing else: the scenario's sizes and ids, the expected and returned values, and the learner's
    message or printed lines could all carry the hidden scenario's numbers into the feedback (a
    learner's code can raise an exception whose message is its log of the calls it saw).
    """
    finding = error.finding
    hint = without_numbers(finding.concept or finding.hint) or (
        "the visible scenarios pass, so the bug is in a case they do not reach: build a scenario of this kind "
        "in a cell of your own and run your code on it"
    )
    scenario = f"a hidden scenario failed: {description}"
    lines = [
        f"{scenario}.",
        "  (its sizes and ids are not shown, nor your code's messages in it; the visible check passes the same "
        "rules on other cases)",
    ]
    learner = None
    if finding.learner is not None and finding.learner.error_type:
        error_type = python_exception_name(finding.learner.error_type)
        lines.append(f"  your code raised: {error_type}")
        learner = LearnerWords(error_type=error_type)
    lines.append(f"  hint: {hint}")
    return type(error)("\n".join(lines), finding=Finding(scenario=scenario, hint=hint, learner=learner))
