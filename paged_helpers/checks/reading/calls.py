"""Calling the learner's code from a check: its exceptions become messages about what was asked.

Every call a check makes into the learner's functions and methods goes through ``call_learner``:
it counts the call for the check's pass line, turns ``NotImplementedError`` into "not implemented
yet" (naming the earlier notebook whose code raised, when it came from one), any other exception
into a ``CheckFailed`` naming the scenario and the call, and refuses a returned value that is not
plain data (``strict.refuse_odd_value``). ``expect_raise`` is the same for a call that must raise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..speaking.failure import CheckFailed, Finding, Hint, LearnerWords, NotImplementedYet, fail
from ..speaking.tally import count_call, device_problem
from .strict import refuse_odd_value

__all__ = ["call_learner", "call_learner_allowing", "expect_raise", "learner_raised"]


def call_learner(what: str, function: Callable[..., Any], *args: Any, scenario: str = "", **kwargs: Any) -> Any:
    """Call learner code, turning its exceptions into messages about *what* was being done.

    NotImplementedError becomes "not implemented yet"; any other exception becomes a
    CheckFailed naming the scenario and the call, with the original exception chained.
    Exceptions a scenario expects (MemoryError on an exhausted pool, say) must be caught by
    the check itself around a plain call, not through this helper.
    """
    count_call(scenario)
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
        raise learner_raised(what, error, scenario) from error
    return refuse_odd_value(result, f"what {what} returned", scenario)


def call_learner_allowing(
    error_type: type[BaseException], what: str, function: Callable[..., Any], *args: Any, scenario: str
) -> Any:
    """``call_learner``, except that ``error_type`` raised by the learner's code comes through as it is.

    For a call whose refusal is part of the story (MemoryError from ``reserve`` on a full pool, which
    an engine answers by evicting and trying again): the caller catches ``error_type``; unfinished
    code and any other exception still become messages naming ``what``.
    """
    refused: list[BaseException] = []

    def attempt(*arguments: Any) -> Any:
        try:
            return function(*arguments)
        except error_type as error:
            refused.append(error)
            return None

    result = call_learner(what, attempt, *args, scenario=scenario)
    if refused:
        raise refused[0]
    return result


def learner_raised(what: str, error: BaseException, scenario: str = "", hint: str = "") -> CheckFailed:
    """The failure "``what`` raised X: message", with the learner's words kept apart from the check's."""
    where = f"{scenario}: " if scenario else ""
    error_type = getattr(error, "remote_type", "") or type(error).__name__
    finding = Finding(
        scenario=scenario or what,
        got=f"{what} raised {error_type}",
        hint=hint,  # the check's own hint only: the default one points at the traceback below the message
        learner=LearnerWords(error_type=error_type, message=str(error)),
    )
    message = f"{where}{what} raised {error_type}: {error}\n  hint: {hint or _hint_for(error)}"
    return CheckFailed(message, finding=finding)


def _hint_for(error: BaseException) -> str:
    problem = device_problem()
    if problem is not None:  # e.g. triton imported before paged_helpers: no kernel can run
        return problem
    return "the lines below this message show where in your code it happened."


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
