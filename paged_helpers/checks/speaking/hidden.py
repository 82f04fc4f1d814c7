"""Hidden scenarios: the kinds a hidden test runs at the grader's secret seed, and what their failures may say."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .failure import CheckFailed, Finding, LearnerWords, NotImplementedYet, python_exception_name, without_numbers

__all__ = ["HIDDEN_LABEL", "MAX_REDRAWS", "hidden_failure", "redraw_until", "run_hidden_scenarios"]

HIDDEN_LABEL = " (hidden test; when graded, its scenarios come from the grader's secret seed)"


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


# A draw that shows every mistake of its kind comes within a few tries (measured over thousands of seeds
# for each check that redraws: at most a few hundred); the cap turns a draw that never comes into the
# course's own error instead of a check that never returns.
MAX_REDRAWS = 1000


def redraw_until(draw: Callable[[], Any], telling: Callable[[Any], bool]) -> Any:
    """``draw()`` again until ``telling`` holds of what it drew, at most ``MAX_REDRAWS`` times: a hidden
    scenario redrawn until it shows every mistake of its kind (the seed picks among such draws)."""
    for _ in range(MAX_REDRAWS):
        drawn = draw()
        if telling(drawn):
            return drawn
    raise RuntimeError(f"no telling draw in {MAX_REDRAWS} tries: a bug of the course's check, not of your code")


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
