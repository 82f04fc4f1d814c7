"""How a check fails: ``CheckFailed`` with the course's four-part message, and tiered hints.

A failure names the scenario that failed, what was expected, what came back, and a hint in the
learner's terms (``fail``); ``refuse`` is the same for a value built to fool a comparison or a
kernel's answer computed outside the kernel (``Refused``, which the grader also flags). The
modules that read the learner's values (``strict``) and the checks' own vocabulary (``report``,
which re-exports all of this) build on this module, which builds on nothing of the checks.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# This package's folder: frames inside it are the course's own code, not the learner's.
_PACKAGE_DIR = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LearnerWords:
    """Text that came from the learner's code: theirs, shown as theirs, never as the check's words.

    ``error_type`` is the name of the exception their code raised, ``message`` its message and
    ``printed`` what their code printed. A hidden scenario's failure shows none of it but a builtin
    exception's name (``hidden_failure``): any of it could carry the scenario's numbers.
    """

    error_type: str = ""
    message: str = ""
    printed: str = ""


@dataclass(frozen=True)
class Finding:
    """A failure's parts as data, from the check to the grader's feedback page.

    ``scenario``, ``expected``, ``got`` and ``hint`` are the check's own words (``got`` may quote a
    value the learner's code returned); ``concept`` is the hint's idea when the hint is a tiered
    ``Hint`` (a sentence with no number of the scenario in it); ``learner`` is what the learner's code
    said. Nothing downstream reads these back out of the formatted message.
    """

    scenario: str
    expected: str = ""
    got: str = ""
    hint: str = ""
    concept: str = ""
    learner: LearnerWords | None = None

    def as_data(self, limit: int = 2000) -> dict[str, Any]:
        """Plain, bounded data (what crosses from the checker to the grader)."""
        data: dict[str, Any] = {
            name: str(getattr(self, name))[:limit] for name in ("scenario", "expected", "got", "hint", "concept")
        }
        words = self.learner or LearnerWords()
        data["learner"] = {name: str(getattr(words, name))[:limit] for name in ("error_type", "message", "printed")}
        return data


class CheckFailed(AssertionError):
    """A check found a bug. The message is written for the learner; ``finding`` holds its parts.

    In IPython (a notebook) it renders as its message first; the check's own frames are left
    out, and when the learner's code raised, the frames of the learner's code follow.
    """

    def __init__(self, message: str = "", *, finding: Finding | None = None):
        super().__init__(message)
        self.finding = finding if finding is not None else Finding(scenario=message)

    def reworded(self, message: str, **changes: Any) -> CheckFailed:
        """The same failure (same class, same cause) with another message and some parts changed."""
        import dataclasses

        error = type(self).__new__(type(self), message)  # no __init__: a subclass may take more arguments
        error.__dict__.update(self.__dict__)
        error.finding = dataclasses.replace(self.finding, **changes)
        error.__cause__ = self.__cause__
        return error

    def _render_traceback_(self) -> list[str]:
        lines = [f"{type(self).__name__}: {self}"]
        cause = self.__cause__
        if cause is not None and not isinstance(self, NotImplementedYet):
            frames = learner_frames(cause)
            if frames:
                lines.append("")
                lines.append("Where your code raised it (most recent call last):")
                lines += [line.rstrip("\n") for line in traceback.format_list(frames)]
            lines += [line.rstrip("\n") for line in traceback.format_exception_only(type(cause), cause)]
        return lines


class NotImplementedYet(CheckFailed):
    """The learner's code still raises NotImplementedError (a fresh student release)."""


class Refused(CheckFailed):
    """The check refused what the learner's code handed it: a value built to fool a comparison (an
    always-equal object, a tensor subclass) or a kernel's answer computed outside the kernel. A failure
    like any other for the learner; the grader's second opinion also flags it for the instructor."""


class NoVerdict(Exception):
    """The check could not reach a verdict, for a reason that is the machine's, not the learner's
    (a process starved of CPU time for minutes, a compiler with no answer in time). Never a
    failure: the grader runs the cell again alone, and the lab says to run the check again."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def python_exception_name(name: str) -> str:
    """``name`` if it is one of Python's own exceptions; a learner's own class could be named anything
    (a hidden scenario's numbers, say)."""
    import builtins

    value = getattr(builtins, name, None)
    if isinstance(value, type) and issubclass(value, BaseException):
        return name
    return "an exception of a class of your own"


def without_numbers(text: str) -> str:
    """``text`` with each number but 0 and 1 replaced by "n": a hint may be computed from a hidden
    scenario's sizes, while a 0 or a 1 in a hint is the rule's own ("add 1 to its count")."""
    import re

    return re.sub(r"\d+(\.\d+)?", lambda number: number[0] if number[0] in ("0", "1") else "n", text)


def refuse(scenario: str, expected: Any, got: Any, hint: str) -> None:
    """``fail``, raising ``Refused``."""
    raise Refused(four_parts(scenario, expected, got, hint), finding=_finding(scenario, expected, got, hint))


def learner_frames(error: BaseException) -> list[traceback.FrameSummary]:
    """The frames of ``error``'s traceback that are not this package's own code."""
    return [frame for frame in traceback.extract_tb(error.__traceback__) if not _is_package_file(frame.filename)]


def _is_package_file(filename: str) -> bool:
    try:
        return Path(filename).resolve().is_relative_to(_PACKAGE_DIR)
    except (OSError, ValueError):
        return False


def four_parts(scenario: str, expected: Any, got: Any, hint: str | Hint) -> str:
    """The course's four-part message (a ``Hint`` is shown in tiers)."""
    return f"{scenario}\n  expected: {expected}\n  got:      {got}\n  hint: {hint_text(scenario, hint)}"


def _finding(scenario: str, expected: Any, got: Any, hint: str | Hint) -> Finding:
    concept = hint.concept if isinstance(hint, Hint) else ""
    plain = hint.concept if isinstance(hint, Hint) else str(hint)
    return Finding(str(scenario), str(expected), str(got), plain, concept)


def fail(scenario: str, expected: Any, got: Any, hint: str | Hint) -> None:
    """Raise CheckFailed with the course's four-part message (a ``Hint`` is shown in tiers)."""
    finding = _finding(scenario, expected, got, hint)
    raise CheckFailed(four_parts(scenario, expected, got, hint), finding=finding)


# ----- hints in two tiers ------------------------------------------------------------------------


@dataclass(frozen=True)
class Hint:
    """A hint in two tiers. ``concept`` names the idea the code misses and is always shown;
    ``change`` says concretely what to change (close to a line of code) and is shown only when
    the same scenario fails again with the same hint in this kernel, or on ``more_hint()``.
    A learner first gets the chance to find the fix from the idea.
    """

    concept: str
    change: str


class HintTiers:
    """The memory behind tiered hints: which (scenario, concept) failures this kernel has shown.

    It lives as long as the Python process (the Jupyter kernel), in the single ``HINT_TIERS``;
    restarting the kernel, or ``forget()``, starts over. Nothing else is remembered.
    """

    def __init__(self) -> None:
        self._shown: set[tuple[str, str]] = set()
        self.last: tuple[str, Hint] | None = None

    def text(self, scenario: str, hint: Hint) -> str:
        """The hint's text for this failure: the concept, plus the change if it failed before."""
        key = (scenario, hint.concept)
        again = key in self._shown
        self._shown.add(key)
        self.last = (scenario, hint)
        if again:
            return f"{hint.concept}\n  the change (same failure again): {hint.change}"
        return (
            f"{hint.concept}\n  (the concrete change is shown if this fails again, or now with "
            "paged_helpers.checks.more_hint())"
        )

    def forget(self) -> None:
        """Start over: the next failure of every scenario shows the concept only."""
        self._shown.clear()
        self.last = None


HINT_TIERS = HintTiers()


def hint_text(scenario: str, hint: str | Hint) -> str:
    """A plain hint as it is; a tiered ``Hint`` as ``HINT_TIERS`` says for this failure."""
    return HINT_TIERS.text(scenario, hint) if isinstance(hint, Hint) else hint


def more_hint() -> str:
    """Print (and return) the concrete change for the last tiered hint a check gave."""
    if HINT_TIERS.last is None:
        message = "no check has given a two-tier hint in this kernel yet"
    else:
        scenario, hint = HINT_TIERS.last
        message = f"{scenario}\n  the change: {hint.change}"
    print(message)
    return message
