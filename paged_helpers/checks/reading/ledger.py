"""The check's own account of a block pool: who holds each block, and what the check wrote where.

Every check that drives a learner's cache keeps one ``Ledger``: the tables it expects each sequence
to have, the other holders it knows of (a prefix cache's entry, a tree, a pin), what it wrote into
each block, and who wrote each value it stored (so a message can say whose keys a wrong block
holds). The ledger records what the check did and what the learner's code told it; it never decides
anything (no allocation, no eviction: the no-solution test holds). ``expect_pool`` holds the
learner's allocator to it through the pool's one invariant (``paged_helpers.pool_invariant``): each
block's count is the number of its holders, the free list is exactly the blocks nobody holds, each
once, and ``num_free`` is its length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...pool_invariant import PoolReading
from ..speaking.failure import Hint, fail
from .learner_code import read_ahead
from .strict import learner_int, learner_int_list

__all__ = ["Ledger", "ceil_div", "expect_all_free", "expect_pool_matches", "read_pool"]


def ceil_div(count: int, size: int) -> int:
    """``count / size`` rounded up, in integers: the blocks that hold ``count`` tokens."""
    return -(-count // size)


def read_pool(allocator: Any, scenario: str = "") -> PoolReading:
    """``allocator.refs``, ``allocator.free`` and ``allocator.num_free`` as plain ints, in one request
    where the allocator lives in the learner's process. Anything else (an int subclass, an object that
    says it equals everything) fails naming what was expected (``strict.learner_int_list``)."""
    read_ahead(allocator, names=("refs", "free", "num_free"))
    return PoolReading(
        tuple(learner_int_list(allocator.refs, "allocator.refs", scenario)),
        tuple(learner_int_list(allocator.free, "allocator.free", scenario)),
        learner_int(allocator.num_free, "allocator.num_free", scenario),
    )


class Ledger:
    """What a check knows of a pool of ``num_blocks`` blocks, by its own account.

    ``tables[seq]``     the blocks the check expects ``seq``'s table to name, in order
    ``others``          ``(who, blocks)``: each holding by something other than a table (a cache's entry,
                        a tree, a pin; ``who`` names it in messages), one per ``hold``
    ``contents[block]`` what the check wrote into ``block`` (a prefix, a label): set when it writes
    ``writers[value]``  ``(who, position)`` for a value the check stored, to name a misplaced one

    Every block the ledger names is in ``[0, num_blocks)``: asserted where a block enters it.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.tables: dict[Any, list[int]] = {}
        self.others: list[tuple[str, list[int]]] = []
        self.contents: dict[int, Any] = {}
        self.writers: dict[Any, tuple[Any, int]] = {}

    def _in_pool(self, blocks: Iterable[int]) -> None:
        outside = [block for block in blocks if not 0 <= block < self.num_blocks]
        assert not outside, f"the check's ledger was handed blocks outside the pool: {outside}"

    def hold(self, who: str, blocks: Iterable[int]) -> None:
        """One more holding of ``blocks`` by ``who`` (not a table): one reference each."""
        blocks = list(blocks)
        self._in_pool(blocks)
        self.others.append((who, blocks))

    def wrote(self, block: int, content: Any) -> None:
        """The check wrote ``content`` into ``block``."""
        self._in_pool([block])
        self.contents[block] = content

    def stored(self, value: Any, who: Any, position: int) -> None:
        """The check stored ``value`` for ``who`` at ``position`` (values are unique to a writer)."""
        self.writers[value] = (who, position)

    def holders(self, tables: dict | None = None) -> list[list]:
        """For each block, who holds it: each table entry naming it (``tables``, or the ledger's own),
        then each other holder. Entries outside the pool are left for the table checks to name."""
        holders: list[list] = [[] for _ in range(self.num_blocks)]
        for seq, table in (self.tables if tables is None else tables).items():
            for block in table:
                if isinstance(block, int) and 0 <= block < self.num_blocks:
                    holders[block].append(seq)
        for who, blocks in self.others:
            for block in blocks:
                holders[block].append(who)
        return holders

    def expect_pool(
        self, allocator: Any, where: str, hint: Callable[[int, list, int], str | Hint], tables: dict | None = None
    ) -> PoolReading:
        """The allocator agrees with the ledger's holders (``tables``: the learner's own tables in place
        of the ledger's, for a check that follows them rather than predicting them)."""
        return expect_pool_matches(allocator, self.holders(tables), where, hint)


def expect_pool_matches(
    allocator: Any, holders: list[list], where: str, hint: Callable[[int, list, int], str | Hint]
) -> PoolReading:
    """The allocator agrees with the check's account of who holds each block.

    Who owns a reference is the caller's account (``holders[block]``: the tables, or anything else
    that keeps a block alive); this compares it with the pool's own invariant: each block's count is
    the number of its holders; the free list is exactly the blocks nobody holds, each once;
    ``num_free`` is the length of the free list. ``hint(block, holders, count)`` explains a count.
    """
    reading = read_pool(allocator)
    for block, who in enumerate(holders):
        count = reading.refs[block]
        if count != len(who):
            fail(
                f"{where}: the reference count of block {block}",
                f"refcount {len(who)} (the tables holding it: {who or 'none'})",
                f"refcount {count}",
                hint(block, who, count),
            )
    unused = [block for block, who in enumerate(holders) if not who]
    if sorted(reading.free) != unused:
        lost, twice = reading.lost(), reading.twice_on_free_list()
        if lost:
            why = (
                f"block(s) {lost} have count 0 but are not on the free list: the release that brings a count "
                "to 0 must put the block back on the free list"
            )
        elif twice:
            why = f"block(s) {twice} are on the free list more than once: allocate() would hand them out twice"
        else:
            why = "a block returns to the free list when its last reference is released, not before"
        fail(f"{where}: the allocator's free list", f"exactly the unused blocks {unused}", sorted(reading.free), why)
    if not reading.num_free_agrees():
        fail(f"{where}: allocator.num_free", len(unused), reading.num_free, "num_free counts the blocks nobody holds.")
    return reading


def expect_all_free(allocator: Any, num_blocks: int, where: str, hint: str | Hint) -> None:
    """Every sequence is gone: all ``num_blocks`` blocks must be free again (nothing leaked)."""
    free = learner_int(allocator.num_free, "allocator.num_free", where)
    if free != num_blocks:
        refs = learner_int_list(allocator.refs, "allocator.refs", where)
        stuck = [block for block, count in enumerate(refs) if count]
        fail(
            where,
            f"all {num_blocks} blocks free",
            f"{free} free; block(s) {stuck} still counted as used",
            hint,
        )
