"""Notebook 01's diagnosis: the hint that names the likely bug, from the shape of what went wrong.

A wrong slot is read against the usual slips (the pair swapped, the table indexed by the position,
the logical block returned, an off-by-one block, ``//`` for ``%``); a wrong refusal against what the
notebook asks (a ``ValueError`` naming ``position`` or ``block_size``); a wrong utilisation against
the two miscounts of the stretch (``length // block_size + 1``, the total's blocks).
"""

from __future__ import annotations

from ..reading.ledger import ceil_div

__all__ = [
    "accepted_hint",
    "index_error_hint",
    "index_past_the_table",
    "other_error_hint",
    "sweep_hint",
    "unnamed_argument_hint",
    "wrong_slot_hint",
]


def wrong_slot_hint(table: list[int], position: int, block_size: int, got: tuple[int, int]) -> str:
    """A hint naming the likely bug, from the shape of the wrong answer."""
    logical, offset = divmod(position, block_size)
    expected = (table[logical], offset)
    block, got_offset = got
    if got == (expected[1], expected[0]):
        return "the pair is in the wrong order: return (physical_block, offset)."
    if block != expected[0]:
        return _wrong_block_hint(table, position, block_size, block)
    if got_offset == logical:
        return (
            "the offset was computed as position // block_size; the offset inside the block is position % block_size."
        )
    return (
        f"the block is right but the offset is not: the offset inside a block is position % block_size = "
        f"{position} % {block_size} = {offset} (a different divisor, such as len(table), gives {got_offset})."
    )


def _wrong_block_hint(table: list[int], position: int, block_size: int, block: int) -> str:
    logical, offset = divmod(position, block_size)
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


def index_past_the_table(entries: int, logical: int) -> str:
    """Why an IndexError came out of a call on a position the table holds."""
    return (
        f"the table has {entries} entries, one per block, so the index into it must be "
        f"position // block_size = {logical}, not the position itself."
    )


def unnamed_argument_hint(argument: str, blames_position: bool) -> str:
    """A ValueError whose message does not name ``argument`` (``blames_position``: it names position)."""
    if blames_position:
        return (
            "your message blames `position`, but the block size is what is wrong: with block_size = 0 the "
            "table holds no positions at all, so every position looks out of range. Check block_size first "
            "and raise ValueError naming `block_size`."
        )
    return (
        f"the ValueError is right, but its message must say which argument is wrong: put `{argument}` "
        f'in it, e.g. ValueError(f"{argument} {{{argument}}} is out of range").'
    )


def index_error_hint(argument: str, *, on_purpose: bool) -> str:
    """An IndexError: raised by the learner's own ``raise`` (``on_purpose``) or by ``table[...]``."""
    if on_purpose:
        return f"the notebook asks for ValueError here, not IndexError: raise ValueError naming `{argument}`."
    return (
        "nothing checked the position before table[...] ran off the end of the table (that is where the "
        "IndexError comes from): test 0 <= position < len(table) * block_size first and raise ValueError "
        "naming `position`, as the notebook asks."
    )


def other_error_hint(argument: str) -> str:
    return f"check {argument} before using it, and raise ValueError naming `{argument}` when it is out of range."


def accepted_hint(position: int, argument: str) -> str:
    """A bad argument that returned a slot instead of raising."""
    if argument == "block_size":
        return "a block holds at least one token: raise ValueError naming `block_size` when block_size < 1."
    if position < 0:
        return (
            "Python accepts negative indexes, so table[-1] silently returns the last block: test "
            "0 <= position < len(table) * block_size yourself and raise ValueError naming `position`."
        )
    return (
        "this position is past the last block of the table: test 0 <= position < len(table) * block_size "
        "and raise ValueError naming `position`."
    )


def sweep_hint(lengths: list[int], block_size: int, got: float, expected: float) -> str:
    """Which miscount gives the utilisation ``got`` instead of ``expected``."""
    stored = sum(lengths)
    rounded_total = stored / (ceil_div(stored, block_size) * block_size)
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
