"""check_block_allocator: a free list plus reference counts (notebook 02).

The learner writes ``BlockAllocator(num_blocks)`` with ``free`` (the free block ids),
``refs`` (one count per block: how many tables or caches point at it), ``allocate()``,
``share(block)``, ``release(block)`` and the property ``num_free``.

Invariants checked after every step: a block is in ``free`` exactly when its count is 0, and
then exactly once; ``num_free == len(free)``; allocated and free blocks add up to the pool.
Scenarios: a fresh pool, allocation until exhaustion (MemoryError, nothing changed), a shared
block released once (must stay in use), a double free (RuntimeError, nothing changed), reuse of
released blocks, and a seeded random walk of allocations, shares and releases compared
against exact counts.
"""

from __future__ import annotations

import random
from collections import deque

from ..pool_invariant import PoolReading
from .reading.calls import call_learner, expect_raise
from .reading.learner_code import learner_type, read_ahead
from .reading.strict import learner_int, learner_int_list, look_alike, type_name
from .registry import check
from .speaking.failure import Hint, fail
from .story import Story

__all__ = ["check_block_allocator"]


# The members the check reads, and what ``_member`` reads to tell a missing one: fetched in one request
# when the allocator lives in another process (read_ahead; each read below as before).
MEMBERS = ("free", "refs", "num_free")
_MEMBER_READS = ("__dict__", *MEMBERS, *(f"__class__.{name}" for name in MEMBERS))


def _member(allocator: object, name: str, scenario: str) -> object:
    """``allocator.name``, with a clear message when it is missing or when reading it raises (a property)."""
    read_ahead(allocator, names=_MEMBER_READS)
    if name not in getattr(allocator, "__dict__", {}) and not hasattr(learner_type(allocator), name):
        fail(
            scenario,
            f"an attribute `{name}`",
            "no such attribute",
            f"BlockAllocator needs `{name}` (see the table at the top of the notebook).",
        )
    try:
        return getattr(allocator, name)
    except Exception:  # a property of the learner's raised: read it again to name the error
        return call_learner(f"reading `{name}`", getattr, allocator, name, scenario=scenario)


# The containers `free` may be: the notebook asks for a deque; a list or tuple reads the same way.
_FREE_LIST_TYPES = (deque, list, tuple)


def _free_list(value: object, scenario: str) -> list[int]:
    """``free`` in order. A set or dict (or any other plain container) is a wrong design, named as such;
    a look-alike built to answer comparisons is refused by ``learner_int_list``."""
    if type(value) not in _FREE_LIST_TYPES and not look_alike(value):
        fail(
            f"{scenario}: `free`",
            "a collections.deque of the free block ids (a list is read the same way)",
            f"a value of type {type_name(value)}",
            Hint(
                "the free list is a queue: allocate() takes from its front, release() appends at its back, "
                "and the checks (and the later notebooks) read it as an ordered sequence of block ids, in "
                "which a block appearing twice is a bug to be seen, not hidden as a set would hide it",
                "self.free = deque(range(num_blocks)); allocate: self.free.popleft(); release: self.free.append(block)",
            ),
        )
    return learner_int_list(value, "free", scenario)


def _state(allocator: object, scenario: str) -> tuple[list[int], list[int], int]:
    """(free ids in order, refs, num_free), with a clear message when an attribute is missing."""
    free = _free_list(_member(allocator, "free", scenario), scenario)
    refs = learner_int_list(_member(allocator, "refs", scenario), "refs", scenario)
    return free, refs, learner_int(_member(allocator, "num_free", scenario), "num_free", scenario)


def _verify(allocator: object, expected_refs: list[int], scenario: str, lost_hint: str | Hint = "") -> None:
    """The allocator's counts and free list agree exactly with ``expected_refs``.

    ``lost_hint`` replaces the hint for free blocks missing from the free list (a fresh pool).
    """
    free, refs, num_free = _state(allocator, scenario)
    if refs != expected_refs:
        wrong = [b for b in range(len(expected_refs)) if b >= len(refs) or refs[b] != expected_refs[b]]
        block = wrong[0]
        got = refs[block] if block < len(refs) else "missing"
        fail(
            f"{scenario}: the reference count of block {block}",
            expected_refs[block],
            got,
            _refs_hint(expected_refs[block], got),
        )
    reading = PoolReading(tuple(refs), tuple(free), num_free)
    duplicates = reading.twice_on_free_list()
    if duplicates:
        fail(
            f"{scenario}: the free list",
            "each free block exactly once",
            f"free = {free}",
            f"block(s) {duplicates} are on the free list more than once, so allocate() would hand them "
            "to two tables at once. A block goes back to the free list only on the release that "
            "brings it to 0.",
        )
    should_be_free = sorted(b for b, count in enumerate(expected_refs) if count == 0)
    if sorted(free) != should_be_free:
        # refs equal expected_refs here, so the reading's view of the free list is the expected one
        in_use_but_free = reading.free_but_referenced()
        lost = reading.lost()
        if in_use_but_free:
            hint = (
                f"block(s) {in_use_but_free} are on the free list but still referenced (counts "
                f"{[expected_refs[b] for b in in_use_but_free]}): release() must return a block only "
                "when its count reaches 0, and allocate() must take the block off the free list."
            )
        else:
            hint = (
                f"block(s) {lost} have count 0 but are not on the free list: they are lost for good "
                "(a leak). The release that brings a count to 0 must append the block to `free`."
            )
            hint = lost_hint or hint
        fail(f"{scenario}: the free block ids", should_be_free, sorted(free), hint)
    if num_free != len(should_be_free):
        fail(
            f"{scenario}: num_free",
            len(should_be_free),
            num_free,
            Hint("num_free is the number of blocks on the free list, not the pool's size", "return len(self.free)"),
        )


def _refs_hint(expected: int, got: object) -> str:
    if expected == 1 and got == 0:
        return "allocate() must set the new block's count to 1: the table that asked for it points at it."
    if isinstance(got, int) and got < 0:
        return (
            "a count went below 0: release() of a block whose count is already 0 must raise RuntimeError "
            "before changing anything."
        )
    if isinstance(got, int) and got < expected:
        return "share(block) means one more table points at the block: add 1 to its count."
    return "refs[block] counts the tables (and caches) pointing at the block: +1 on allocate/share, -1 on release."


def _new(allocator_class: type, num_blocks: int, scenario: str) -> object:
    return call_learner(f"BlockAllocator({num_blocks})", allocator_class, num_blocks, scenario=scenario)


def _allocate(allocator: object, refs: list[int], scenario: str) -> int:
    block = call_learner("allocate()", allocator.allocate, scenario=scenario)
    if type(block) is not int or not 0 <= block < len(refs):
        fail(
            f"{scenario}: the id allocate() returned",
            f"a block id in 0..{len(refs) - 1}",
            repr(block),
            "allocate() returns the id of the block it took from the free list.",
        )
    if refs[block] != 0:
        fail(
            f"{scenario}: allocate() returned block {block}",
            "a free block (count 0)",
            f"block {block}, which is already in use (count {refs[block]})",
            Hint(
                "allocate() must take the block off the free list, so it is never handed out twice",
                "block = self.free.popleft()",
            ),
        )
    free = _free_list(_member(allocator, "free", scenario), scenario)
    if block in free:
        fail(
            f"{scenario}: allocate() returned block {block}",
            f"block {block} taken off the free list",
            f"block {block} still on the free list {free}",
            Hint(
                "allocate() must take the block off the free list, or it will be handed out again",
                "block = self.free.popleft()",
            ),
        )
    refs[block] = 1
    return block


def _expect_error(
    allocator: object,
    method: str,
    block: int | None,
    error_type: type,
    refs: list[int],
    scenario: str,
    hint: str,
) -> None:
    """The call raises ``error_type`` and leaves the allocator exactly as it was."""
    args = () if block is None else (block,)
    call = f"{method}({'' if block is None else block})"
    expect_raise(error_type, call, getattr(allocator, method), *args, scenario=scenario, hint=hint)
    _verify(allocator, refs, f"{scenario}, after the refused {call}")


def _basic_scenarios(allocator_class: type, _rng: random.Random) -> None:
    scenario = "a fresh pool of 6 blocks"
    allocator = _new(allocator_class, 6, scenario)
    refs = [0] * 6
    _verify(
        allocator,
        refs,
        scenario,
        lost_hint=Hint(
            "a new pool starts with every block free and every count at 0",
            "free = deque(range(num_blocks)), refs = [0] * num_blocks",
        ),
    )

    handed_out = []
    for step in range(6):
        scenario = f"a pool of 6 blocks, allocation {step + 1} of 6"
        handed_out.append(_allocate(allocator, refs, scenario))
        _verify(allocator, refs, scenario)
    _expect_error(
        allocator,
        "allocate",
        None,
        MemoryError,
        refs,
        "a pool of 6 blocks with all 6 in use",
        "an empty free list means the pool is exhausted: raise MemoryError (the exception a scheduler "
        "catches to wait or preempt), and change nothing.",
    )

    scenario = "a pool of 6 blocks, all in use: release 2 blocks and allocate again"
    for block in handed_out[:2]:
        call_learner(f"release({block})", allocator.release, block, scenario=scenario)
        refs[block] -= 1
    _verify(allocator, refs, scenario)
    reused = {_allocate(allocator, refs, scenario) for _ in range(2)}
    if reused != set(handed_out[:2]):
        fail(
            scenario,
            f"the released blocks {sorted(handed_out[:2])} handed out again",
            sorted(reused),
            "released blocks go back on the free list and are the only ones allocate() can hand out.",
        )
    _verify(allocator, refs, scenario)


def _sharing_scenarios(allocator_class: type, _rng: random.Random) -> None:
    allocator = _new(allocator_class, 4, "sharing a block")
    refs = [0] * 4
    block = _allocate(allocator, refs, "sharing a block")
    other = _allocate(allocator, refs, "sharing a block")

    scenario = f"block {block} allocated, then share({block}) (a fork: two tables point at it)"
    call_learner(f"share({block})", allocator.share, block, scenario=scenario)
    refs[block] += 1
    _verify(allocator, refs, scenario)

    scenario = f"block {block} shared by two tables, then release({block}) once (one table still points at it)"
    call_learner(f"release({block})", allocator.release, block, scenario=scenario)
    refs[block] -= 1
    _verify(allocator, refs, scenario)

    scenario = f"block {block} shared by two tables, released twice (nobody points at it any more)"
    call_learner(f"release({block})", allocator.release, block, scenario=scenario)
    refs[block] -= 1
    _verify(allocator, refs, scenario)

    _expect_error(
        allocator,
        "release",
        block,
        RuntimeError,
        refs,
        f"block {block} is already free (count 0), then release({block}) again: a double free",
        "releasing a block whose count is already 0 is a bug in the caller: raise RuntimeError "
        "before changing anything (the count must stay 0, the block on the free list once).",
    )
    never_used = next(b for b in range(4) if refs[b] == 0 and b != block)
    _expect_error(
        allocator,
        "release",
        never_used,
        RuntimeError,
        refs,
        f"release({never_used}) of a block that was never allocated",
        "a block with count 0 has no table to let go of it: raise RuntimeError and change nothing.",
    )
    _expect_error(
        allocator,
        "share",
        never_used,
        RuntimeError,
        refs,
        f"share({never_used}) of a free block (count 0, on the free list)",
        "nobody points at a free block, so nobody can share it; counting it would leave a block with "
        "count 1 on the free list, which allocate() then hands to another table. Raise RuntimeError.",
    )
    call_learner(f"release({other})", allocator.release, other, scenario="releasing the last block in use")
    refs[other] -= 1
    _verify(allocator, refs, "every block released: the whole pool must be free")


def _random_walk(
    allocator_class: type,
    seed: int | random.Random,
    sizes: tuple[int, int] = (5, 12),
    steps: int = 200,
    moves: tuple[str, ...] = ("allocate", "allocate", "share", "release", "release"),
) -> None:
    """Seeded allocations, shares and releases; the counts must match exactly after every step."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    num_blocks = rng.randint(*sizes)
    allocator = _new(allocator_class, num_blocks, f"a random walk on a pool of {num_blocks} blocks")
    refs = [0] * num_blocks
    history: list[str] = []
    for _ in range(steps):
        in_use = [b for b in range(num_blocks) if refs[b] > 0]
        move = rng.choice(moves)
        if move == "allocate" and refs.count(0) == 0:
            move = "exhausted"
        if move in ("share", "release") and not in_use:
            move = "allocate"
        scenario = f"a random walk on a pool of {num_blocks} blocks, after: {', '.join(history[-6:])}"
        if move == "allocate":
            block = _allocate(allocator, refs, scenario)
            history.append(f"allocate() -> {block}")
        elif move == "exhausted":
            history.append("allocate() on an exhausted pool")
            _expect_error(
                allocator,
                "allocate",
                None,
                MemoryError,
                refs,
                scenario,
                "every block is in use: raise MemoryError and change nothing.",
            )
            continue
        else:
            block = rng.choice(in_use)
            history.append(f"{move}({block})")
            call_learner(f"{move}({block})", getattr(allocator, move), block, scenario=scenario)
            refs[block] += 1 if move == "share" else -1
        _verify(
            allocator,
            refs,
            f"a random walk on a pool of {num_blocks} blocks, after: {', '.join(history[-6:])}",
        )


# --------------------------------------------------------------------------- hidden scenarios


def _hidden_pool_of_one(allocator_class: type, rng: random.Random) -> None:
    scenario = "a hidden scenario"
    allocator = _new(allocator_class, 1, scenario)
    refs = [0]
    # four rounds, whatever the seed: shared once, five times, and twice drawn in between
    rounds = [1, 5, rng.randint(2, 4), rng.randint(2, 4)]
    rng.shuffle(rounds)
    for shares in rounds:
        block = _allocate(allocator, refs, scenario)
        _verify(allocator, refs, scenario)
        _expect_error(
            allocator, "allocate", None, MemoryError, refs, scenario, "every block is in use: raise MemoryError."
        )
        for _ in range(shares):
            call_learner(f"share({block})", allocator.share, block, scenario=scenario)
            refs[block] += 1
            _verify(allocator, refs, scenario)
        for _ in range(shares + 1):
            call_learner(f"release({block})", allocator.release, block, scenario=scenario)
            refs[block] -= 1
            _verify(allocator, refs, scenario)
        _expect_error(
            allocator, "release", block, RuntimeError, refs, scenario, "a double free must raise RuntimeError."
        )


def _hidden_shared_many_times(allocator_class: type, rng: random.Random) -> None:
    scenario = "a hidden scenario"
    num_blocks = rng.randint(3, 9)
    allocator = _new(allocator_class, num_blocks, scenario)
    refs = [0] * num_blocks
    blocks = [_allocate(allocator, refs, scenario) for _ in range(num_blocks)]
    hot = rng.choice(blocks)
    for _ in range(40):
        call_learner(f"share({hot})", allocator.share, hot, scenario=scenario)
        refs[hot] += 1
    _verify(allocator, refs, scenario)
    for block in rng.sample(blocks, len(blocks)):
        while refs[block]:
            call_learner(f"release({block})", allocator.release, block, scenario=scenario)
            refs[block] -= 1
            _verify(allocator, refs, scenario)
    reused = [_allocate(allocator, refs, scenario) for _ in range(num_blocks)]
    if sorted(reused) != list(range(num_blocks)):
        fail(scenario, "every block handed out again", sorted(reused), "released blocks go back on the free list.")


# Three long walks, every draw: one that fills the pool (and is refused), one that shares a lot,
# one that releases a lot. The seed picks the pool's size and the moves, never the mix.
_LARGE_WALK_MIXES = (
    ("allocate", "allocate", "allocate", "share", "release"),
    ("share", "share", "share", "allocate", "release"),
    ("release", "release", "allocate", "allocate", "share"),
)


def _hidden_large_walk(allocator_class: type, rng: random.Random) -> None:
    for moves in rng.sample(_LARGE_WALK_MIXES, len(_LARGE_WALK_MIXES)):
        _random_walk(allocator_class, rng, sizes=(20, 64), steps=300, moves=moves)


def _hidden_refusals_between_moves(allocator_class: type, rng: random.Random) -> None:
    scenario = "a hidden scenario"
    num_blocks = rng.randint(4, 10)
    allocator = _new(allocator_class, num_blocks, scenario)
    refs = [0] * num_blocks
    for _ in range(60):
        free = [b for b in range(num_blocks) if refs[b] == 0]
        in_use = [b for b in range(num_blocks) if refs[b] > 0]
        if free and rng.random() < 0.5:
            block = rng.choice(free)
            method = rng.choice(["share", "release"])
            _expect_error(
                allocator,
                method,
                block,
                RuntimeError,
                refs,
                scenario,
                "a free block can be neither shared nor released: raise RuntimeError and change nothing.",
            )
        if free and (not in_use or rng.random() < 0.5):
            _allocate(allocator, refs, scenario)
        elif in_use:
            block = rng.choice(in_use)
            call_learner(f"release({block})", allocator.release, block, scenario=scenario)
            refs[block] -= 1
        _verify(allocator, refs, scenario)


def _hidden_walk(allocator_class: type, rng: random.Random) -> None:
    _random_walk(allocator_class, rng.getrandbits(31))


HIDDEN_KINDS = {
    "a random walk drawn from the grader's seed": _hidden_walk,
    "a pool of a single block, shared and released several times": _hidden_pool_of_one,
    "one block shared by many tables, released in a random order": _hidden_shared_many_times,
    "long random walks on a large pool: filling it, sharing a lot, releasing a lot": _hidden_large_walk,
    "refused share/release of free blocks between allocations": _hidden_refusals_between_moves,
}


STORY = Story(visible=(_basic_scenarios, _sharing_scenarios, _random_walk), hidden=HIDDEN_KINDS)


@check(notebook="02_block_allocator", builds="BlockAllocator")
def check_block_allocator(BlockAllocator: type, *, seed: int = 0, hidden: bool = False) -> str | None:  # noqa: N803
    """Exact reference counts and free list through allocation, sharing, release and exhaustion.

    ``hidden=True`` (the hidden tests, after the visible call) runs every one of ``HIDDEN_KINDS`` (a random
    walk among them) with sizes and moves drawn from ``seed``, and names none of their numbers.
    """
    return STORY.tell(BlockAllocator, seed=seed, hidden=hidden)

