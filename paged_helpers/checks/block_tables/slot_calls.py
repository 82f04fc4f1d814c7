"""One call of the learner's ``physical_slot``: the slot it must return, or the refusal it must raise.

``expect_slot`` compares the answer with ``(table[position // block_size], position % block_size)``;
``expect_refused`` asks for the notebook's contract on a bad argument, a ``ValueError`` whose message
names the argument that is wrong. Both name the scenario with the call as written; the hints that
say why an answer or a refusal is wrong are ``diagnosis``'s.
"""

from __future__ import annotations

import linecache
import operator
from collections.abc import Callable

from ..reading.calls import call_learner
from ..speaking.failure import CheckFailed, NotImplementedYet, fail
from . import diagnosis

__all__ = ["expect_refused", "expect_slot"]


def _as_slot(result: object) -> tuple[int, int] | None:
    """The learner's answer as (block, offset) of ints, or None when it is not a pair of integers."""
    try:
        block, offset = result  # type: ignore[misc]
        return operator.index(block), operator.index(offset)
    except (TypeError, ValueError):
        return None


def _call_text(table: list[int], position: int, block_size: int, why: str) -> str:
    return f"physical_slot(table={table}, position={position}, block_size={block_size}) ({why})"


def expect_slot(physical_slot: Callable, table: list[int], position: int, block_size: int, why: str) -> None:
    """``physical_slot`` returns the pair (physical block, offset) where ``position`` lives."""
    scenario = _call_text(table, position, block_size, why)
    try:
        result = call_learner("physical_slot", physical_slot, list(table), position, block_size, scenario=scenario)
    except NotImplementedYet:
        raise
    except CheckFailed as error:
        if isinstance(error.__cause__, IndexError):
            likely = diagnosis.index_past_the_table(len(table), position // block_size)
            raise error.reworded(f"{error}\n  likely cause: {likely}", hint=likely) from error.__cause__
        raise
    expected = (table[position // block_size], position % block_size)
    got = _as_slot(result)
    if got is None:
        fail(scenario, expected, repr(result), "return a pair of integers: (physical_block, offset).")
    if got != expected:
        fail(scenario, expected, got, diagnosis.wrong_slot_hint(table, position, block_size, got))


def names_argument(message: str, argument: str) -> bool:
    """Whether an error message names ``argument`` (``block_size`` may be written "block size")."""
    message = message.lower()
    return argument in message or argument.replace("_", " ") in message


def _raised_on_purpose(error: BaseException) -> bool:
    """Whether the learner's own ``raise`` statement raised ``error`` (not a subscript of theirs)."""
    last = error.__traceback__
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is None:
        return False
    return linecache.getline(last.tb_frame.f_code.co_filename, last.tb_lineno).strip().startswith("raise")


def expect_refused(
    physical_slot: Callable,
    table: list[int],
    position: int,
    block_size: int,
    why: str,
    argument: str = "position",
) -> None:
    """The notebook's contract: a ValueError whose message names the argument that is wrong."""
    scenario = _call_text(table, position, block_size, why)
    expected = f"ValueError naming `{argument}`"
    try:
        result = physical_slot(list(table), position, block_size)
    except NotImplementedError:
        # Again through call_learner: "not implemented yet". A function that now answers is judged on it.
        result = call_learner("physical_slot", physical_slot, list(table), position, block_size)
        fail(scenario, expected, f"returned {result!r}", diagnosis.accepted_hint(position, argument))
    except ValueError as error:
        if names_argument(str(error), argument):
            return
        blames_position = argument == "block_size" and names_argument(str(error), "position")
        fail(scenario, expected, f"ValueError: {error}", diagnosis.unnamed_argument_hint(argument, blames_position))
    except IndexError as error:
        hint = diagnosis.index_error_hint(argument, on_purpose=_raised_on_purpose(error))
        fail(scenario, expected, f"IndexError: {error}", hint)
    except Exception as error:
        fail(scenario, expected, f"{type(error).__name__}: {error}", diagnosis.other_error_hint(argument))
    else:
        fail(scenario, expected, f"returned {result!r}", diagnosis.accepted_hint(position, argument))
