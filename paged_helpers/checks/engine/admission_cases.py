"""The admission stage's cases behind the front door: ``_admit`` on a queue, on an idle engine, at the spare.

  Queue   a queue behind a prompt left in the prefix cache: admission in order, eviction to make room,
          the first request that does not fit left waiting (and its attach undone)
  Idle    an idle engine admitting a request of the whole pool (no room left for the spare)
  Spare   two prompts that together fill the pool but leave less than its 1% spare: only the first

The watched ``_admit`` applies the rules (``rules.expect_admission``); each case then compares who was
admitted with what its blocks allow. ``Queue.decisions`` works the answer out from the blocks alone.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from ..reading.calls import call_learner
from ..reading.ledger import ceil_div
from ..speaking.failure import fail
from ..speaking.hidden import redraw_until
from . import engine_reads
from .front_door import expect_accepted
from .hand_built import BLOCK_SIZE, engine_for, leave_in_prefix_cache, token_range

QUEUE_MAX_NEW = 3  # max_new_tokens of every request in a Queue (admission counts known tokens only)
QUEUE_REQUESTS = 5  # requests in every hidden Queue (fixed, not drawn: the most a queue ever held)


@dataclass(frozen=True)
class Queue:
    """_admit on a queue behind a prompt of ``cached_blocks`` blocks left in the prefix cache.

    ``requests``: (request_id, shares, new tokens). A request that shares opens with the cached
    prompt's first ``shared_blocks`` blocks (the first request always does, so those blocks stay in
    use from its admission on); the others are new tokens only. Nothing is allocated by admission, so
    for any correct engine the blocks it can still make free are the free ones plus the cached blocks
    nobody uses: ``num_blocks - shared_blocks`` from the first admission on, however much it evicted.
    """

    num_blocks: int
    cached_blocks: int
    shared_blocks: int
    requests: tuple[tuple[str, bool, int], ...]

    @classmethod
    def draw(cls, rng: random.Random) -> Queue:
        """A queue of ``QUEUE_REQUESTS`` requests whose answer is the same whether the spare 1% is rounded
        down or up, in which some admission needs eviction and some request is left waiting (every 31-bit
        seed finds one, in a few dozen draws on average)."""
        return redraw_until(functools.partial(cls._draw, rng), cls.telling)

    @classmethod
    def _draw(cls, rng: random.Random) -> Queue:
        cached = rng.randint(2, 5)
        shared = rng.randint(1, cached - 1)
        kinds = [True] + [rng.random() < 0.5 for _ in range(QUEUE_REQUESTS - 1)]
        requests = tuple((f"r{i}", shares, rng.randint(1, 6 * BLOCK_SIZE)) for i, shares in enumerate(kinds))
        return cls(rng.randint(8, 40), cached, shared, requests)

    def telling(self) -> bool:
        """One answer whichever way the spare is rounded, the classic mistakes answering otherwise
        (``interesting``), and every request accepted by add_request."""
        return len({self.expected(spare) for spare in (0, 1)}) == 1 and self.interesting() and self.each_fits()

    def each_fits(self) -> bool:
        """add_request accepts every request: each fits the pool alone."""
        return all(
            ceil_div(len(self.prompt(shares, new, 0)) + QUEUE_MAX_NEW, BLOCK_SIZE) <= self.num_blocks
            for _, shares, new in self.requests
        )

    def prompt(self, shares: bool, new: int, start: int) -> list[int]:
        opening = token_range(100, self.shared_blocks * BLOCK_SIZE) if shares else []
        return opening + token_range(start, new)

    def decisions(self, spare: int) -> list[tuple[str, int, int, int]]:
        """(request_id, blocks it needs, blocks promised to running prefills, blocks free) of each
        admission tried, until the first that does not fit; the first is forced (an idle engine)."""
        room = self.num_blocks - self.shared_blocks  # free + cached blocks nobody uses
        promised, tried = 0, []
        for request_id, shares, new in self.requests:
            hits = self.shared_blocks if shares else 0
            length = hits * BLOCK_SIZE + new
            own = ceil_div(length, BLOCK_SIZE) - hits
            tried.append((request_id, own, promised, self.num_blocks - self.cached_blocks))
            if tried[1:] and promised + own + spare > room:
                break
            promised += own if length - hits * BLOCK_SIZE > 1 else 0  # prefilling: more than one pending
        return tried

    def expected(self, spare: int) -> tuple[str, ...]:
        tried = self.decisions(spare)
        room = self.num_blocks - self.shared_blocks
        last = tried[-1]
        fits = len(tried) == 1 or last[2] + last[1] + spare <= room
        return tuple(request_id for request_id, *_ in (tried if fits else tried[:-1]))

    def interesting(self) -> bool:
        """A queue on which the classic mistakes answer differently: some admission is possible only by
        evicting cached blocks; the first request left waiting reuses cached blocks (so counting its hits
        before the room check shows); and without the running prefills' blocks it would be admitted."""
        tried, admitted = self.decisions(0), self.expected(0)
        free, room = self.num_blocks - self.cached_blocks, self.num_blocks - self.shared_blocks
        evicts = any(promised + own > free for _, own, promised, _ in tried[1 : len(admitted)])
        if not (1 < len(admitted) < len(self.requests)) or not evicts:
            return False
        refused, own, promised, _ = tried[len(admitted)]
        shares = {request_id: shares for request_id, shares, _ in self.requests}[refused]
        return shares and promised > 0 and own + 1 <= room

    def run(self, classes) -> None:
        opening = f"the first {self.shared_blocks * BLOCK_SIZE} cached tokens + "
        shown = ", ".join(
            f"{request_id!r} ({opening if shares else ''}{new} new)" for request_id, shares, new in self.requests
        )
        scenario = (
            f"admission in a pool of {self.num_blocks} blocks of {BLOCK_SIZE}: a "
            f"{self.cached_blocks * BLOCK_SIZE}-token prompt left in the prefix cache; waiting: {shown}"
        )
        engine, cache, prefix = engine_for(*classes, self.num_blocks, scenario)
        leave_in_prefix_cache(cache, prefix, "earlier", token_range(100, self.cached_blocks * BLOCK_SIZE))
        for number, (request_id, shares, new) in enumerate(self.requests):
            prompt = self.prompt(shares, new, 200 + 100 * number)
            expect_accepted(engine, scenario, request_id, prompt, QUEUE_MAX_NEW)
        call_learner("_admit()", engine._admit, scenario=scenario)  # the watched _admit applies the rules
        admitted = engine_reads.names(engine_reads.queue(engine, "running", scenario), scenario)
        expected = list(self.expected(0))
        if admitted != expected:
            reasons = [f"{request_id!r} needs {own} more block(s)" for request_id, own, _, _ in self.decisions(0)]
            fail(
                f"{scenario}: admit while there is room",
                f"{expected} admitted ({'; '.join(reasons)}): {self.num_blocks - self.shared_blocks} block(s) "
                "can be made free once the cached blocks nobody uses are evicted, with the spare kept (1% of "
                f"{self.num_blocks} blocks: 0 rounded down, 1 rounded up, either gives this answer)",
                admitted,
                "admit from the front while the free blocks, after _make_room evicts from the prefix cache, "
                "cover what the running prefills and this sequence still need plus the spare 1% of the pool; "
                "stop at the first that does not fit",
            )


@dataclass(frozen=True)
class Idle:
    """An idle engine with a prompt cached, and one request of exactly the whole pool."""

    num_blocks: int
    cached_blocks: int
    max_new: int  # the prompt is the rest of the pool's tokens

    @classmethod
    def draw(cls, rng: random.Random) -> Idle:
        # At least 100 blocks: a spare of 1% is then at least one block, so only the rule "admit when
        # idle" admits a request of the whole pool (an idle engine has every block free or evictable).
        # The prompt alone needs more than the pool less its spare (the room rule counts known tokens).
        num_blocks = rng.randint(100, 400)
        blocks = num_blocks - rng.randint(0, num_blocks // 100 - 1)
        prompt = blocks * BLOCK_SIZE - rng.randint(1 if blocks == num_blocks else 0, BLOCK_SIZE - 1)
        return cls(num_blocks, rng.randint(1, 6), num_blocks * BLOCK_SIZE - prompt)

    def run(self, classes) -> None:
        capacity = self.num_blocks * BLOCK_SIZE
        scenario = (
            f"an idle engine, a pool of {self.num_blocks} blocks, {self.cached_blocks} of them holding a cached "
            f"prompt; waiting: one request of exactly {capacity} tokens (the whole pool, no room left for a 1% spare)"
        )
        engine, cache, prefix = engine_for(*classes, self.num_blocks, scenario)
        leave_in_prefix_cache(cache, prefix, "earlier", token_range(1000, self.cached_blocks * BLOCK_SIZE))
        expect_accepted(engine, scenario, "alone", token_range(3000, capacity - self.max_new), self.max_new)
        call_learner("_admit()", engine._admit, scenario=scenario)


@dataclass(frozen=True)
class Spare:
    """An idle engine of at least 100 blocks and two prompts that together fill the pool but leave
    less than its 1% spare: only the first is admitted."""

    num_blocks: int
    first: int  # prompt tokens
    second: int

    @classmethod
    def draw(cls, rng: random.Random) -> Spare:
        num_blocks = rng.randint(100, 400)
        spare = num_blocks // 100
        first = rng.randint(num_blocks // 4, 3 * num_blocks // 4)
        second = num_blocks - first - rng.randint(0, spare - 1)
        return cls(num_blocks, *(blocks * BLOCK_SIZE - rng.randint(0, BLOCK_SIZE - 1) for blocks in (first, second)))

    def run(self, classes) -> None:
        blocks = [ceil_div(tokens, BLOCK_SIZE) for tokens in (self.first, self.second)]
        spare = self.num_blocks // 100
        scenario = (
            f"an idle engine, a pool of {self.num_blocks} blocks of {BLOCK_SIZE}; waiting: 'a' ({self.first} "
            f"tokens, {blocks[0]} blocks) and 'b' ({self.second} tokens, {blocks[1]} blocks)"
        )
        engine, _, _ = engine_for(*classes, self.num_blocks, scenario)
        expect_accepted(engine, scenario, "a", token_range(1, self.first), 4)
        expect_accepted(engine, scenario, "b", token_range(5000, self.second), 4)
        call_learner("_admit()", engine._admit, scenario=scenario)  # the watched _admit applies the rules
        admitted = engine_reads.names(engine_reads.queue(engine, "running", scenario), scenario)
        if admitted != ["a"]:
            fail(
                f"{scenario}: admit only with room",
                f"['a'] admitted: 'a' and 'b' need {sum(blocks)} blocks together, and {spare} block(s) (1% of the "
                "pool) stay spare",
                admitted,
                "count the running prefills' blocks, this sequence's, and the spare 1% of the pool",
            )
