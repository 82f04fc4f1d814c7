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

from ..running.graded import graded_run
from .failure import (  # the failure vocabulary, re-exported: checks import it from here
    HINT_TIERS,
    CheckFailed,
    Hint,
    HintTiers,
    NotImplementedYet,
    Refused,
    fail,
    hint_text,
    learner_frames,
    more_hint,
    refuse,
)
from .strict import learner_dict, learner_int, learner_int_list, refuse_odd_value

__all__ = [
    "HINT_TIERS", "REGISTRY", "CacheSnapshot", "CheckFailed", "CheckInfo", "Hint", "HintTiers",
    "NotImplementedYet", "Refused", "call_learner", "ceil_div", "check", "expect_raise", "expect_refused",
    "fail", "hint_text", "learner_frames", "more_hint", "quiet", "refuse", "run_hidden_scenarios",
]  # fmt: skip

# What the running check has asked of the learner's code: scenarios named and calls made.
# Scoped to one check call by the decorator; None outside a check.
_TALLY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("check_tally", default=None)


def _count_call(scenario: str) -> None:
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


def call_learner(what: str, function: Callable[..., Any], *args: Any, scenario: str = "", **kwargs: Any) -> Any:
    """Call learner code, turning its exceptions into messages about *what* was being done.

    NotImplementedError becomes "not implemented yet"; any other exception becomes a
    CheckFailed naming the scenario and the call, with the original exception chained.
    Exceptions a scenario expects (MemoryError on an exhausted pool, say) must be caught by
    the check itself around a plain call, not through this helper.
    """
    _count_call(scenario)
    try:
        result = function(*args, **kwargs)
    except NotImplementedError as error:
        earlier = _earlier_notebook_raising(error)
        where = (
            f"The code that raised is in {earlier}: finish that notebook first, then run this check again."
            if earlier
            else "Replace `raise NotImplementedError()` in its cell with your code, run the cell, then this check."
        )
        raise NotImplementedYet(f"not implemented yet: {what} raised NotImplementedError. {where}") from error
    except CheckFailed:
        raise
    except Exception as error:  # the learner's bug, reported in the learner's terms
        where = f"{scenario}: " if scenario else ""
        raise CheckFailed(
            f"{where}{what} raised {type(error).__name__}: {error}\n  hint: {_hint_for(error)}"
        ) from error
    return refuse_odd_value(result, f"what {what} returned", scenario)


def _hint_for(error: Exception) -> str:
    problem = _device_problem()
    if problem is not None:  # e.g. triton imported before paged_helpers: no kernel can run
        return problem
    return "the lines below this message show where in your code it happened."


def _device_problem() -> str | None:
    """The device's sentence for the learner when Triton cannot run as intended (see device.py)."""
    from ..device import INFO

    return INFO.problem


def _earlier_notebook_raising(error: BaseException) -> str | None:
    """The notebook file whose loaded code raised ``error``, if it came from notebook_loader.

    Code loaded from an earlier notebook carries the file name "<path>.ipynb (code cells)";
    code typed in the current notebook carries an ipykernel temp file name instead.
    """
    import traceback
    from pathlib import Path

    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return None
    filename = frames[-1].filename
    if filename.endswith(".ipynb (code cells)"):
        return Path(filename.removesuffix(" (code cells)")).name
    return None


@dataclass(frozen=True)
class CheckInfo:
    """What a public check verifies: the registry every table of checks is derived from.

    ``notebook`` is the notebook whose graded cells call the check, ``builds`` the learner's
    definition it is handed first, and ``partners`` the learner's earlier definitions it takes
    after that, as ``(notebook, name)`` pairs (a prefix cache is checked on the learner's own
    paged cache). ``graded`` is False for optional exercises.
    """

    name: str
    function: Callable[..., None]
    notebook: str
    builds: str
    partners: tuple[tuple[str, str], ...] = ()
    graded: bool = True


# Filled by @check as the check modules are imported (paged_helpers.checks imports them all).
REGISTRY: dict[str, CheckInfo] = {}


def check(
    *, notebook: str, builds: str, partners: tuple[tuple[str, str], ...] = (), graded: bool = True
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
                problem = _device_problem()
                if problem is None:
                    raise
                # e.g. triton imported before paged_helpers: say so first, not "0 active drivers"
                raise type(error)(f"{problem}\n{error}") from error.__cause__
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
        REGISTRY[function.__name__] = CheckInfo(function.__name__, wrapper, notebook, builds, tuple(partners), graded)
        return wrapper

    return decorate


# ----- small helpers the check modules share -------------------------------------------------


def ceil_div(count: int, size: int) -> int:
    """``count / size`` rounded up, in integers: the blocks that hold ``count`` tokens."""
    return -(-count // size)


@dataclass(frozen=True)
class CacheSnapshot:
    """Copies of a paged cache's bookkeeping at one moment; two snapshots compare with ==."""

    tables: dict
    lengths: dict
    refs: list
    free: list  # sorted: the free list's order is the allocator's business

    @classmethod
    def of(cls, cache: Any) -> CacheSnapshot:
        return cls(
            learner_dict(cache.tables, "cache.tables", "", learner_int_list),
            learner_dict(cache.lengths, "cache.lengths", "", learner_int),
            learner_int_list(cache.allocator.refs, "allocator.refs"),
            sorted(learner_int_list(cache.allocator.free, "allocator.free")),
        )

    def changes(self, after: CacheSnapshot) -> list[str]:
        """ "part: what changed" for each part that differs in ``after``: only the sequences and blocks
        that changed (a pool of 24 blocks would otherwise bury the one that moved), the free list whole."""

        def entries(label: str, before: dict, now: dict, name: Callable[[Any], str]) -> list[str]:
            missing = "absent"
            moved = [
                f"{name(key)}: {before.get(key, missing)} -> {now.get(key, missing)}"
                for key in sorted(set(before) | set(now), key=str)
                if before.get(key, missing) != now.get(key, missing)
            ]
            return [f"{label}: " + ", ".join(moved)] if moved else []

        return [
            *entries("tables", self.tables, after.tables, repr),
            *entries("lengths", self.lengths, after.lengths, repr),
            *entries("reference counts", dict(enumerate(self.refs)), dict(enumerate(after.refs)), "block {}".format),
            *([f"free list: {self.free} -> {after.free}"] if self.free != after.free else []),
        ]


def expect_raise(
    error_type: type[BaseException],
    what: str,
    function: Callable[..., Any],
    *args: Any,
    scenario: str,
    hint: str | Hint,
) -> BaseException:
    """Call learner code that must raise ``error_type``; returns the error, or fails naming ``what``.

    Unfinished code still reads "not implemented yet" (the call is repeated through call_learner).
    """
    try:
        function(*args)
    except error_type as error:
        return error
    except NotImplementedError:
        call_learner(what, function, *args, scenario=scenario)
        raise  # call_learner raised NotImplementedYet; reached only if the repeat did not raise
    except Exception as error:  # the learner's code raised something else: that is the finding
        fail(scenario, f"{error_type.__name__} from {what}", f"{type(error).__name__}: {error}", hint)
    fail(scenario, f"{error_type.__name__} from {what}", "no exception", hint)
    raise AssertionError("unreachable: fail() raises")


def expect_refused(
    error_type: type[BaseException],
    what: str,
    function: Callable[..., Any],
    *args: Any,
    cache: Any,
    scenario: str,
    hint: str | Hint,
    changed_hint: str | Hint | Callable[[CacheSnapshot, CacheSnapshot], str | Hint],
) -> None:
    """Learner code that must raise ``error_type`` and leave ``cache``'s bookkeeping exactly as it was.

    A refusal (MemoryError from a reserve that cannot be completed, say) is all or nothing: the
    tables, lengths, reference counts and free list after it are compared with a snapshot taken
    before. ``changed_hint`` may be a function of the two snapshots, to name what was kept.
    """
    before = CacheSnapshot.of(cache)
    expect_raise(error_type, what, function, *args, scenario=scenario, hint=hint)
    after = CacheSnapshot.of(cache)
    changes = before.changes(after)
    if changes:
        name = error_type.__name__
        fail(
            scenario,
            f"{name}, with the cache exactly as before",
            f"{name}, but the cache changed first: " + "; ".join(changes),
            changed_hint(before, after) if callable(changed_hint) else changed_hint,
        )


# ----- hidden scenarios ----------------------------------------------------------------------------


def run_hidden_scenarios(kinds: dict[str, Callable[..., None]], seed: int, count: int, *args: Any) -> None:
    """Run ``count`` of ``kinds`` (description -> scenario function taking ``(*args, rng)``), chosen
    and sized by ``seed``: the hidden tests' scenarios, which the visible calls never run.

    The graders pass a seed nobody outside the grader knows, so neither which kinds run nor their
    sizes can be reproduced from a seed a learner can see. A failure names the kind and gives its
    hint, but none of the scenario's numbers (sizes, block ids, counts come from the secret seed).
    """
    import random

    rng = random.Random(f"hidden scenarios/{seed}")
    for description in rng.sample(sorted(kinds), min(count, len(kinds))):
        try:
            kinds[description](*args, rng)
        except NotImplementedYet:
            raise
        except CheckFailed as error:
            text = str(error)
            hint = text[text.index("  hint:") :] if "  hint:" in text else "  hint: run the visible scenarios again."
            raise type(error)(
                f"a hidden scenario failed: {description}.\n"
                f"  (its sizes and ids are not shown; the visible check passes the same rules on other cases)\n"
                f"{hint}"
            ) from error.__cause__
