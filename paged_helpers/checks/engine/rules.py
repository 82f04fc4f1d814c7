"""The scheduling rules notebook 08 states, each a function that fails naming its rule.

Both the end-to-end ``check_engine`` (through ``watch``, on every step of a served
workload) and the stage checks (the cases of ``scenarios``, on hand-built states) call these, so a
rule is written once. Each takes what was seen before a phase of ``step()`` and the engine
after it; none changes the engine, and each reads it through ``engine_reads``. The rules of
``_reserve`` (evict before preempting, the victim, the queue afterwards) are in ``reservation``.

Rules (the names appear in the messages):

  admission order        waiting sequences are admitted from the front, appended to running
  admit when idle        when nothing runs, the front of the queue is admitted, fits or not
  undo a refused admission   a sequence left waiting is not in the cache
  admit only with room   after admission, the free blocks cover what every prefilling
                         sequence still has to allocate, plus 1% of the pool kept spare for
                         the decoders (len(pool) // 100 at least: rounding up is accepted too;
                         the forced admission of an idle engine excepted)
  prefix hits that stick     metrics count the reused tokens of admitted sequences only
  every running sequence decodes   each decoding sequence gets one token in every plan
  chunk size / token budget        prefill chunks, oldest first, each
                                   min(chunk_size, pending, budget left)
  evict before preempting          no block held only by the prefix cache at a preemption
  preempt only when out of memory  a preemption follows a MemoryError of reserve
  preempt the newest               the victim is the newest running sequence
  preempted to the front           victims wait at the front of the queue, oldest first
  never evict blocks in use        an eviction never takes a reference from a block in a table
  never drop a prefix entry in use no prefix-cache entry whose block a running sequence holds
                                   is dropped, by evict or by the engine's own code (it frees
                                   nothing and loses the later hits)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..reading.strict import learner_int
from ..speaking.failure import fail
from .engine_reads import (
    lengths,
    metric,
    names,
    num_cached,
    num_free,
    num_pending,
    output,
    plan_of,
    pool_refs,
    prefilling,
    prefix_entries,
    queue,
    read_engine_ahead,
    same,
    seq_id,
    tables,
    tokens,
)


def blocks_to_come(cache, seq, scenario: str = "") -> int:
    """Blocks seq must still allocate to hold every token it knows (0 for a sequence not in the cache)."""
    table = tables(cache, scenario).get(seq_id(seq, scenario), [])
    needed = learner_int(cache.blocks_needed(len(tokens(seq, scenario))), "what cache.blocks_needed returned", scenario)
    return max(0, needed - len(table))


@dataclass(frozen=True)
class Before:
    """The engine's queues and counters before a phase of ``step()``."""

    running: tuple
    waiting: tuple
    prefix_hit_tokens: int
    prompt_tokens: int

    @classmethod
    def of(cls, engine, scenario: str = "") -> Before:
        return cls(
            tuple(queue(engine, "running", scenario)),
            tuple(queue(engine, "waiting", scenario)),
            metric(engine, "prefix_hit_tokens", scenario),
            metric(engine, "prompt_tokens", scenario),
        )


def expect_admission(scenario: str, before: Before, engine) -> list:
    """The rules of ``_admit``; returns the sequences admitted."""
    running, waiting, cache = queue(engine, "running", scenario), queue(engine, "waiting", scenario), engine.cache
    admitted = running[len(before.running) :]
    _expect_admission_order(scenario, before, running, waiting, admitted)
    held = tables(cache, scenario)
    stranded = [seq_id(seq, scenario) for seq in waiting if seq_id(seq, scenario) in held]
    if stranded:
        fail(
            f"{scenario}: undo a refused admission",
            "no waiting sequence in the cache",
            f"{stranded} still waiting but created in the cache, holding {[len(held[s]) for s in stranded]} block(s)",
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
    _expect_attached(scenario, cache, admitted, held)
    if len(admitted) > (1 if not before.running else 0):  # an idle engine's first admission is forced
        _expect_room(scenario, cache, running, admitted)
    _expect_prefix_hits(scenario, before, engine, admitted)
    return admitted


def _expect_admission_order(scenario: str, before: Before, running: list, waiting: list, admitted: list) -> None:
    """admission order: the front of ``waiting`` appended to ``running``, the rest of the queue as it was."""
    count = len(admitted)
    if not same(running[: len(before.running)], before.running) or not same(admitted, before.waiting[:count]):
        fail(
            f"{scenario}: admission order",
            f"running {names(before.running)} followed by the first waiting sequences of "
            f"{names(before.waiting)}, in queue order",
            f"running {names(running)}",
            "admission takes sequences from the front of `waiting` (the oldest, or a preempted one put "
            "back there) and appends them to `running`, which stays in admission order: the newest last",
        )
    if not same(waiting, before.waiting[count:]):
        fail(
            f"{scenario}: admission order",
            f"waiting {names(before.waiting[count:])} (the queue minus the {count} admitted at its front)",
            f"waiting {names(waiting)}",
            "admission removes sequences only from the front of the queue and never reorders it",
        )


def _expect_attached(scenario: str, cache, admitted: list, held: dict) -> None:
    """Each admitted sequence is in the cache, its num_cached what attach reused."""
    written = lengths(cache, scenario) if admitted else {}
    for seq in admitted:
        sid = seq_id(seq, scenario)
        if sid not in held or num_cached(seq, scenario) != written.get(sid):
            fail(
                f"{scenario}: admitting {sid!r}",
                "a sequence in the cache whose num_cached equals the tokens attach returned",
                f"num_cached {num_cached(seq, scenario)}, cache holds {written.get(sid, '(not created)')} token(s)",
                "admit through prefix_cache.attach(seq_id, seq.tokens) and set seq.num_cached to what it returns",
            )


def _expect_room(scenario: str, cache, running: list, admitted: list) -> None:
    """admit only with room: the free blocks cover the running prefills' blocks to come and the spare."""
    promised = sum(blocks_to_come(cache, seq, scenario) for seq in running if prefilling(seq, scenario))
    pool = len(pool_refs(cache, scenario))
    spare = pool // 100  # the least the notebook accepts: rounding up keeps more, and passes too
    free = num_free(cache, scenario)
    if promised + spare > free:
        fail(
            f"{scenario}: admit only with room",
            f"after admitting {names(admitted)}: at least {promised + spare} free block(s), what the running "
            f"prefills still have to allocate ({promised}) plus 1% of the pool kept spare ({spare} of its "
            f"{pool} blocks, rounded down; rounding up is accepted too)",
            f"{free} free block(s)",
            "before admitting a sequence, count the blocks every running prefill (and this sequence) still "
            "needs (_blocks_to_come) and evict to make them free; if they cannot be, undo the attach and "
            "stop admitting: a sequence admitted without room is preempted again a few steps later",
        )


def _expect_prefix_hits(scenario: str, before: Before, engine, admitted: list) -> None:
    """prefix hits that stick: the metrics count the tokens reused by the sequences admitted, only."""
    reused = sum(num_cached(seq, scenario) for seq in admitted)
    counted = metric(engine, "prefix_hit_tokens", scenario) - before.prefix_hit_tokens
    if counted != reused:
        fail(
            f"{scenario}: prefix hits that stick",
            f"metrics.prefix_hit_tokens up by {reused}, the tokens attach reused for the admitted {names(admitted)}",
            f"up by {counted}",
            "call self.metrics.record_admission(seq, reused) once for each sequence that joins `running`, "
            "after the room check: an admission undone for lack of room reused nothing",
        )


@dataclass(frozen=True)
class PlanState:
    """What planning must leave alone: the running batch and each sequence's progress."""

    running: tuple
    progress: tuple  # (num_cached, len(output)) per running sequence

    @classmethod
    def of(cls, engine, scenario: str = "") -> PlanState:
        running = tuple(queue(engine, "running", scenario))
        return cls(running, tuple((num_cached(seq, scenario), len(output(seq, scenario))) for seq in running))

    def expect_unchanged(self, scenario: str, engine, plan) -> None:
        now = PlanState.of(engine, scenario)
        if not same(now.running, self.running) or now.progress != self.progress:
            fail(
                f"{scenario}: _plan changed the engine",
                "running, num_cached and output untouched: planning only decides",
                f"plan {[(seq_id(s), c) for s, c in plan_of(plan, 'the plan _plan returned', scenario)]}; "
                "(num_cached, outputs) before "
                f"{list(self.progress)}, after {list(now.progress)}",
                "_plan returns the chunks; num_cached grows in _advance, after the forward pass computed them",
            )


def expect_plan(scenario: str, engine, plan) -> None:
    """The rules of ``_plan``: every decoder one token; prefill chunks oldest first within the budget."""
    running = queue(engine, "running", scenario)
    plan = plan_of(plan, "the plan _plan returned", scenario)
    seen: set = set()
    for seq, _ in plan:
        if not any(seq is other for other in running) or seq_id(seq, scenario) in seen:
            fail(
                f"{scenario}: the plan",
                f"(seq, count) pairs naming each running sequence at most once: running {names(running)}",
                [(getattr(s, "seq_id", s), c) for s, c in plan],
                "plan only sequences in `running`, each once, with an integer count of tokens",
            )
        seen.add(seq_id(seq, scenario))
    counts = {seq_id(seq, scenario): count for seq, count in plan}
    pending = {seq_id(seq, scenario): num_pending(seq, scenario) for seq in running}
    decoders = [seq for seq in running if pending[seq_id(seq)] <= 1]
    skipped = [seq_id(seq) for seq in decoders if counts.get(seq_id(seq)) != 1]
    if skipped:
        fail(
            f"{scenario}: every running sequence decodes",
            f"one token for each decoding sequence {names(decoders)}",
            f"plan {[(seq_id(s), c) for s, c in plan]} (wrong or missing for {skipped})",
            "plan one token for every decoding sequence before any prompt chunk: a user is waiting on each of "
            "them, and a decoder left out of a step stalls",
        )
    chunk_size = learner_int(engine.chunk_size, "engine.chunk_size", scenario)
    max_step_tokens = learner_int(engine.max_step_tokens, "engine.max_step_tokens", scenario)
    budget = max_step_tokens - len(decoders)
    for seq in running:
        sid = seq_id(seq)
        if pending[sid] <= 1:
            continue
        expected = max(0, min(chunk_size, pending[sid], budget))
        got = counts.get(sid, 0)
        if got != expected:
            rule = "chunk size" if got > chunk_size else "token budget"
            fail(
                f"{scenario}: {rule} (chunk_size={chunk_size}, max_step_tokens={max_step_tokens}, "
                f"{len(decoders)} decoding)",
                f"{expected} token(s) for {sid!r} ({pending[sid]} pending, {max(budget, 0)} of the "
                "step's budget left after the decoders and the older prefills)",
                f"{got} token(s); plan {[(seq_id(s), c) for s, c in plan]}",
                "after the decoders, give prefilling sequences chunks in running order (oldest first), each "
                "min(chunk_size, its pending tokens, budget left), until the step's budget is spent",
            )
        budget -= expected


@dataclass(frozen=True)
class PrefixHeld:
    """The prefix cache's entries and the cache's tables at one moment, for "never drop a prefix entry
    in use": whoever drops an entry (the prefix cache's evict, or the engine's own loop)."""

    entries: set | None
    tables: dict

    @classmethod
    def of(cls, engine, scenario: str = "") -> PrefixHeld:
        read_engine_ahead(engine)
        return cls(prefix_entries(engine.prefix_cache, scenario), tables(engine.cache, scenario))

    def expect_kept(self, scenario: str, engine, during: str) -> None:
        """No entry whose block a sequence held before ``during`` and still holds after it was dropped."""
        if self.entries is None:
            return
        now = prefix_entries(engine.prefix_cache, scenario)
        if now is None:
            return
        held = tables(engine.cache, scenario)
        dropped = {}
        for _, block in sorted(self.entries - now, key=lambda entry: entry[1]):
            users = [sid for sid, table in self.tables.items() if block in table and block in held.get(sid, ())]
            if users:
                dropped[block] = users
        if dropped:
            shown = ", ".join(f"block {block} (in the table of {users})" for block, users in list(dropped.items())[:6])
            fail(
                f"{scenario}: never drop a prefix entry in use ({during})",
                "prefix-cache entries dropped only when nobody else holds their block (reference count 1): "
                "an entry whose block a running sequence holds stays cached",
                f"{len(dropped)} entr{'y' if len(dropped) == 1 else 'ies'} dropped while a running sequence held "
                f"the block: {shown}. That freed no block (the sequence keeps its reference), and later requests "
                "with this prefix miss it and compute it again",
                "make room only through prefix_cache.evict(blocks_wanted), which skips blocks in use; an eviction "
                "loop of the engine's own that pops entries from prefix_cache.entries drops hot prefixes for "
                "nothing",
            )


def expect_eviction(scenario: str, cache, refs_before: list[int]) -> None:
    """No block in a live table lost a reference to an eviction (``refs_before`` read by ``pool_refs``)."""
    in_tables = {block for table in tables(cache, scenario).values() for block in table}
    refs = pool_refs(cache, scenario)
    taken = [b for b in sorted(in_tables) if refs[b] < refs_before[b]]
    if taken:
        fail(
            f"{scenario}: never evict blocks in use",
            "evict drops only entries whose block nobody else holds (reference count 1)",
            f"block(s) {taken} lost a reference while in a running sequence's table (now {[refs[b] for b in taken]})",
            "evict may release a cached block only when the prefix cache holds its only reference; a block "
            "that a sequence uses would otherwise be handed to someone else and overwritten",
        )
