"""Notebook 02's scenarios: the visible steps, the hidden kinds, and the random walk they share.

The visible call runs ``_basic_scenarios``, ``_sharing_scenarios`` and one ``random_walk`` on one
``random.Random(seed)`` (``STORY``); a hidden call runs every one of ``HIDDEN_KINDS`` in full, the
grader's seed picking sizes and moves, never which kinds run. Each scenario keeps its own ``refs``,
the count every block must have, and ``verify`` holds the learner's allocator against it after each
step (``exact_counts``).
"""

from __future__ import annotations

import random

from ..reading.calls import call_learner
from ..speaking.failure import fail
from ..story import Story
from .diagnosis import FRESH_POOL
from .exact_counts import allocate, expect_error, new, verify

__all__ = ["HIDDEN_KINDS", "STORY", "random_walk"]


def _basic_scenarios(allocator_class: type, _rng: random.Random) -> None:
    scenario = "a fresh pool of 6 blocks"
    allocator = new(allocator_class, 6, scenario)
    refs = [0] * 6
    verify(allocator, refs, scenario, lost_hint=FRESH_POOL)

    handed_out = []
    for step in range(6):
        scenario = f"a pool of 6 blocks, allocation {step + 1} of 6"
        handed_out.append(allocate(allocator, refs, scenario))
        verify(allocator, refs, scenario)
    expect_error(
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
    verify(allocator, refs, scenario)
    reused = {allocate(allocator, refs, scenario) for _ in range(2)}
    if reused != set(handed_out[:2]):
        fail(
            scenario,
            f"the released blocks {sorted(handed_out[:2])} handed out again",
            sorted(reused),
            "released blocks go back on the free list and are the only ones allocate() can hand out.",
        )
    verify(allocator, refs, scenario)


def _sharing_scenarios(allocator_class: type, _rng: random.Random) -> None:
    allocator = new(allocator_class, 4, "sharing a block")
    refs = [0] * 4
    block = allocate(allocator, refs, "sharing a block")
    other = allocate(allocator, refs, "sharing a block")

    scenario = f"block {block} allocated, then share({block}) (a fork: two tables point at it)"
    call_learner(f"share({block})", allocator.share, block, scenario=scenario)
    refs[block] += 1
    verify(allocator, refs, scenario)

    scenario = f"block {block} shared by two tables, then release({block}) once (one table still points at it)"
    call_learner(f"release({block})", allocator.release, block, scenario=scenario)
    refs[block] -= 1
    verify(allocator, refs, scenario)

    scenario = f"block {block} shared by two tables, released twice (nobody points at it any more)"
    call_learner(f"release({block})", allocator.release, block, scenario=scenario)
    refs[block] -= 1
    verify(allocator, refs, scenario)

    expect_error(
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
    expect_error(
        allocator,
        "release",
        never_used,
        RuntimeError,
        refs,
        f"release({never_used}) of a block that was never allocated",
        "a block with count 0 has no table to let go of it: raise RuntimeError and change nothing.",
    )
    expect_error(
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
    verify(allocator, refs, "every block released: the whole pool must be free")


def random_walk(
    allocator_class: type,
    seed: int | random.Random,
    sizes: tuple[int, int] = (5, 12),
    steps: int = 200,
    moves: tuple[str, ...] = ("allocate", "allocate", "share", "release", "release"),
) -> None:
    """Seeded allocations, shares and releases; the counts must match exactly after every step."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    num_blocks = rng.randint(*sizes)
    allocator = new(allocator_class, num_blocks, f"a random walk on a pool of {num_blocks} blocks")
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
            block = allocate(allocator, refs, scenario)
            history.append(f"allocate() -> {block}")
        elif move == "exhausted":
            history.append("allocate() on an exhausted pool")
            expect_error(
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
        verify(
            allocator,
            refs,
            f"a random walk on a pool of {num_blocks} blocks, after: {', '.join(history[-6:])}",
        )


# --------------------------------------------------------------------------- hidden scenarios


def _hidden_pool_of_one(allocator_class: type, rng: random.Random) -> None:
    scenario = "a hidden scenario"
    allocator = new(allocator_class, 1, scenario)
    refs = [0]
    # four rounds, whatever the seed: shared once, five times, and twice drawn in between
    rounds = [1, 5, rng.randint(2, 4), rng.randint(2, 4)]
    rng.shuffle(rounds)
    for shares in rounds:
        block = allocate(allocator, refs, scenario)
        verify(allocator, refs, scenario)
        expect_error(
            allocator, "allocate", None, MemoryError, refs, scenario, "every block is in use: raise MemoryError."
        )
        for _ in range(shares):
            call_learner(f"share({block})", allocator.share, block, scenario=scenario)
            refs[block] += 1
            verify(allocator, refs, scenario)
        for _ in range(shares + 1):
            call_learner(f"release({block})", allocator.release, block, scenario=scenario)
            refs[block] -= 1
            verify(allocator, refs, scenario)
        expect_error(
            allocator, "release", block, RuntimeError, refs, scenario, "a double free must raise RuntimeError."
        )


def _hidden_shared_many_times(allocator_class: type, rng: random.Random) -> None:
    scenario = "a hidden scenario"
    num_blocks = rng.randint(3, 9)
    allocator = new(allocator_class, num_blocks, scenario)
    refs = [0] * num_blocks
    blocks = [allocate(allocator, refs, scenario) for _ in range(num_blocks)]
    hot = rng.choice(blocks)
    for _ in range(40):
        call_learner(f"share({hot})", allocator.share, hot, scenario=scenario)
        refs[hot] += 1
    verify(allocator, refs, scenario)
    for block in rng.sample(blocks, len(blocks)):
        while refs[block]:
            call_learner(f"release({block})", allocator.release, block, scenario=scenario)
            refs[block] -= 1
            verify(allocator, refs, scenario)
    reused = [allocate(allocator, refs, scenario) for _ in range(num_blocks)]
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
        random_walk(allocator_class, rng, sizes=(20, 64), steps=300, moves=moves)


def _hidden_refusals_between_moves(allocator_class: type, rng: random.Random) -> None:
    scenario = "a hidden scenario"
    num_blocks = rng.randint(4, 10)
    allocator = new(allocator_class, num_blocks, scenario)
    refs = [0] * num_blocks
    for _ in range(60):
        free = [b for b in range(num_blocks) if refs[b] == 0]
        in_use = [b for b in range(num_blocks) if refs[b] > 0]
        if free and rng.random() < 0.5:
            block = rng.choice(free)
            method = rng.choice(["share", "release"])
            expect_error(
                allocator,
                method,
                block,
                RuntimeError,
                refs,
                scenario,
                "a free block can be neither shared nor released: raise RuntimeError and change nothing.",
            )
        if free and (not in_use or rng.random() < 0.5):
            allocate(allocator, refs, scenario)
        elif in_use:
            block = rng.choice(in_use)
            call_learner(f"release({block})", allocator.release, block, scenario=scenario)
            refs[block] -= 1
        verify(allocator, refs, scenario)


def _hidden_walk(allocator_class: type, rng: random.Random) -> None:
    random_walk(allocator_class, rng.getrandbits(31))


HIDDEN_KINDS = {
    "a random walk drawn from the grader's seed": _hidden_walk,
    "a pool of a single block, shared and released several times": _hidden_pool_of_one,
    "one block shared by many tables, released in a random order": _hidden_shared_many_times,
    "long random walks on a large pool: filling it, sharing a lot, releasing a lot": _hidden_large_walk,
    "refused share/release of free blocks between allocations": _hidden_refusals_between_moves,
}


STORY = Story(visible=(_basic_scenarios, _sharing_scenarios, random_walk), hidden=HIDDEN_KINDS)
