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

from collections.abc import Callable

from ..registry import check
from .scenarios import SLOT_STORY, SWEEP_STORY

__all__ = ["check_physical_slot", "check_utilization_sweep"]


@check(notebook="01_block_tables", builds="physical_slot")
def check_physical_slot(physical_slot: Callable, *, seed: int = 0) -> None:
    """physical_slot(table, position, block_size) == (table[position // block_size], position % block_size).

    ``seed`` varies the scrambled tables (hidden tests use another seed).
    """
    return SLOT_STORY.tell(physical_slot, seed=seed)


@check(notebook="01_block_tables", builds="utilization_sweep", graded=False)
def check_utilization_sweep(utilization_sweep: Callable, *, seed: int = 0) -> str:
    """Stretch: utilization_sweep(lengths, block_sizes) == {size: sum(lengths) / slots reserved in blocks}."""
    return SWEEP_STORY.tell(utilization_sweep, seed=seed)
