"""The CowDemo's calls into the cache class: every mistake of the class becomes the line the demo shows.

The demo runs whatever class it is given (the learner's, unfinished or wrong, as readily as the
instructor's), so nothing here raises for the class's mistakes: ``call`` turns an exception into
a ``StepFailed`` whose message is the demo's line, and ``describe_copy`` says what a copy-on-write
did and what it got wrong (keys or values lost, the old block not released).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..unfinished import unfinished_stub


class StepFailed(Exception):
    """A call into the cache class failed; the message is the line the demo shows."""


def not_implemented(what: str, error: NotImplementedError) -> str:
    """The line for unfinished code: where the stub that raised is (notebook 03's, when 04 inherits it)."""
    stub = unfinished_stub(error)
    if stub is not None and stub.notebook is not None:
        return (
            f"{what} is not implemented yet: `{stub.name}` in {stub.notebook} still raises NotImplementedError. "
            f"Finish it in {stub.notebook} and save it, then run this notebook's cell that loads it "
            "(`ph.load_from_notebook`), the cells after it, and the demo's cell again."
        )
    return (
        f"{what} is not implemented yet (it, or something it calls, raises NotImplementedError). "
        "Finish it in its cell, run that cell, then run the demo's cell again."
    )


def call(class_name: str, method: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the class's code; turn any exception into the line the demo shows (a StepFailed)."""
    what = f"{class_name}.{method}"
    try:
        return function(*args, **kwargs)
    except NotImplementedError as error:
        raise StepFailed(not_implemented(what, error)) from None
    except MemoryError:
        raise StepFailed(f"{what} ran out of blocks: the pool is full. Free a sequence or press Reset.") from None
    except Exception as error:  # the class's bug, shown as a line instead of a traceback
        raise StepFailed(f"{what} raised {type(error).__name__}: {error}") from None


def list_blocks(blocks: list[int]) -> str:
    if len(blocks) == 1:
        return f"block {blocks[0]}"
    return "blocks " + ", ".join(str(b) for b in blocks[:-1]) + f" and {blocks[-1]}"


def describe_copy(cache: Any, copy: Any, sharers: int, slots_to_check: int, said: str) -> str:
    """One line for one copy made by copy-on-write, plus what went wrong with it, if anything did."""
    line = (
        f"block {copy.source} was shared by {sharers} tables: copied to block {copy.target} "
        f"before writing {copy.seq}'s {said}"
    )
    lost = [
        name
        for name, pools in (("keys", cache.k_pool), ("values", cache.v_pool))
        if not all(
            torch.equal(pool[copy.target][:, :slots_to_check], pool[copy.source][:, :slots_to_check]) for pool in pools
        )
    ]
    if lost:
        line += f". But the {' and '.join(lost)} were not copied: {copy.seq} lost its earlier tokens"
    if cache.allocator.refs[copy.source] != sharers - 1:
        line += (
            f". But block {copy.source} still has ref {cache.allocator.refs[copy.source]}: "
            "the old block must be released after the copy"
        )
    return line
