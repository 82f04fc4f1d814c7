"""Running ``check_engine``'s parts, and judging a part's failure: the whole engine's, or a stage's already scored.

``tell_parts`` runs each part asked for (``whole.RUNNERS``) on the visible workload, or on its workload
relabelled by the grader's seed (a hidden call: ``scenarios.Relabelled``). A part runs inside
``blame.recording()``; when it fails, the stages its broken rule names (minus what the part tested
alone first: ``TESTED_FIRST``) are asked whether their own checks fail too (``attribution.excuse``).
If one does, the part passes with a note (``attribution.Excuse.note``); if none does, the failure stands.
"""

from __future__ import annotations

import random

from ...serving import one_thread
from ..speaking.failure import CheckFailed, NotImplementedYet
from ..speaking.failure import Refused as RefusedValue
from ..speaking.hidden import run_hidden_scenarios
from . import attribution
from .blame import FORWARD, recording
from .scenarios import VISIBLE_TOKENS, Relabelled
from .whole import PARTS, RUNNERS

__all__ = ["TESTED_FIRST", "tell_parts"]

# What a part tests on its own before it serves a workload, so never asks again: the batching part
# begins with _forward alone (``forward``), which scores _forward in its cell.
TESTED_FIRST = {"batching": (FORWARD,)}


def tell_parts(classes: tuple, parts, *, seed: int, hidden: bool) -> str | None:
    """Run ``parts`` (one of PARTS, or a selection of them) on ``classes``, the learner's (engine, cache,
    prefix cache); returns the note of each part that was not proven, or None when every part was."""
    parts = (parts,) if isinstance(parts, str) else tuple(parts)
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise ValueError(f"parts must be a non-empty selection of {PARTS}; got {parts}")
    results: dict[str, str | None] = {}
    with one_thread():
        for part in parts:
            judged = _judged(part, RUNNERS[part], results)
            if hidden:
                kind = {f"the {part} workload, its tokens relabelled by the grader's seed": judged}
                run_hidden_scenarios(kind, random.Random(f"{part}/{seed}").getrandbits(31), classes)
            else:
                judged(classes, None)
    if not any(results.values()):
        return None  # the pass line counts the scenarios and calls
    return "; ".join(note or f"the {part} part passed" for part, note in results.items())


def _judged(part: str, runner, results: dict[str, str | None]):
    """``runner`` (a part) as a scenario ``(classes, rng)``: on the visible workload (rng None) or on its
    workload relabelled as drawn from ``rng`` (a hidden call). A failure that a stage check scores (the
    stages its rule blames fail their own checks too: ``attribution``) does not fail the part: the part's
    result is then a note saying so (``results[part]``), and the whole engine is not proven."""

    def scenario(classes, rng: random.Random | None) -> None:
        drawn = VISIBLE_TOKENS if rng is None else Relabelled.draw(rng)
        with recording() as record:
            try:
                runner(*classes, drawn)
            except (NotImplementedYet, RefusedValue):
                raise  # unfinished code, or a value built to fool a comparison: never excused
            except CheckFailed as error:
                failure = error
                suspects = tuple(stage for stage in record.suspects(error) if stage not in TESTED_FIRST.get(part, ()))
            else:
                results[part] = None
                return
        excuse = attribution.excuse(part, suspects, classes)
        if excuse is None:
            raise failure
        results[part] = excuse.note(failure, hidden=rng is not None)

    return scenario
