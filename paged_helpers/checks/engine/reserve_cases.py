"""The reserve stage's case: ``_reserve`` (and the ``_preempt`` it calls) on sequences placed in a pool.

``Pool.victims`` works out from the blocks alone whom a correct ``_reserve`` preempts: it evicts
the cached blocks nobody uses before it preempts, and then the newest running sequence, until the
chunk fits. The watched ``_reserve`` applies the rules as it runs (``Reservation``);
``_reserve_case`` then checks what it returned, the blocks of every kept chunk and the metrics.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace

from ...serving import Sequence
from ..reading.calls import call_learner
from ..reading.learner_code import transfer
from ..reading.ledger import ceil_div
from ..reading.strict import learner_int
from ..speaking.failure import fail
from ..speaking.hidden import redraw_until
from . import engine_reads
from .hand_built import BLOCK_SIZE, decoding, engine_for, leave_in_prefix_cache, place, prefilling, token_range

POOL_SEQUENCES = 4  # sequences running in every hidden pool (fixed, not drawn: the most a pool ever held)


@dataclass(frozen=True)
class Pool:
    """_reserve on sequences placed in a pool of ``num_blocks``: (seq_id, kind, prompt, extra, count)
    each, oldest first, planned in that order ("decode": ``extra`` output tokens, all but the last
    cached, one token planned; "prefill": ``extra`` prompt tokens cached, ``count`` planned), a prompt of
    ``cached_blocks`` blocks nobody uses left in the prefix cache, and maybe a sequence waiting.

    The preemptions it must make follow from the blocks alone (``victims``): a correct engine
    preempts only once nothing is left to evict, so how much it evicted at each MemoryError does not
    change them.
    """

    description: str
    num_blocks: int
    cached_blocks: int
    placed: tuple[tuple[str, str, int, int, int], ...]
    waiting: bool

    @classmethod
    def draw(cls, rng: random.Random, want: str = "") -> Pool:
        """A pool drawn with its ``POOL_SEQUENCES`` sequences, whose plan needs at least one new block;
        ``want``: "room" (every chunk fits), "evict" (eviction is enough), "preempt" (someone preempted),
        or "" (anything)."""
        pool = redraw_until(
            functools.partial(cls._draw, rng),
            lambda pool: pool.needs_a_block() and (not want or pool.outcome() == want),
        )
        # Someone waits behind a preemption: the victim must go in front of it.
        return replace(pool, waiting=True) if want == "preempt" else pool

    def needs_a_block(self) -> bool:
        return sum(self.demand(entry) for entry in self.placed) > 0

    def outcome(self) -> str:
        """What the plan makes the engine do: preempt someone, evict (enough), or nothing (room)."""
        short = sum(self.demand(entry) for entry in self.placed) > self.num_blocks - self.used()
        return "preempt" if self.victims() else "evict" if short else "room"

    def used(self) -> int:
        return sum(ceil_div(self.computed(entry), BLOCK_SIZE) for entry in self.placed) + self.cached_blocks

    @classmethod
    def _draw(cls, rng: random.Random) -> Pool:
        placed = []
        for index in range(POOL_SEQUENCES):
            if rng.random() < 0.6:
                position = BLOCK_SIZE * rng.randint(1, 6) if rng.random() < 0.7 else rng.randint(1, 24)
                output = rng.randint(1, min(5, position))
                placed.append((f"s{index}", "decode", position + 1 - output, output, 1))
            else:
                prompt = rng.randint(2, 30)
                cached = rng.randint(0, prompt - 2)
                placed.append((f"s{index}", "prefill", prompt, cached, rng.randint(2, prompt - cached)))
        cached_blocks = rng.choice((0, 0, rng.randint(1, 4)))
        pool = cls("", 0, cached_blocks, tuple(placed), rng.random() < 0.5)
        held = sum(ceil_div(pool.computed(entry), BLOCK_SIZE) for entry in placed) + cached_blocks
        demand = sum(pool.demand(entry) for entry in placed)
        oldest = ceil_div(pool.computed(placed[0]) + placed[0][4], BLOCK_SIZE)
        least = max(held, oldest, 1)  # the oldest alone always fits: it is never the victim of another
        # Mostly pools that run short (preemption, or eviction when a prompt is cached), some with room.
        return replace(pool, num_blocks=least + rng.choice((0, 0, 1, rng.randint(0, demand + 1))))

    @staticmethod
    def computed(entry) -> int:
        _, kind, prompt, extra, _ = entry
        return prompt + extra - 1 if kind == "decode" else extra

    def demand(self, entry) -> int:
        computed = self.computed(entry)
        return ceil_div(computed + entry[4], BLOCK_SIZE) - ceil_div(computed, BLOCK_SIZE)

    def victims(self) -> list[str]:
        """The sequences a correct _reserve preempts, in running order."""
        blocks = {entry[0]: ceil_div(self.computed(entry), BLOCK_SIZE) for entry in self.placed}
        used = self.used()
        free, evictable, live, victims = self.num_blocks - used, self.cached_blocks, list(blocks), []
        for entry in self.placed:
            sid, need = entry[0], self.demand(entry)
            while sid in live and need > free:
                if evictable:
                    taken = min(evictable, need - free)
                    free, evictable = free + taken, evictable - taken
                    continue
                victim = live.pop()
                free += blocks[victim]
                victims.append(victim)
            if sid in live:
                free -= need
                blocks[sid] += need
        return [sid for sid in blocks if sid in victims]

    def sequences(self) -> list[tuple[Sequence, int, int]]:
        made = []
        for index, (sid, kind, prompt, extra, count) in enumerate(self.placed):
            start = 1 + 64 * index
            seq = (
                decoding(sid, prompt, extra, start=start)
                if kind == "decode"
                else prefilling(sid, prompt, cached=extra, start=start)
            )
            made.append((seq, self.computed((sid, kind, prompt, extra, count)), count))
        return made

    def run(self, classes) -> None:
        shown = ", ".join(
            f"{sid!r} "
            + (
                f"decoding at position {prompt + extra - 1}"
                if kind == "decode"
                else f"prefilling {count} of its {prompt} tokens from position {extra}"
            )
            for sid, kind, prompt, extra, count in self.placed
        )
        cached = f", {self.cached_blocks} of them holding a cached prompt nobody uses" if self.cached_blocks else ""
        scenario = self.description or (
            f"{self.num_blocks} blocks{cached}; running (oldest first): {shown}"
            + ("; 'w' waits" if self.waiting else "")
        )
        expected = self.victims()
        victims = _reserve_case(
            classes,
            scenario,
            self.num_blocks,
            token_range(3000, self.cached_blocks * BLOCK_SIZE) if self.cached_blocks else None,
            self.sequences(),
            [prefilling("w", 5, start=4000)] if self.waiting else [],
        )
        if victims != expected:
            fail(
                f"{scenario}: preemptions",
                f"preempted {expected}" + ("" if expected else " (none: reserve, evicting if needed, is enough)"),
                f"preempted {victims}",
                "preempt only when reserve raises MemoryError and the prefix cache has nothing left to evict, "
                "and then the newest running sequence, until the chunk fits",
            )


def _reserve_case(classes, scenario, num_blocks, cached_prompt, placed, waiting) -> list:
    """Run the learner's _reserve on ``placed`` [(seq, computed, count)]; returns the names preempted."""
    engine, cache, prefix = engine_for(*classes, num_blocks, scenario)
    if cached_prompt:
        leave_in_prefix_cache(cache, prefix, "earlier", cached_prompt)
    plan = [(place(engine, seq, computed), count) for seq, computed, count in placed]
    engine.waiting.extend(transfer(engine, seq) for seq in waiting)
    running = engine_reads.queue(engine, "running", scenario)
    kept = call_learner("_reserve(plan)", engine._reserve, plan, scenario=scenario)  # watched: applies the rules
    for seq, count in engine_reads.plan_of(kept, "what _reserve returned", scenario):
        sid = engine_reads.seq_id(seq, scenario)
        missing = learner_int(
            cache.blocks_to_add(sid, count), f"what cache.blocks_to_add({sid!r}, {count}) returned", scenario
        )
        if missing:
            fail(
                f"{scenario}: after _reserve, chunk ({sid!r}, {count})",
                "room for every kept chunk: its blocks exist before the forward pass",
                f"{missing} block(s) still missing",
                "call cache.reserve(seq_id, count) for every chunk that stays in the plan",
            )
    still = engine_reads.queue(engine, "running", scenario)
    victims = [seq for seq in running if not any(seq is s for s in still)]
    counted = engine_reads.metric(engine, "preemptions", scenario)
    if counted != len(victims):
        fail(
            f"{scenario}: metrics",
            f"metrics.preemptions == {len(victims)} (preempted: {engine_reads.names(victims)})",
            counted,
            "call self.metrics.record_preemption(seq) once in each preemption",
        )
    return engine_reads.names(victims, scenario)
