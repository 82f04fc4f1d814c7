"""Whether a stage check already scores a failure of the whole engine: then ``check_engine`` does not.

A part of ``check_engine`` that fails knows which rule broke, and so which stages could be at fault
(``blame``: the suspects). Before it fails, it runs each suspect stage's own check as that stage's
graded cell runs it: on the class the cell hands it (``EngineAdmission``, ``EnginePlanner`` and
``EngineScheduler`` as they sit in the engine's ancestry; the engine's own class for the fork,
``_advance`` and ``_forward``), its visible scenarios first, then its hidden kinds drawn at seed 0
(``HIDDEN_SEED``; ``_forward``'s test has its two plans only: a hidden batching call relabels their
tokens, which changes nothing a ``_forward`` does with them). A stage is a suspect only while the
engine runs that class's methods unchanged (an engine that overrides ``_plan`` is not excused by a
failing ``EnginePlanner``).

If one of them fails too, the failure is that stage's, already scored in its cell: the part does not
fail again. It passes with a note that names the stage, its cell and its methods, and says that the
whole engine was not proven (``Excuse.note``). If every suspect passes, the failure is one only the
whole engine can see (the forward pass, the step loop, the stages working together) and it stands.

The same code decides in the lab and in the grader (the stage checks run on the same stand-ins of the
learner's classes as the whole engine), and a hidden call's note names no number of its scenarios.

Why the stage's hidden kinds too: a stage whose mistake only its hidden kinds catch loses its cell's
points when graded, so the whole engine should not charge it again. The grader draws that cell's kinds
from a secret seed of its own; the kinds catch the same mistakes at every seed (the stage tests prove
it on the classic ones), so one draw answers for the grader's. That draw is seed 0 for both calls of a
whole-engine cell, visible and hidden: the two decide on the same evidence, the lab shows it, and the
learner replays it with ``hidden=True`` in a cell of their own. A mistake that only some draws catch
(none of the classic ones) may then be charged in both cells, or in neither, as the grader's draw falls.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..reading.learner_code import is_remote
from ..registry import REGISTRY
from ..speaking.failure import CheckFailed
from ..story import Story
from .blame import ADMISSION, ADVANCE, EVERY_STAGE, FORK, FORWARD, PLAN, RESERVE
from .forward import forward_alone
from .scenarios import ADMISSION_STORY, ADVANCE_STORY, FORK_STORY, PLAN_STORY, RESERVE_STORY

__all__ = ["HIDDEN_SEED", "STAGES", "Excuse", "Stage", "excuse"]

HIDDEN_SEED = 0  # the draw of a stage's hidden kinds that speaks for the grader's (see above)


@dataclass(frozen=True)
class Stage:
    """A stage of the engine: how its own check is named and run, the graded cell that runs it, and the
    learner's methods it scores (the ones the note names, and the ones the engine must run unchanged)."""

    name: str
    cell: str
    methods: tuple[str, ...]
    visible: Callable[[tuple], Any]  # visible(classes): its visible scenarios
    hidden: Callable[..., Any] | None  # hidden(classes, seed=...): its hidden kinds drawn from seed

    @property
    def builds(self) -> str | None:
        """The class the stage's cell hands its check (``@check(builds=...)``); None when it is the class
        ``check_engine`` is handed too (the engine's own)."""
        engine = REGISTRY["check_engine"].builds
        builds = REGISTRY[self.name].builds if self.name in REGISTRY else engine
        return None if builds == engine else builds

    def replay(self) -> str:
        """The call a learner makes in a cell of their own to see the hint of its hidden kinds."""
        return f"{self.name}({REGISTRY[self.name].builds}, PagedKVCache, PrefixCache, hidden=True)"


def _stage_check(name: str, story: Story, cell: str, methods: tuple[str, ...]) -> Stage:
    """A stage scored by a check of its own, ``name`` (``check``): its story told as the check tells it,
    without the check's pass line."""
    return Stage(
        name,
        cell,
        methods,
        lambda classes: story.tell(classes),
        lambda classes, seed: story.tell(classes, seed=seed, hidden=True),
    )


STAGES = {
    ADMISSION: _stage_check(
        "check_engine_admission", ADMISSION_STORY, "test_engine_admission", ("add_request", "_make_room", "_admit")
    ),
    PLAN: _stage_check("check_engine_plan", PLAN_STORY, "test_engine_plan", ("_plan",)),
    RESERVE: _stage_check("check_engine_reserve", RESERVE_STORY, "test_engine_reserve", ("_reserve", "_preempt")),
    FORK: _stage_check("check_engine_fork", FORK_STORY, "test_engine_fork", ("_fork_samples", "_finish")),
    ADVANCE: _stage_check("check_engine_advance", ADVANCE_STORY, "test_engine_advance", ("_advance",)),
    FORWARD: Stage(
        "check_engine's test of _forward alone",
        "test_engine_batching",
        ("_forward",),
        lambda classes: forward_alone(*classes),
        None,
    ),
}
assert tuple(STAGES) == EVERY_STAGE


@dataclass(frozen=True)
class Failing:
    """A suspect stage whose check fails on the learner's code, and on which of its scenarios."""

    stage: Stage
    hidden: bool  # False: its visible scenarios; True: its hidden kinds (the visible ones pass)


@dataclass(frozen=True)
class Excuse:
    """Why a part of ``check_engine`` does not fail: stages that fail their own checks too."""

    part: str
    failing: tuple[Failing, ...]

    def note(self, failure: CheckFailed, *, hidden: bool) -> str:
        """The learner's note: the stage and its cell to fix first, and that the whole engine was not proven.
        A hidden call's note says nothing of its scenario (its numbers are the grader's secret)."""
        where = f"on the hidden {self.part} workload" if hidden else f"here: {failure.finding.scenario}"
        named = "; ".join(_named(failing) for failing in self.failing)
        first = self.failing[0].stage
        return (
            f"the {self.part} part is not proven, and not counted against you here. Your engine broke a rule "
            f"{where}. That rule depends on methods another cell scores, and its check fails on your code too: "
            f"{named}. Fix {first.cell} first: this cell does not score the same bug twice, and once that cell "
            "passes, this one checks the whole engine again."
        )


def _named(failing: Failing) -> str:
    stage = failing.stage
    methods = ", ".join(stage.methods)
    if not failing.hidden:
        return f"{stage.name} ({methods}; cell {stage.cell}: run it to see why)"
    return (
        f"{stage.name} ({methods}; cell {stage.cell}: its visible scenarios pass, its hidden ones fail; call "
        f"{stage.replay()} in a cell of your own to see the hint)"
    )


def excuse(part: str, suspects: tuple[str, ...], classes: tuple) -> Excuse | None:
    """The stages among ``suspects`` whose own checks fail on the learner's code (``classes``: the
    engine, cache and prefix-cache classes ``check_engine`` was given), or None when none does."""
    engine_class, *partners = classes
    found = []
    for name in suspects:
        stage = STAGES[name]
        stage_class = _stage_class(engine_class, stage)
        if stage_class is None:
            continue
        stage_classes = (stage_class, *partners)
        runs = [(False, stage.visible)]
        if stage.hidden is not None:
            runs.append((True, functools.partial(stage.hidden, seed=HIDDEN_SEED)))
        for hidden, run in runs:
            try:
                run(stage_classes)
            except CheckFailed:  # NotImplementedYet included: an unfinished stage fails its cell too
                found.append(Failing(stage, hidden))
                break
    return Excuse(part, tuple(found)) if found else None


def _stage_class(engine_class: Any, stage: Stage) -> Any:
    """The class the stage's cell hands its check, if the engine runs that class's methods unchanged;
    else None (the stage cannot have caused what the engine did)."""
    if stage.builds is None:
        return engine_class  # the cells of the fork, _advance and _forward hand their checks the engine's own class
    try:
        ancestry = _ancestry(engine_class)
        stage_class = next((klass for klass in ancestry if _name(klass) == stage.builds), None)
        if stage_class is None:
            return None
        unchanged = all(_method(engine_class, name) is _method(stage_class, name) for name in stage.methods)
    except Exception:  # noqa: BLE001 - a class that cannot be read plainly: no stage is blamed for it
        return None
    return stage_class if unchanged else None


def _ancestry(klass: Any) -> tuple:
    """``klass.__mro__``, read with type's own descriptor where the class lives here (no metaclass of the
    learner's answers); across the grader's wire, as the learner's process reports it."""
    mro = klass.__mro__ if is_remote(klass) else type.__dict__["__mro__"].__get__(klass)
    return tuple(mro) if type(mro) in (tuple, list) else ()


def _name(klass: Any) -> str | None:
    name = klass.__name__ if is_remote(klass) else type.__dict__["__name__"].__get__(klass)
    return name if type(name) is str else None


_MISSING = object()


def _method(klass: Any, name: str) -> Any:
    """The function ``klass`` finds for ``name`` (no descriptor or metaclass of the learner's runs here)."""
    if is_remote(klass):
        return getattr(klass, name, _MISSING)
    return inspect.getattr_static(klass, name, _MISSING)
