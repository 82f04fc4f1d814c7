"""Which stages a failure of the whole engine may come from: the suspects of every rule ``check_engine`` applies.

``check_engine`` scores only what no stage check scores (CONTRIBUTING, "How points are set", rule 2).
So every rule it applies, in the watch (``watch``) and in its parts (``whole``), runs inside
``blamed(*stages)``: a failure escaping it, or an exception of the learner's code, is recorded with
the stages whose methods could have caused it. The innermost region records first, and its record
stands (a write at the wrong positions, found inside the forward pass inside step(), is blamed on
``_forward`` and on what sets ``num_cached``, not on everything step() runs); ``whole_engine_only()``
is the one region whose record replaces the ones inside it (notebook 08's ``_forward``, tested on
plans the check makes itself, where no stage method runs).

    with recording() as record:        # one part of check_engine
        ...                            # the watch and the part record into it
    record.suspects(failure)           # the stages to ask (``attribution``), () if none

Outside ``recording()`` (the stage checks, which use the same watch) nothing is recorded. Records
are keyed by the exception object: the grader's wire raises a hook's failure again as itself, and a
learner's exception is found again as the cause ``call_learner`` chains to its message.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = [
    "ADMISSION",
    "ADVANCE",
    "EVERY_STAGE",
    "FORK",
    "FORWARD",
    "PLAN",
    "RESERVE",
    "Record",
    "blamed",
    "recording",
    "whole_engine_only",
]

# The stages of notebook 08, each scored by a check of its own (``attribution.STAGES``): five stage
# checks, and _forward, which check_engine's batching part tests alone before anything else (``forward``).
ADMISSION, PLAN, RESERVE, FORK, ADVANCE, FORWARD = "admission", "plan", "reserve", "fork", "advance", "forward"
EVERY_STAGE = (ADMISSION, PLAN, RESERVE, FORK, ADVANCE, FORWARD)

_CHAIN = 16  # causes followed from a failure back to the exception first recorded
# The cause as BaseException stores it: no property of a learner's exception class answers.
_CAUSE, _CONTEXT = BaseException.__dict__["__cause__"], BaseException.__dict__["__context__"]


class Record:
    """The stages recorded for each exception that escaped a blamed region, by the exception."""

    def __init__(self) -> None:
        self._blamed: dict[int, tuple[BaseException, tuple[str, ...]]] = {}

    def _note(self, error: BaseException, stages: tuple[str, ...], replace: bool) -> None:
        if replace or id(error) not in self._blamed:
            self._blamed[id(error)] = (error, stages)  # the error is kept: its id stays its own

    def suspects(self, failure: BaseException) -> tuple[str, ...]:
        """The stages recorded for ``failure`` or for the first exception of its chain of causes that was
        recorded (a learner's exception that ``call_learner`` turned into a message); () if none was."""
        error: BaseException | None = failure
        for _ in range(_CHAIN):
            if error is None:
                break
            found = self._blamed.get(id(error))
            if found is not None and found[0] is error:
                return found[1]
            error = _CAUSE.__get__(error) or _CONTEXT.__get__(error)
        return ()


_RECORD: contextvars.ContextVar[Record | None] = contextvars.ContextVar("engine_blame", default=None)


@contextlib.contextmanager
def recording() -> Iterator[Record]:
    """Record, until the block ends, the suspects of every exception that escapes a blamed region."""
    record = Record()
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)


@contextlib.contextmanager
def blamed(*stages: str) -> Iterator[None]:
    """An exception escaping the block may come from the methods of ``stages`` (none: only the whole
    engine sees it), unless a region inside the block said so first."""
    try:
        yield
    except BaseException as error:
        record = _RECORD.get()
        if record is not None:
            record._note(error, stages, replace=False)
        raise


@contextlib.contextmanager
def whole_engine_only() -> Iterator[None]:
    """An exception escaping the block is the whole engine's alone, whatever a region inside it said."""
    try:
        yield
    except BaseException as error:
        record = _RECORD.get()
        if record is not None:
            record._note(error, (), replace=True)
        raise
