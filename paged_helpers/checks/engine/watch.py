"""Watching a learner's engine serve: subclasses that record and stop at the first broken rule.

``watched(engine_class, cache_class, prefix_class)`` returns subclasses of the learner's own
classes that change nothing but observe:

  * the engine's phases: ``_admit`` (queue order, undo, room, prefix hits), ``_plan``
    (decoders, chunk size, budget) and ``_reserve`` (evict before preempting, the victim,
    the queue afterwards); the rules live in ``rules``;
  * the cache: every write continues its sequence at the right positions, in blocks reserved
    beforehand and owned alone; every step computes exactly the chunks it kept; forks;
  * the prefix cache: tokens handed out, evictions that never touch a block in use, and no entry
    whose block a running sequence holds dropped in a phase (by evict or by the engine's own code).

A ``Watch`` belongs to one scenario; the engine's ``step()`` (the notebook's, unchanged) calls
the watched phases in order. The rules of a whole step and of every write of the forward pass are
in ``every_step``. Each hook applies its rules inside ``blame.blamed(...)``, naming the
stages whose methods could break them (``check_engine`` asks those stages' own checks before it
fails the whole engine on them); outside ``check_engine`` nothing is recorded.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

from ...checkpoint import tiny_qwen3
from ...model import tiny_config
from ..reading.calls import call_learner
from ..reading.learner_code import subclass
from ..reading.strict import learner_int, learner_key
from ..speaking.failure import CheckFailed, fail
from . import engine_reads, rules
from .blame import ADMISSION, ADVANCE, FORK, FORWARD, PLAN, RESERVE, blamed
from .every_step import expect_step, verify_write
from .reservation import Reservation

VOCAB = tiny_config().vocab_size  # the vocabulary of the model every engine check serves (``model``)


@functools.cache
def model():
    """The tiny model every engine check serves (seeded, CPU)."""
    return tiny_qwen3(seed=0, device="cpu")


def build(engine_class, cache_class, prefix_class, watch, num_blocks, block_size, chunk_size, max_step_tokens):
    """A watched engine on a watched cache of ``num_blocks`` blocks and a watched prefix cache."""
    config = model().config
    watched_engine, watched_cache, watched_prefix = watched(engine_class, cache_class, prefix_class, watch)
    cache = call_learner(
        f"{cache_class.__name__}(...)",
        watched_cache,
        config.num_hidden_layers,
        num_blocks,
        block_size,
        config.num_key_value_heads,
        config.head_dim,
    )
    prefix = call_learner(f"{prefix_class.__name__}(cache)", watched_prefix, cache)
    engine = call_learner(
        f"{engine_class.__name__}(model, cache, prefix_cache, chunk_size={chunk_size}, "
        f"max_step_tokens={max_step_tokens})",
        watched_engine,
        model(),
        cache,
        prefix,
        chunk_size=chunk_size,
        max_step_tokens=max_step_tokens,
    )
    watch.engine, watch.parts = engine, (cache, prefix)
    return engine, cache, prefix


class Refused(ValueError):
    """The learner's add_request refused a request (their ValueError, re-raised so it can be told apart)."""


class Watch:
    """What the watched engine, cache and prefix cache saw during one scenario."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.step = 0
        self.unit = "step"  # what ``step`` counts, in messages ("plan": a check that calls _forward itself)
        self.worked_on: set[str] = set()  # sequences written to since their creation
        self.readmitted: Counter[str] = Counter()  # seq_id -> times created again after a preemption
        self.preempted: set[str] = set()
        self.forks: list[tuple[str, str]] = []
        self.writes: Counter[tuple[str, int]] = Counter()  # (seq_id, position) -> times computed
        self.step_writes: Counter[str] = Counter()  # seq_id -> tokens computed in this step
        self.reused_tokens = 0
        self.preemptions = 0
        self.reservation: Reservation | None = None
        self.kept: list | None = None
        self.phases: list[str] = []
        self.engine = None  # set by build()
        self.parts: tuple = ()  # (cache, prefix cache) the check built the engine with, set by build()
        self.failure: CheckFailed | None = None  # the first failure, kept should the learner's code catch it

    def where(self) -> str:
        return f"{self.scenario}, {self.unit} {self.step}"


def _expect_own_parts(engine, watch: Watch) -> None:
    """The rules read the pool through ``engine.cache``: it must be the cache the check built (and
    watches), as must ``engine.prefix_cache``, not another object of the learner's."""
    if not watch.parts:
        return
    cache, prefix = watch.parts
    engine_reads.read_engine_ahead(engine)
    if engine.cache is not cache or engine.prefix_cache is not prefix:
        fail(
            watch.where(),
            "engine.cache and engine.prefix_cache: the cache and prefix cache the engine was built with",
            "another object in their place",
            "keep the cache and the prefix cache the constructor received (self.cache = cache, "
            "self.prefix_cache = prefix_cache); the engine works through them, it never replaces them",
        )


def _kept_failure(watch: Watch, method):
    """``method`` of a watched class, its failures kept in ``watch``: the learner's code around it (a step()
    that catches every exception, say) cannot swallow a broken rule or a refused value, which is raised
    again as soon as any watched method returns, and at the latest when the watched step() (or the stage
    the check called) returns to the check."""

    @functools.wraps(method)
    def keeping(self, *args, **kwargs):
        try:
            result = method(self, *args, **kwargs)
        except CheckFailed as error:
            if watch.failure is None:
                watch.failure = error
            if watch.failure is not error:  # a later complaint: the first broken rule is the one to name
                raise watch.failure  # noqa: B904 (its own cause stays as it was)
            raise
        if watch.failure is not None:
            raise watch.failure
        return result

    return keeping


def watched(engine_class, cache_class, prefix_class, watch: Watch):
    """Subclasses of the learner's three classes that report to ``watch`` (each hook gets ``base``, the
    learner's own method: see ``learner_view.subclass``)."""
    return (
        _made(watch, _engine_hooks(watch), engine_class),
        _made(watch, _cache_hooks(watch), cache_class),
        _made(watch, _prefix_cache_hooks(watch), prefix_class),
    )


def _made(watch: Watch, hooks: type, learner: Any) -> Any:
    """A subclass of the learner's class ``learner`` whose methods ``hooks`` watch, each hook's failure kept."""
    methods = {name: _kept_failure(watch, method) for name, method in vars(hooks).items()}
    return subclass(learner, learner.__name__, {n: m for n, m in methods.items() if not n.startswith("__")})


def _cache_hooks(watch: Watch) -> type:
    """The cache's hooks: sequences created and freed (preemptions, readmissions), reserves, forks, writes."""

    class WatchedCache:
        def create(self, base, seq):
            seq = learner_key(seq, "the seq_id given to cache.create", watch.where())
            tables = engine_reads.tables(self, watch.where())
            if seq in tables:
                # Who left it there: an undone admission, _preempt, _finish (called by _advance), or a second fork.
                with blamed(ADMISSION, RESERVE, FORK, ADVANCE):
                    fail(
                        f"{watch.where()}: creating sequence {seq!r}",
                        f"{seq!r} absent from the cache (never created, or freed since)",
                        f"{seq!r} still holds {len(tables[seq])} block(s)",
                        "every way out of the running batch gives the blocks back with cache.free(seq_id): "
                        "finishing, being preempted, and an admission undone for lack of room",
                    )
            if seq in watch.preempted:
                watch.readmitted[seq] += 1
                watch.preempted.discard(seq)
            return base(seq)

        def free(self, base, seq):
            seq = learner_key(seq, "the seq_id given to cache.free", watch.where())
            reservation = watch.reservation
            if reservation is not None:
                victim = next((s for s in reservation.live() if engine_reads.seq_id(s, watch.where()) == seq), None)
                if victim is not None and not engine_reads.finished(victim, watch.where()):
                    reservation.expect_preemption(watch.where(), watch.engine, victim)
                    watch.preemptions += 1
            if seq in watch.worked_on:  # freed after computing something: if created again, it resumed
                watch.preempted.add(seq)
                watch.worked_on.discard(seq)
            return base(seq)

        def reserve(self, base, seq, new_tokens):
            try:
                return base(seq, new_tokens)
            except MemoryError:
                if watch.reservation is not None:
                    watch.reservation.memory_errors += 1
                raise

        def fork(self, base, parent, child):
            watch.forks.append((parent, child))
            return base(parent, child)

        def update(self, base, layer, k, v, positions, *args, **kwargs):
            if layer == 0:
                verify_write(self, positions, watch)
            return base(layer, k, v, positions, *args, **kwargs)

    return WatchedCache


def _prefix_cache_hooks(watch: Watch) -> type:
    """The prefix cache's hooks: tokens handed out by attach, blocks taken by evict."""

    class WatchedPrefixCache:
        def attach(self, base, seq, prompt):
            reused = base(seq, prompt)
            watch.reused_tokens += learner_int(reused, "what prefix_cache.attach returned", watch.where())
            return reused

        def evict(self, base, blocks_wanted):
            if watch.reservation is not None:
                watch.reservation.evictions_asked.append(blocks_wanted)
            refs = engine_reads.pool_refs(self.cache, watch.where())
            result = base(blocks_wanted)
            with blamed():  # notebook 05's evict: no stage of this notebook runs it
                rules.expect_eviction(watch.where(), self.cache, refs)
            return result

    return WatchedPrefixCache


def _engine_hooks(watch: Watch) -> type:
    """The engine's hooks: add_request, step() and its three phases, each applying its stage's rules."""

    class WatchedEngine:
        def add_request(self, base, *args, **kwargs):
            with blamed(ADMISSION):
                try:
                    return base(*args, **kwargs)
                except ValueError as error:
                    raise Refused(str(error)) from error

        def step(self, base):
            return _watched_step(self, base, watch)

        def _admit(self, base):
            with blamed(ADMISSION):
                _expect_own_parts(self, watch)
                before = rules.Before.of(self, watch.where())
                held = rules.PrefixHeld.of(self, watch.where())
                watch.phases.append("_admit")
                result = base()
                held.expect_kept(watch.where(), self, "during _admit")
                rules.expect_admission(watch.where(), before, self)
                return result

        def _plan(self, base):
            with blamed(PLAN):
                _expect_own_parts(self, watch)
                watch.phases.append("_plan")
                state = rules.PlanState.of(self, watch.where())
                plan = base()
                state.expect_unchanged(watch.where(), self, plan)
                rules.expect_plan(watch.where(), self, plan)
                return plan

        def _reserve(self, base, plan):
            with blamed(RESERVE, ADMISSION):  # _reserve and _preempt, and the _make_room they call
                _expect_own_parts(self, watch)
                watch.phases.append("_reserve")
                watch.reservation = Reservation(self, plan, watch.where())
                held = rules.PrefixHeld.of(self, watch.where())
                try:
                    kept = base(plan)
                finally:
                    reservation, watch.reservation = watch.reservation, None
                held.expect_kept(watch.where(), self, "during _reserve")
                kept = engine_reads.plan_of(kept, "what _reserve returned", watch.where())
                reservation.expect_outcome(watch.where(), self, kept)
                watch.kept = kept
                return kept

    return WatchedEngine


def _watched_step(engine, base, watch: Watch):
    """One step() of the learner's engine (``base``), its parts and prefix entries kept and its rules applied."""
    watch.engine = engine
    watch.phases, watch.kept = [], None
    watch.step_writes.clear()
    with blamed():  # the engine's parts, given to its constructor
        _expect_own_parts(engine, watch)
    held = rules.PrefixHeld.of(engine, watch.where())
    # What escapes step() and no phase's hook claimed: _forward (tested alone in check_engine's
    # batching part), _advance, and the _fork_samples and _finish it calls.
    with blamed(FORWARD, ADVANCE, FORK):
        # Read strictly: the check compares these outputs with the solo runs (plain lists of ints).
        finished = engine_reads.step_outputs(base(), watch.where())
    with blamed():
        _expect_own_parts(engine, watch)
    with blamed(ADVANCE, FORK):
        held.expect_kept(watch.where(), engine, "during step()")
    expect_step(engine, watch)
    watch.step += 1
    return finished
