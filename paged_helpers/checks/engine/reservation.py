"""The rules of ``_reserve`` (and the ``_preempt`` it calls), watched as they happen.

``watch`` opens a ``Reservation`` when the learner's ``_reserve`` starts: the cache's hooks report each
MemoryError of ``cache.reserve``, each ``prefix_cache.evict`` asked for, and each running sequence
freed before it finished (a preemption: ``expect_preemption``, checked before its blocks go back);
when ``_reserve`` returns, ``expect_outcome`` checks the queues, the victims and the plan it kept.

  evict before preempting          no block held only by the prefix cache at a preemption
  preempt only when out of memory  a preemption follows a MemoryError of reserve
  preempt the newest               the victim is the newest running sequence
  preempted to the front           victims wait at the front of the queue, oldest first
"""

from __future__ import annotations

from ..speaking.failure import fail
from .engine_reads import evictable_blocks, names, num_cached, num_free, plan_of, pool_refs, queue, same, seq_id, tables
from .rules import Before


class Reservation:
    """What one call of ``_reserve`` did, watched as it happens (see ``watch``)."""

    def __init__(self, engine, plan, scenario: str = "") -> None:
        self.before = Before.of(engine, scenario)
        self.plan = plan_of(plan, "the plan _reserve was given", scenario)
        self.victims: list = []
        self.memory_errors = 0
        self.evictions_asked: list[int] = []  # blocks_wanted of each prefix_cache.evict call

    def live(self) -> list:
        """Running sequences not preempted so far in this reservation, oldest first."""
        return [seq for seq in self.before.running if not any(seq is v for v in self.victims)]

    def expect_preemption(self, scenario: str, engine, seq) -> None:
        """Called when ``seq`` is freed during ``_reserve``, before its blocks go back."""
        live = self.live()
        cache = engine.cache
        sid = seq_id(seq, scenario)
        spare = evictable_blocks(cache, scenario)
        if spare and self.evictions_asked:
            refs = [pool_refs(cache, scenario)[block] for block in spare]
            fail(
                f"{scenario}: evict before preempting {sid!r}",
                "no block held only by the prefix cache when a sequence is preempted",
                f"{len(spare)} such block(s) {spare[:8]} (reference counts {refs[:8]}) after "
                f"prefix_cache.evict({', '.join(map(str, self.evictions_asked))}) with "
                f"{num_free(cache, scenario)} block(s) free",
                "evict(blocks_wanted) drops entries until blocks_wanted blocks are free in all, so ask for more "
                "than are free now (num_free + what the chunk needs); if you did, the prefix cache kept blocks "
                "it should have dropped: evict must release every entry nobody else uses (reference count 1), "
                "and remember must take one reference per entry (notebook 05)",
            )
        if spare:
            fail(
                f"{scenario}: evict before preempting {sid!r}",
                "no block held only by the prefix cache when a sequence is preempted",
                f"{len(spare)} such block(s) {spare[:8]} could have been evicted",
                "on MemoryError, first ask the prefix cache to evict (prefix_cache.evict); preempt only when "
                "that freed nothing: cached blocks nobody uses cost nothing to drop, a preempted sequence "
                "costs its recomputation",
            )
        if not self.memory_errors:
            fail(
                f"{scenario}: preempt only when out of memory",
                f"{sid!r} preempted only after cache.reserve raised MemoryError",
                "a preemption with no MemoryError in this step",
                "preemption is the answer to a reserve that cannot be met, not a way to make room in advance",
            )
        if not live or seq is not live[-1]:
            alone = " (the only running sequence)" if len(live) == 1 else ""
            fail(
                f"{scenario}: preempt the newest",
                f"the newest running sequence {seq_id(live[-1]) if live else None!r} as the victim "
                f"(running, oldest first: {names(live)})",
                f"{sid!r}{alone}",
                "preempt running[-1], the newest: it has the least work to lose, and the oldest sequence, "
                "never preempted while another runs and alone always fitting, makes progress every step",
            )
        self.victims.append(seq)

    def expect_outcome(self, scenario: str, engine, kept) -> None:
        """The rules after ``_reserve`` returned ``kept``."""
        victims = self.victims
        waiting, running = queue(engine, "waiting", scenario), queue(engine, "running", scenario)
        held = tables(engine.cache, scenario)
        unfreed = [
            seq_id(seq, scenario)
            for seq in self.live()
            if not any(seq is s for s in running) and seq_id(seq, scenario) in held
        ]
        if unfreed:
            fail(
                f"{scenario}: preempting {unfreed}",
                "a preempted sequence's blocks back in the pool (cache.free) when it leaves `running`",
                f"{unfreed} left `running` but still hold {[len(held[s]) for s in unfreed]} block(s) in the cache",
                "preempting frees the blocks with cache.free(seq_id): that is the memory it makes; the "
                "sequence keeps its output and is recomputed when readmitted",
            )
        order = list(self.before.running)
        front = sorted(victims, key=lambda victim: next(i for i, seq in enumerate(order) if seq is victim))
        if not same(waiting[: len(front)], front) or not same(waiting[len(front) :], self.before.waiting):
            fail(
                f"{scenario}: preempted to the front",
                f"waiting {names(front)} (the preempted, oldest first) then {names(self.before.waiting)}",
                f"waiting {names(waiting)}",
                "a preempted sequence goes back to the front of the queue (waiting.appendleft): it has waited "
                "longest, and it is the next to be admitted",
            )
        for seq in victims:
            sid, cached, still = seq_id(seq, scenario), num_cached(seq, scenario), any(seq is s for s in running)
            if cached != 0 or still or sid in held:
                fail(
                    f"{scenario}: preempting {sid!r}",
                    "out of running and of the cache, with num_cached 0 (its output kept)",
                    f"num_cached {cached}, running {still}, in the cache {sid in held}",
                    "preempting frees the blocks (cache.free), sets num_cached = 0, removes the sequence from "
                    "`running` and puts it at the front of `waiting`",
                )
        expected = [(seq, count) for seq, count in self.plan if not any(seq is v for v in victims)]
        kept = plan_of(kept, "what _reserve returned", scenario)
        if not same([s for s, _ in kept], [s for s, _ in expected]) or [c for _, c in kept] != [c for _, c in expected]:
            fail(
                f"{scenario}: every running sequence decodes",
                f"the plan minus the preempted: {[(seq_id(s), c) for s, c in expected]}",
                f"{[(getattr(s, 'seq_id', s), c) for s, c in kept]}",
                "_reserve returns the plan without the preempted sequences; every other chunk stays, "
                "reserved, so no running sequence is skipped",
            )
