"""The scheduling rules notebook 08 states, each a function that fails naming its rule.

Both the end-to-end ``check_engine`` (through ``watch``, on every step of a served
workload) and the stage checks (``stages``, on hand-built states) call these, so a
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

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import Any

from ..reading.learner_code import plain, read_ahead
from ..reading.strict import (
    learner_bool,
    learner_dict,
    learner_float,
    learner_int,
    learner_int_list,
    learner_key,
    learner_list,
)
from ..speaking.failure import fail

# ---------------------------------------------------------------- reading the learner's state
#
# Every value a rule compares or computes with is read here, strictly (checks/reading/strict.py): an int,
# list or dict subclass, or an object that says it equals anything, is refused with a message
# naming what was read, instead of answering the rule's comparison for itself. Sequences and
# queues' members are compared by identity (``is``), which runs no learner code. The rules read
# on every step, so the plain case (exact ints, lists, str keys) is taken first, without naming
# what is read; anything else goes to the strict readers, which accept or refuse it by name.


def _all(items: Any, kind: type) -> bool:
    """Every item's type is exactly ``kind``, checked in C: no learner code runs (not even a metaclass's)."""
    return all(map(is_, map(type, items), repeat(kind)))


def _int(value: Any, what: Callable[[], str], scenario: str) -> int:
    return value if type(value) is int else learner_int(value, what(), scenario)


def _ints(value: Any, what: Callable[[], str], scenario: str) -> list[int]:
    # A learner's list read across the grader's boundary is copied first (answered from the copy that
    # came with it): naming it beforehand would ask the learner's process again and lose that copy.
    value = plain(value)
    return list(value) if type(value) is list and _all(value, int) else learner_int_list(value, what(), scenario)


# What the rules read of an engine after each of its phases: its parts, their bookkeeping, and the
# fields of every running and waiting sequence. ``read_engine_ahead`` asks for all of it in one
# request where the engine lives in the learner's process (``learner_code.read_ahead``); each read
# then goes through the strict readers as before. In one process it does nothing.
ENGINE_READS = (
    "running",
    "waiting",
    "cache",
    "prefix_cache",
    "metrics",
    "chunk_size",
    "max_step_tokens",
    "cache.tables",
    "cache.lengths",
    "cache.allocator",
    "cache.allocator.refs",
    "cache.allocator.num_free",
    "prefix_cache.entries",
    "metrics.prefix_hit_tokens",
    "metrics.prompt_tokens",
    "metrics.tokens_generated",
    "metrics.preemptions",
    "seq_id",
    "num_cached",
    "output",
    "prompt",
)


def read_engine_ahead(engine) -> None:
    """The engine's state as ``ENGINE_READS`` names it, in one request (none when read since the
    learner last ran, or when the engine lives in this process)."""
    read_ahead(engine, names=ENGINE_READS, follow=("running", "waiting"))


def _key(value: Any, what: Callable[[], str], scenario: str) -> Any:
    return value if type(value) is str else learner_key(value, what(), scenario)


def pool_refs(cache, scenario: str = "") -> list[int]:
    return _ints(cache.allocator.refs, lambda: "cache.allocator.refs", scenario)


def num_free(cache, scenario: str = "") -> int:
    return _int(cache.allocator.num_free, lambda: "cache.allocator.num_free", scenario)


def tables(cache, scenario: str = "") -> dict[Any, list[int]]:
    value = cache.tables
    if (
        type(value) is dict
        and _all(value, str)
        and all(type(table) is list and _all(table, int) for table in dict.values(value))
    ):
        return {key: list(table) for key, table in dict.items(value)}
    return learner_dict(value, "cache.tables", scenario, learner_int_list)


def lengths(cache, scenario: str = "") -> dict[Any, int]:
    value = cache.lengths
    if type(value) is dict and _all(value, str) and _all(dict.values(value), int):
        return dict(value)
    return learner_dict(value, "cache.lengths", scenario, learner_int)


def prefix_entries(prefix_cache, scenario: str = "") -> set[tuple[Any, int]] | None:
    """The prefix cache's ``entries`` as (key, block) pairs, or None when it keeps no dict of them
    (the rule that reads them is then skipped: notebook 05's check is where ``entries`` is required)."""
    value = getattr(prefix_cache, "entries", None)
    if type(value) not in (dict, OrderedDict):
        return None
    if _all(dict.values(value), int) and all(type(key) is tuple and _all(key, int) for key in value):
        return set(dict.items(value))
    return set(learner_dict(value, "prefix_cache.entries", scenario, learner_int).items())


def seq_id(seq, scenario: str = "") -> Any:
    return _key(seq.seq_id, lambda: "seq.seq_id", scenario)


def _of(seq, field: str, scenario: str) -> Callable[[], str]:
    return lambda: f"seq.{field} of {seq_id(seq, scenario)!r}"


def num_cached(seq, scenario: str = "") -> int:
    return _int(seq.num_cached, _of(seq, "num_cached", scenario), scenario)


def output(seq, scenario: str = "") -> list[int]:
    return _ints(seq.output, _of(seq, "output", scenario), scenario)


def tokens(seq, scenario: str = "") -> list[int]:
    """prompt + output, as ``seq.tokens`` computes them."""
    return _ints(seq.prompt, _of(seq, "prompt", scenario), scenario) + output(seq, scenario)


def num_pending(seq, scenario: str = "") -> int:
    """Tokens still to run through the model, as ``seq.num_pending`` computes them."""
    return len(tokens(seq, scenario)) - num_cached(seq, scenario)


def prefilling(seq, scenario: str = "") -> bool:
    """``seq.is_prefilling``: more than one token to run."""
    return num_pending(seq, scenario) > 1


def finished(seq, scenario: str = "") -> bool:
    """``seq.is_finished``: as many output tokens as asked for."""
    return len(output(seq, scenario)) >= _int(seq.max_new_tokens, _of(seq, "max_new_tokens", scenario), scenario)


_FIELDS = {
    "seq_id": learner_key,
    "request_id": learner_key,
    "prompt": learner_int_list,
    "max_new_tokens": learner_int,
    "n": learner_int,
    "sample_index": learner_int,
    "seed": learner_int,
    "temperature": learner_float,
    "output": learner_int_list,
    "num_cached": learner_int,
    "forked": learner_bool,
}


def fields(seq, names, scenario: str = "") -> dict[str, Any]:
    """The Sequence fields ``names`` of ``seq``, each read strictly ("(missing)" if absent)."""
    return {
        name: _FIELDS[name](getattr(seq, name), _of(seq, name, scenario)(), scenario)
        if hasattr(seq, name)
        else "(missing)"
        for name in names
    }


def _as_is(item: Any, what: str, scenario: str) -> Any:
    return item


def queue(engine, name: str, scenario: str = "") -> list:
    """``engine.running`` or ``engine.waiting`` as a plain list of its members (not read further)."""
    read_engine_ahead(engine)
    value = getattr(engine, name)
    if type(value) in (list, deque):
        return list(value)
    return learner_list(value, f"engine.{name}", scenario, _as_is)


def plan_of(plan, what: str, scenario: str = "") -> list[tuple[Any, int]]:
    """A plan, [(seq, count)], as plain pairs: the sequence as it is, the count a plain int."""
    if type(plan) is list and all(type(e) is tuple and len(e) == 2 and type(e[1]) is int for e in plan):
        return list(plan)

    def chunk(entry, where, scenario):
        pair = learner_list(entry, where, scenario, _as_is)
        if len(pair) != 2:
            fail(
                f"{scenario}: {what}",
                "(seq, count) pairs",
                f"an entry of {len(pair)} item(s)",
                "a plan is a list of (seq, count) tuples: the sequence and how many of its tokens run this step",
            )
        return pair[0], _int(pair[1], lambda: f"the count in {where}", scenario)

    return learner_list(plan, what, scenario, chunk)


def metric(engine, name: str, scenario: str = "") -> int:
    read_engine_ahead(engine)
    return learner_int(getattr(engine.metrics, name), f"metrics.{name}", scenario)


def step_outputs(finished, scenario: str = "") -> dict[Any, list[list[int]]]:
    """What ``step()`` returned: {request_id: [output of each sample]}, as plain values."""

    def samples(value, what, scenario):
        return learner_list(value, what, scenario, learner_int_list)

    return learner_dict(finished, "what step() returned", scenario, samples)


def same(got, expected) -> bool:
    """Two lists of sequences hold the same objects in the same order (identity: no learner __eq__)."""
    return len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True))


# ---------------------------------------------------------------- the rules


def names(seqs, scenario: str = "") -> list:
    return [seq_id(seq, scenario) for seq in seqs]


def blocks_to_come(cache, seq, scenario: str = "") -> int:
    """Blocks seq must still allocate to hold every token it knows (0 for a sequence not in the cache)."""
    table = tables(cache, scenario).get(seq_id(seq, scenario), [])
    needed = learner_int(cache.blocks_needed(len(tokens(seq, scenario))), "what cache.blocks_needed returned", scenario)
    return max(0, needed - len(table))


def evictable_blocks(cache, scenario: str = "") -> list[int]:
    """Blocks with a reference but in no table: held only by the prefix cache (or leaked)."""
    in_tables = {block for table in tables(cache, scenario).values() for block in table}
    return [block for block, refs in enumerate(pool_refs(cache, scenario)) if refs > 0 and block not in in_tables]


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
    forced = 1 if not before.running else 0
    if count > forced:
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
    return admitted


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
