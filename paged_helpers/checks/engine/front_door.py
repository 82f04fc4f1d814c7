"""The admission stage's front door: ``add_request`` alone, accepting and refusing.

``expect_refused`` and ``expect_accepted`` hold one call of the learner's ``add_request`` to the
notebook's rule (refuse only what can never fit, even alone in an empty pool; queue one Sequence, sample 0
of the request). Every admission case queues its requests through ``expect_accepted``; ``FrontDoor``
is the case of the front door alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ...serving import Sequence, sample_seed
from ..reading.calls import call_learner
from ..reading.learner_code import class_name
from ..speaking.failure import CheckFailed, fail
from . import engine_reads
from .hand_built import BLOCK_SIZE, SETTING_UP, engine_for, token_range
from .watch import Refused

# ---------------------------------------------------------------- admission and rejection


def _add_request(engine, scenario: str, *args) -> Refused | None:
    """Call the learner's add_request; returns its ValueError (a refusal) or None if it accepted."""
    try:
        call_learner("add_request", engine.add_request, *args, scenario=scenario)
    except CheckFailed as error:
        if isinstance(error.__cause__, Refused):
            return error.__cause__
        raise
    return None


def expect_refused(engine, scenario: str, request_id: str, prompt: list[int], max_new: int) -> None:
    waiting = engine_reads.queue(engine, "waiting", scenario)
    if _add_request(engine, scenario, request_id, prompt, max_new) is None:
        pool = len(engine_reads.pool_refs(engine.cache, scenario))
        fail(
            f"{scenario}: add_request({request_id!r}) of {len(prompt)} + {max_new} tokens in a pool of {pool} blocks",
            "ValueError at once: the request can never fit, even alone in an empty pool",
            "the request was accepted (serving it would preempt everyone else forever)",
            "compare cache.blocks_needed(len(prompt) + max_new_tokens) with the pool's size, before queueing",
        )
    now = engine_reads.queue(engine, "waiting", scenario)
    if not engine_reads.same(now, waiting):
        fail(
            f"{scenario}: after refusing {request_id!r}",
            f"waiting unchanged: {engine_reads.names(waiting)}",
            f"waiting {[getattr(seq, 'seq_id', seq) for seq in now]}",
            "validate before appending to the queue: a refused request leaves no trace",
        )


def expect_accepted(engine, scenario: str, request_id: str, prompt, max_new, n=1, seed=0, temperature=0.0):
    free = engine_reads.num_free(engine.cache, scenario)
    error = _add_request(engine, scenario, request_id, prompt, max_new, n, seed, temperature)
    if error is not None:
        fail(
            f"{scenario}: refuse only requests that can never fit: add_request({request_id!r}) of "
            f"{len(prompt) + max_new} tokens, {free} block(s) free",
            f"accepted: it needs {engine.cache.blocks_needed(len(prompt) + max_new)} blocks and the pool has "
            f"{len(engine_reads.pool_refs(engine.cache, scenario))}",
            f"ValueError: {error}",
            "compare with the whole pool (len(cache.allocator.refs)), not with the free blocks of the moment: "
            "room is made later, by waiting, eviction and preemption",
        )
    waiting = engine_reads.queue(engine, "waiting", scenario)
    seq = waiting[-1] if waiting else None
    expected = dict(
        seq_id=request_id,
        request_id=request_id,
        prompt=list(prompt),
        max_new_tokens=max_new,
        n=n,
        sample_index=0,
        seed=sample_seed(seed, 0),
        temperature=temperature,
        output=[],
        num_cached=0,
        forked=False,
    )
    # By name, not isinstance: while grading, the checks run from a fresh copy of paged_helpers, so
    # the learner's Sequence (imported before) is an equal class, but not the same object.
    # The name as the type holds it (type's own descriptor: a metaclass of the learner's cannot answer).
    name = class_name(seq)
    if type(name) is str and name == Sequence.__name__:
        got = engine_reads.fields(seq, expected, scenario)
    else:  # never compared: an object of the learner's could say it equals the expected fields
        got = None if seq is None else f"an object of type {name}"
    if got != expected:
        fail(
            f"{scenario}: the sequence add_request queued for {request_id!r} (n={n}, seed={seed})",
            f"Sequence at the back of `waiting` with {expected}",
            got,
            "queue one Sequence(request_id, request_id, list(prompt), max_new_tokens, n=n, "
            "seed=sample_seed(seed, 0), temperature=temperature): sample 0 of the request; the other "
            "samples are forked from it later",
        )


@dataclass(frozen=True)
class FrontDoor:
    """add_request alone: a request one block too many for the pool, one of exactly the pool, and one
    that fits the pool but not the blocks free while ``busy_blocks`` are in use. The last is queued with
    ``n``, ``seed`` and ``temperature`` other than the defaults (drawn: n of 2 to 5, temperature 0.5 or 1),
    so a Sequence built without one of them shows in every draw."""

    num_blocks: int
    too_long: tuple[int, int]  # (prompt tokens, max_new_tokens)
    exact: tuple[int, int]
    busy_blocks: int
    later: tuple[int, int]
    n: int
    seed: int
    temperature: float

    @classmethod
    def draw(cls, rng: random.Random) -> FrontDoor:
        num_blocks = rng.randint(4, 40)
        capacity = num_blocks * BLOCK_SIZE
        busy = rng.randint(1, num_blocks - 1)
        later = rng.randint(num_blocks - busy + 1, num_blocks) * BLOCK_SIZE - rng.randint(0, BLOCK_SIZE - 1)
        return cls(
            num_blocks,
            _split(rng, capacity + rng.randint(1, 2 * BLOCK_SIZE)),
            _split(rng, capacity - rng.randint(0, BLOCK_SIZE - 1)),
            busy,
            _split(rng, later),
            rng.randint(2, 5),
            rng.getrandbits(31) | 1,  # never 0, Sequence's default
            rng.choice((0.5, 1.0)),
        )

    def run(self, classes) -> None:
        capacity = self.num_blocks * BLOCK_SIZE
        scenario = f"the front door, a pool of {self.num_blocks} blocks of {BLOCK_SIZE} ({capacity} tokens)"
        engine, cache, _ = engine_for(*classes, self.num_blocks, scenario)
        expect_refused(engine, scenario, "too_long", token_range(1, self.too_long[0]), self.too_long[1])
        expect_accepted(engine, scenario, "exactly_the_pool", token_range(1, self.exact[0]), self.exact[1], seed=3)
        # another request holds most of the pool now
        call_learner("cache.create('busy')", cache.create, "busy", scenario=SETTING_UP)
        busy_tokens = self.busy_blocks * BLOCK_SIZE
        call_learner(f"cache.reserve('busy', {busy_tokens})", cache.reserve, "busy", busy_tokens, scenario=SETTING_UP)
        expect_accepted(
            engine,
            f"{scenario}, {self.busy_blocks} blocks in use",
            "fits_later",
            token_range(50, self.later[0]),
            self.later[1],
            n=self.n,
            seed=self.seed,
            temperature=self.temperature,
        )


def _split(rng: random.Random, total: int) -> tuple[int, int]:
    """``total`` tokens as (prompt, max_new_tokens), both at least 1."""
    max_new = rng.randint(1, min(total - 1, 3 * BLOCK_SIZE))
    return total - max_new, max_new
