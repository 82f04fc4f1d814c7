"""check_physical_slot: where logical position p of a sequence lives in the block pool (notebook 01).

The learner writes ``physical_slot(table, position, block_size) -> (physical_block, offset)``:
position p is in physical block ``table[p // block_size]`` at offset ``p % block_size``. The
check covers the chapter's example, every position of seeded scrambled (non-contiguous,
out-of-order) tables for several block sizes, positions exactly on block boundaries, and bad
positions (and a block size of 0) that must raise instead of returning a plausible wrong slot: a
``ValueError`` whose message names the argument that is wrong (``position`` or ``block_size``), as
the notebook asks. An ``IndexError`` from ``table[...]`` is not enough: it means nothing checked.

The stretch exercise (not graded), ``utilization_sweep(lengths, block_sizes)``, is checked on
lengths that fill their blocks exactly, one token, and both sides of a block boundary, where
counting blocks as ``length // block_size + 1`` or rounding the total instead of each request
goes wrong.
"""

from __future__ import annotations

import linecache
import operator
import random
from collections.abc import Callable

from .reading.calls import call_learner
from .registry import check
from .speaking.failure import CheckFailed, NotImplementedYet, fail

__all__ = ["check_physical_slot", "check_utilization_sweep"]


def _as_slot(result: object) -> tuple[int, int] | None:
    """The learner's answer as (block, offset) of ints, or None when it is not a pair of integers."""
    try:
        block, offset = result  # type: ignore[misc]
        return operator.index(block), operator.index(offset)
    except (TypeError, ValueError):
        return None


def _diagnose(table: list[int], position: int, block_size: int, got: tuple[int, int]) -> str:
    """A hint naming the likely bug, from the shape of the wrong answer."""
    logical, offset = divmod(position, block_size)
    expected = (table[logical], offset)
    block, got_offset = got
    if got == (expected[1], expected[0]):
        return "the pair is in the wrong order: return (physical_block, offset)."
    if block != expected[0]:
        if position < len(table) and block == table[position]:
            return (
                f"the block was looked up as table[position] = table[{position}]; the table has one entry "
                f"per block, not per token: use table[position // block_size] = table[{logical}]."
            )
        if block == logical and table[logical] != logical:
            return (
                f"{block} is the *logical* block (position // block_size); the data lives in the "
                f"physical block the table maps it to: table[{logical}] = {table[logical]}."
            )
        neighbours = {table[i] for i in (logical - 1, logical + 1) if 0 <= i < len(table)}
        if block in neighbours:
            return (
                f"off by one block: position {position} is {'the first' if offset == 0 else 'a'} slot of "
                f"logical block {position} // {block_size} = {logical} (positions {logical * block_size}.."
                f"{logical * block_size + block_size - 1}). Use floor division, position // block_size."
            )
        return f"the physical block is table[position // block_size] = table[{logical}] = {table[logical]}."
    if got_offset == logical:
        return (
            "the offset was computed as position // block_size; "
            "the offset inside the block is position % block_size."
        )
    return (
        f"the block is right but the offset is not: the offset inside a block is position % block_size = "
        f"{position} % {block_size} = {offset} (a different divisor, such as len(table), gives {got_offset})."
    )


def _scrambled_table(rng: random.Random, blocks: int, pool: int) -> list[int]:
    """``blocks`` distinct physical ids from a pool of ``pool``, neither contiguous nor in order."""
    while True:
        table = rng.sample(range(pool), blocks)
        if any(table[i] + 1 != table[i + 1] for i in range(blocks - 1)) and table != list(range(blocks)):
            return table


def _expect_slot(physical_slot: Callable, table: list[int], position: int, block_size: int, why: str) -> None:
    scenario = f"physical_slot(table={table}, position={position}, block_size={block_size}) ({why})"
    try:
        result = call_learner(
            "physical_slot", physical_slot, list(table), position, block_size, scenario=scenario
        )
    except NotImplementedYet:
        raise
    except CheckFailed as error:
        if isinstance(error.__cause__, IndexError):
            likely = (
                f"the table has {len(table)} entries, one per block, so the index into it must be "
                f"position // block_size = {position // block_size}, not the position itself."
            )
            raise error.reworded(f"{error}\n  likely cause: {likely}", hint=likely) from error.__cause__
        raise
    expected = (table[position // block_size], position % block_size)
    got = _as_slot(result)
    if got is None:
        fail(scenario, expected, repr(result), "return a pair of integers: (physical_block, offset).")
    if got != expected:
        fail(scenario, expected, got, _diagnose(table, position, block_size, got))


def _names(message: str, argument: str) -> bool:
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


def _expect_refused(
    physical_slot: Callable,
    table: list[int],
    position: int,
    block_size: int,
    why: str,
    argument: str = "position",
) -> None:
    """The notebook's contract: a ValueError whose message names the argument that is wrong."""
    scenario = f"physical_slot(table={table}, position={position}, block_size={block_size}) ({why})"
    expected = f"ValueError naming `{argument}`"
    try:
        result = physical_slot(list(table), position, block_size)
    except NotImplementedError:
        call_learner("physical_slot", physical_slot, list(table), position, block_size)
    except ValueError as error:
        if _names(str(error), argument):
            return
        if argument == "block_size" and _names(str(error), "position"):
            hint = (
                "your message blames `position`, but the block size is what is wrong: with block_size = 0 the "
                "table holds no positions at all, so every position looks out of range. Check block_size first "
                "and raise ValueError naming `block_size`."
            )
        else:
            hint = (
                f"the ValueError is right, but its message must say which argument is wrong: put `{argument}` "
                f"in it, e.g. ValueError(f\"{argument} {{{argument}}} is out of range\")."
            )
        fail(scenario, expected, f"ValueError: {error}", hint)
    except IndexError as error:
        if _raised_on_purpose(error):
            hint = f"the notebook asks for ValueError here, not IndexError: raise ValueError naming `{argument}`."
        else:
            hint = (
                "nothing checked the position before table[...] ran off the end of the table (that is where the "
                "IndexError comes from): test 0 <= position < len(table) * block_size first and raise ValueError "
                "naming `position`, as the notebook asks."
            )
        fail(scenario, expected, f"IndexError: {error}", hint)
    except Exception as error:
        fail(
            scenario,
            expected,
            f"{type(error).__name__}: {error}",
            f"check {argument} before using it, and raise ValueError naming `{argument}` when it is out of range.",
        )
    else:
        if argument == "block_size":
            hint = "a block holds at least one token: raise ValueError naming `block_size` when block_size < 1."
        elif position < 0:
            hint = (
                "Python accepts negative indexes, so table[-1] silently returns the last block: test "
                "0 <= position < len(table) * block_size yourself and raise ValueError naming `position`."
            )
        else:
            hint = (
                "this position is past the last block of the table: test 0 <= position < len(table) * block_size "
                "and raise ValueError naming `position`."
            )
        fail(scenario, expected, f"returned {result!r}", hint)


@check(notebook="01_block_tables", builds="physical_slot")
def check_physical_slot(physical_slot: Callable, *, seed: int = 0) -> None:
    """physical_slot(table, position, block_size) == (table[position // block_size], position % block_size).

    ``seed`` varies the scrambled tables (hidden tests use another seed).
    """
    # The chapter's example first: the message is easiest to follow there.
    _expect_slot(physical_slot, [5, 1, 7], 9, 4, "the chapter's example")
    _expect_slot(physical_slot, [5, 1, 7], 0, 4, "the first position")
    _expect_slot(physical_slot, [5, 1, 7], 8, 4, "the first position of logical block 2: on a block boundary")
    _expect_slot(physical_slot, [5, 1, 7], 7, 4, "the last slot of logical block 1, just before a boundary")
    _expect_slot(physical_slot, [5, 1, 7], 11, 4, "the last slot of the last block")
    rng = random.Random(seed)
    for block_size in (1, 3, 4, 16):
        table = _scrambled_table(rng, blocks=rng.randint(3, 6), pool=64)
        for position in range(len(table) * block_size):
            _expect_slot(physical_slot, table, position, block_size, "a scrambled table")
    _expect_refused(physical_slot, [5, 1, 7], -1, 4, "a negative position")
    _expect_refused(physical_slot, [5, 1, 7], 12, 4, "one past the last slot of the table")
    _expect_refused(physical_slot, [5, 1, 7], 0, 0, "a block size of 0", argument="block_size")


# --------------------------------------------------------------------------- stretch: the sweep

_SWEEP_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)


def _blocks_for(length: int, block_size: int) -> int:
    return -(-length // block_size)


def _sweep_cases(seed: int) -> list[tuple[str, list[int]]]:
    rng = random.Random(seed)
    return [
        ("one request of exactly 32 tokens (a whole number of blocks for sizes up to 32)", [32]),
        ("one request of 1 token", [1]),
        ("requests of 16, 17 and 15 tokens: on, one past and one before a boundary of 16", [16, 17, 15]),
        ("32 seeded requests of 20-500 tokens, like run.py paged", [rng.randint(20, 500) for _ in range(32)]),
    ]


def _sweep_hint(lengths: list[int], block_size: int, got: float, expected: float) -> str:
    stored = sum(lengths)
    rounded_total = stored / (_blocks_for(stored, block_size) * block_size)
    if got > 1.0 + 1e-9:
        return (
            "utilisation above 100% means fewer slots were reserved than tokens stored: a partly filled "
            "last block is still a whole block. Count blocks per request with ceiling division, "
            "-(-length // block_size)."
        )
    if abs(got - stored / (sum(length // block_size + 1 for length in lengths) * block_size)) < 1e-9:
        exact = next((length for length in lengths if length % block_size == 0), None)
        example = (
            f" A request of exactly {exact} tokens needs {exact // block_size} block(s) of {block_size}, not "
            f"{exact // block_size + 1}."
            if exact
            else ""
        )
        return "length // block_size + 1 counts one block too many whenever a length fills its blocks exactly." + (
            example + " Use ceiling division, -(-length // block_size)."
        )
    if abs(got - rounded_total) < 1e-9 and abs(rounded_total - expected) > 1e-9:
        return (
            "the blocks were counted for the total of all tokens, as if the requests shared their last "
            "block. Each request holds its own blocks: sum the blocks of every request, then multiply "
            "by block_size."
        )
    return "utilisation = tokens stored / (block_size x the sum over requests of the blocks each holds)."


@check(notebook="01_block_tables", builds="utilization_sweep", graded=False)
def check_utilization_sweep(utilization_sweep: Callable, *, seed: int = 0) -> str:
    """Stretch: utilization_sweep(lengths, block_sizes) == {size: sum(lengths) / slots reserved in blocks}."""
    cases = _sweep_cases(seed)
    for description, lengths in cases:
        scenario = f"utilization_sweep({description}, block_sizes={_SWEEP_BLOCK_SIZES})"
        result = call_learner(
            "utilization_sweep", utilization_sweep, list(lengths), _SWEEP_BLOCK_SIZES, scenario=scenario
        )
        if not isinstance(result, dict) or sorted(result) != sorted(_SWEEP_BLOCK_SIZES):
            fail(
                scenario,
                f"a dict with one entry per block size {list(_SWEEP_BLOCK_SIZES)}",
                repr(result)[:200],
                "return {block_size: utilisation} for every block size you were given.",
            )
        for block_size in _SWEEP_BLOCK_SIZES:
            reserved = block_size * sum(_blocks_for(length, block_size) for length in lengths)
            expected = sum(lengths) / reserved
            got = result[block_size]
            if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9:
                fail(
                    f"{scenario}, block size {block_size}",
                    f"{expected:.6f} ({sum(lengths)} tokens in {reserved} reserved slots)",
                    repr(got),
                    _sweep_hint(lengths, block_size, float(got), expected)
                    if isinstance(got, (int, float))
                    else "each value is a float: tokens stored / slots reserved.",
                )
    return f"{len(cases)} sets of requests x {len(_SWEEP_BLOCK_SIZES)} block sizes"
