"""The scheduling rules notebook 08 states, each a function that fails naming its rule.

Both the end-to-end ``check_engine`` (through ``engine_watch``, on every step of a served
workload) and the stage checks (``engine_stages``, on hand-built states) call these, so a
rule is written once. Each takes what was seen before a phase of ``step()`` and the engine
after it; none changes the engine. The engine's state is read through the attributes the
notebook's ``EngineBase`` defines: ``running`` (oldest first), ``waiting`` (front first),
``cache``, ``prefix_cache``, ``metrics``, ``chunk_size``, ``max_step_tokens``.

Rules (the names appear in the messages):

  admission order        waiting sequences are admitted from the front, appended to running
  admit when idle        when nothing runs, the front of the queue is admitted, fits or not
  undo a refused admission   a sequence left waiting is not in the cache
  admit only with room   after admission, the free blocks cover what every prefilling
                         sequence still has to allocate, plus 1% of the pool kept spare for
                         the decoders (the forced admission of an idle engine excepted)
  prefix hits that stick     metrics count the reused tokens of admitted sequences only
  every running sequence decodes   each decoding sequence gets one token in every plan
  chunk size / token budget        prefill chunks, oldest first, each
                                   min(chunk_size, pending, budget left)
  evict before preempting          no block held only by the prefix cache at a preemption
  preempt only when out of memory  a preemption follows a MemoryError of reserve
  preempt the newest               the victim is the newest running sequence
  preempted to the front           victims wait at the front of the queue, oldest first
  never evict blocks in use        an eviction never takes a reference from a block in a table
"""

from __future__ import annotations

from dataclasses import dataclass

from .report import fail


def names(seqs) -> list[str]:
    return [seq.seq_id for seq in seqs]


def blocks_to_come(cache, seq) -> int:
    """Blocks seq must still allocate to hold every token it knows (0 for a sequence not in the cache)."""
    table = cache.tables.get(seq.seq_id, [])
    return max(0, cache.blocks_needed(len(seq.tokens)) - len(table))


def evictable_blocks(cache) -> list[int]:
    """Blocks with a reference but in no table: held only by the prefix cache (or leaked)."""
    in_tables = {block for table in cache.tables.values() for block in table}
    return [block for block, refs in enumerate(cache.allocator.refs) if refs > 0 and block not in in_tables]


@dataclass(frozen=True)
class Before:
    """The engine's queues and counters before a phase of ``step()``."""

    running: tuple
    waiting: tuple
    prefix_hit_tokens: int
    prompt_tokens: int

    @classmethod
    def of(cls, engine) -> Before:
        return cls(
            tuple(engine.running),
            tuple(engine.waiting),
            engine.metrics.prefix_hit_tokens,
            engine.metrics.prompt_tokens,
        )


def expect_admission(scenario: str, before: Before, engine) -> list:
    """The rules of ``_admit``; returns the sequences admitted."""
    running, waiting, cache = list(engine.running), list(engine.waiting), engine.cache
    admitted = running[len(before.running) :]
    count = len(admitted)
    if running[: len(before.running)] != list(before.running) or admitted != list(before.waiting[:count]):
        fail(
            f"{scenario}: admission order",
            f"running {names(before.running)} followed by the first waiting sequences of "
            f"{names(before.waiting)}, in queue order",
            f"running {names(running)}",
            "admission takes sequences from the front of `waiting` (the oldest, or a preempted one put "
            "back there) and appends them to `running`, which stays in admission order: the newest last",
        )
    if waiting != list(before.waiting[count:]):
        fail(
            f"{scenario}: admission order",
            f"waiting {names(before.waiting[count:])} (the queue minus the {count} admitted at its front)",
            f"waiting {names(waiting)}",
            "admission removes sequences only from the front of the queue and never reorders it",
        )
    stranded = [seq.seq_id for seq in waiting if seq.seq_id in cache.tables]
    if stranded:
        fail(
            f"{scenario}: undo a refused admission",
            "no waiting sequence in the cache",
            f"{stranded} still waiting but created in the cache, holding "
            f"{[len(cache.tables[s]) for s in stranded]} block(s)",
            "attach creates the sequence in the cache (and shares its cached prefix blocks); when the "
            "admission then does not fit, undo it with cache.free(seq_id) before leaving it in the queue",
        )
    if before.waiting and not before.running and not running:
        fail(
            f"{scenario}: admit when idle",
            f"{before.waiting[0].seq_id!r} admitted: nothing is running",
            "nothing admitted",
            "when nothing runs, admit the front of the queue whatever room is left: add_request guaranteed it "
            "fits the pool alone, and an idle engine that waits for room waits forever",
        )
    for seq in admitted:
        if seq.seq_id not in cache.tables or seq.num_cached != cache.lengths[seq.seq_id]:
            fail(
                f"{scenario}: admitting {seq.seq_id!r}",
                "a sequence in the cache whose num_cached equals the tokens attach returned",
                f"num_cached {seq.num_cached}, cache holds {cache.lengths.get(seq.seq_id, '(not created)')} token(s)",
                "admit through prefix_cache.attach(seq_id, seq.tokens) and set seq.num_cached to what it returns",
            )
    forced = 1 if not before.running else 0
    if count > forced:
        promised = sum(blocks_to_come(cache, seq) for seq in running if seq.is_prefilling)
        spare = len(cache.allocator.refs) // 100
        if promised + spare > cache.allocator.num_free:
            fail(
                f"{scenario}: admit only with room",
                f"after admitting {names(admitted)}: at least {promised + spare} free block(s), what the running "
                f"prefills still have to allocate ({promised}) plus 1% of the pool kept spare ({spare})",
                f"{cache.allocator.num_free} free block(s)",
                "before admitting a sequence, count the blocks every running prefill (and this sequence) still "
                "needs (_blocks_to_come) and evict to make them free; if they cannot be, undo the attach and "
                "stop admitting: a sequence admitted without room is preempted again a few steps later",
            )
    reused = sum(seq.num_cached for seq in admitted)
    counted = engine.metrics.prefix_hit_tokens - before.prefix_hit_tokens
    if counted != reused:
        fail(
            f"{scenario}: prefix hits that stick",
            f"metrics.prefix_hit_tokens up by {reused}, the tokens attach reused for the admitted {names(admitted)}",
            f"up by {counted}",
            "call self.metrics.record_admission(seq, reused) once for each sequence that joins `running`, "
            "after the room check: an admission undone for lack of room reused nothing",
        )
    return admitted


@dataclass(frozen=True)
class PlanState:
    """What planning must leave alone: the running batch and each sequence's progress."""

    running: tuple
    progress: tuple  # (num_cached, len(output)) per running sequence

    @classmethod
    def of(cls, engine) -> PlanState:
        running = tuple(engine.running)
        return cls(running, tuple((seq.num_cached, len(seq.output)) for seq in running))

    def expect_unchanged(self, scenario: str, engine, plan) -> None:
        now = PlanState.of(engine)
        if now.running != self.running or now.progress != self.progress:
            fail(
                f"{scenario}: _plan changed the engine",
                "running, num_cached and output untouched: planning only decides",
                f"plan {[(s.seq_id, c) for s, c in plan]}; (num_cached, outputs) before "
                f"{list(self.progress)}, after {list(now.progress)}",
                "_plan returns the chunks; num_cached grows in _advance, after the forward pass computed them",
            )


def expect_plan(scenario: str, engine, plan) -> None:
    """The rules of ``_plan``: every decoder one token; prefill chunks oldest first within the budget."""
    running = list(engine.running)
    seen: set[str] = set()
    for entry in plan:
        seq, count = entry
        if not any(seq is other for other in running) or seq.seq_id in seen or not isinstance(count, int):
            fail(
                f"{scenario}: the plan",
                f"(seq, count) pairs naming each running sequence at most once: running {names(running)}",
                [(s.seq_id, c) for s, c in plan],
                "plan only sequences in `running`, each once, with an integer count of tokens",
            )
        seen.add(seq.seq_id)
    counts = {seq.seq_id: count for seq, count in plan}
    decoders = [seq for seq in running if not seq.is_prefilling]
    skipped = [seq.seq_id for seq in decoders if counts.get(seq.seq_id) != 1]
    if skipped:
        fail(
            f"{scenario}: every running sequence decodes",
            f"one token for each decoding sequence {names(decoders)}",
            f"plan {[(s.seq_id, c) for s, c in plan]} (wrong or missing for {skipped})",
            "plan one token for every decoding sequence before any prompt chunk: a user is waiting on each of "
            "them, and a decoder left out of a step stalls",
        )
    budget = engine.max_step_tokens - len(decoders)
    for seq in running:
        if not seq.is_prefilling:
            continue
        expected = max(0, min(engine.chunk_size, seq.num_pending, budget))
        got = counts.get(seq.seq_id, 0)
        if got != expected:
            rule = "chunk size" if got > engine.chunk_size else "token budget"
            fail(
                f"{scenario}: {rule} (chunk_size={engine.chunk_size}, max_step_tokens={engine.max_step_tokens}, "
                f"{len(decoders)} decoding)",
                f"{expected} token(s) for {seq.seq_id!r} ({seq.num_pending} pending, {max(budget, 0)} of the "
                "step's budget left after the decoders and the older prefills)",
                f"{got} token(s); plan {[(s.seq_id, c) for s, c in plan]}",
                "after the decoders, give prefilling sequences chunks in running order (oldest first), each "
                "min(chunk_size, its pending tokens, budget left), until the step's budget is spent",
            )
        budget -= expected


class Reservation:
    """What one call of ``_reserve`` did, watched as it happens (see ``engine_watch``)."""

    def __init__(self, engine, plan) -> None:
        self.before = Before.of(engine)
        self.plan = list(plan)
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
        spare = evictable_blocks(cache)
        if spare and self.evictions_asked:
            refs = [cache.allocator.refs[block] for block in spare]
            fail(
                f"{scenario}: evict before preempting {seq.seq_id!r}",
                "no block held only by the prefix cache when a sequence is preempted",
                f"{len(spare)} such block(s) {spare[:8]} (reference counts {refs[:8]}) after "
                f"prefix_cache.evict({', '.join(map(str, self.evictions_asked))}) with "
                f"{cache.allocator.num_free} block(s) free",
                "evict(blocks_wanted) drops entries until blocks_wanted blocks are free in all, so ask for more "
                "than are free now (num_free + what the chunk needs); if you did, the prefix cache kept blocks "
                "it should have dropped: evict must release every entry nobody else uses (reference count 1), "
                "and remember must take one reference per entry (notebook 05)",
            )
        if spare:
            fail(
                f"{scenario}: evict before preempting {seq.seq_id!r}",
                "no block held only by the prefix cache when a sequence is preempted",
                f"{len(spare)} such block(s) {spare[:8]} could have been evicted",
                "on MemoryError, first ask the prefix cache to evict (prefix_cache.evict); preempt only when "
                "that freed nothing: cached blocks nobody uses cost nothing to drop, a preempted sequence "
                "costs its recomputation",
            )
        if not self.memory_errors:
            fail(
                f"{scenario}: preempt only when out of memory",
                f"{seq.seq_id!r} preempted only after cache.reserve raised MemoryError",
                "a preemption with no MemoryError in this step",
                "preemption is the answer to a reserve that cannot be met, not a way to make room in advance",
            )
        if not live or seq is not live[-1]:
            alone = " (the only running sequence)" if len(live) == 1 else ""
            fail(
                f"{scenario}: preempt the newest",
                f"the newest running sequence {live[-1].seq_id if live else None!r} as the victim "
                f"(running, oldest first: {names(live)})",
                f"{seq.seq_id!r}{alone}",
                "preempt running[-1], the newest: it has the least work to lose, and the oldest sequence, "
                "never preempted while another runs and alone always fitting, makes progress every step",
            )
        self.victims.append(seq)

    def expect_outcome(self, scenario: str, engine, kept) -> None:
        """The rules after ``_reserve`` returned ``kept``."""
        victims = self.victims
        waiting = list(engine.waiting)
        unfreed = [
            seq.seq_id
            for seq in self.live()
            if not any(seq is s for s in engine.running) and seq.seq_id in engine.cache.tables
        ]
        if unfreed:
            fail(
                f"{scenario}: preempting {unfreed}",
                "a preempted sequence's blocks back in the pool (cache.free) when it leaves `running`",
                f"{unfreed} left `running` but still hold "
                f"{[len(engine.cache.tables[s]) for s in unfreed]} block(s) in the cache",
                "preempting frees the blocks with cache.free(seq_id): that is the memory it makes; the "
                "sequence keeps its output and is recomputed when readmitted",
            )
        front = sorted(victims, key=list(self.before.running).index)
        if waiting[: len(front)] != front or waiting[len(front) :] != list(self.before.waiting):
            fail(
                f"{scenario}: preempted to the front",
                f"waiting {names(front)} (the preempted, oldest first) then {names(self.before.waiting)}",
                f"waiting {names(waiting)}",
                "a preempted sequence goes back to the front of the queue (waiting.appendleft): it has waited "
                "longest, and it is the next to be admitted",
            )
        for seq in victims:
            if seq.num_cached != 0 or any(seq is s for s in engine.running) or seq.seq_id in engine.cache.tables:
                fail(
                    f"{scenario}: preempting {seq.seq_id!r}",
                    "out of running and of the cache, with num_cached 0 (its output kept)",
                    f"num_cached {seq.num_cached}, running {any(seq is s for s in engine.running)}, "
                    f"in the cache {seq.seq_id in engine.cache.tables}",
                    "preempting frees the blocks (cache.free), sets num_cached = 0, removes the sequence from "
                    "`running` and puts it at the front of `waiting`",
                )
        expected = [(seq, count) for seq, count in self.plan if not any(seq is v for v in victims)]
        if [(s.seq_id, c) for s, c in kept] != [(s.seq_id, c) for s, c in expected]:
            fail(
                f"{scenario}: every running sequence decodes",
                f"the plan minus the preempted: {[(s.seq_id, c) for s, c in expected]}",
                f"{[(s.seq_id, c) for s, c in kept]}",
                "_reserve returns the plan without the preempted sequences; every other chunk stays, "
                "reserved, so no running sequence is skipped",
            )


def expect_eviction(scenario: str, cache, refs_before: list[int]) -> None:
    """No block in a live table lost a reference to an eviction."""
    in_tables = {block for table in cache.tables.values() for block in table}
    taken = [b for b in sorted(in_tables) if cache.allocator.refs[b] < refs_before[b]]
    if taken:
        fail(
            f"{scenario}: never evict blocks in use",
            "evict drops only entries whose block nobody else holds (reference count 1)",
            f"block(s) {taken} lost a reference while in a running sequence's table "
            f"(now {[cache.allocator.refs[b] for b in taken]})",
            "evict may release a cached block only when the prefix cache holds its only reference; a block "
            "that a sequence uses would otherwise be handed to someone else and overwritten",
        )
