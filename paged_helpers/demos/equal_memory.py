"""The one KV budget that the serving demos (``engine``, ``system``) give every run they compare.

A budget is ``slots`` static slots of ``capacity`` tokens; the paged runs cut the same memory into
blocks of ``block_size``. Both refusals say which number to change before any engine runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def check_budget(slots: int, block_size: int, capacity: int) -> None:
    """Refuse a budget the paged runs cannot cut into whole blocks."""
    if slots < 1 or block_size < 1 or capacity % block_size:
        raise ValueError(
            f"need slots >= 1, block_size >= 1 and capacity a multiple of block_size; got slots={slots}, "
            f"capacity={capacity}, block_size={block_size}"
        )


def check_fits(workload: Sequence[Any], capacity: int) -> None:
    """Refuse a workload whose longest request (prompt and answer) does not fit one static slot."""
    longest = max(len(r.prompt) + r.max_new_tokens for r in workload)
    if longest > capacity:
        raise ValueError(f"the workload's longest request takes {longest} tokens; capacity={capacity} is too small")
