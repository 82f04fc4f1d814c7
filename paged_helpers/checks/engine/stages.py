"""The engine of notebook 08 in stages: one small check per cell, before the end-to-end ones.

Each check builds the state it needs by hand (sequences placed in a small pool, a prompt left
in the prefix cache), calls one stage of the learner's engine, and holds it to the rules of
``rules`` (the same functions ``check_engine`` applies on every step). No model runs:
each check takes milliseconds.

  check_engine_admission   EngineAdmission: add_request (refuse only what can never fit) and
                           _admit (queue order, evict to make room, undo, idle, prefix hits)
  check_engine_plan        EnginePlanner._plan: decoders, chunk size, token budget
  check_engine_reserve     EngineScheduler._reserve/_preempt: room, evict before preempting,
                           the newest as victim, the queue afterwards
  check_engine_fork        ContinuousBatchingEngine._fork_samples: n - 1 samples sharing blocks,
                           returned; _finish: a request's samples reported by sample index

Each scenario is a small frozen dataclass: its sizes, ``draw(rng)`` (the hidden tests' sizes,
drawn from the grader's seed, always a scenario every correct engine passes) and ``run``. The
visible calls run the ``VISIBLE_*`` instances; ``hidden=True`` runs every kind of the check's
``*_KINDS`` drawn from ``seed`` (a ``Story``'s hidden kinds: messages without numbers). A draw
never makes a kind smaller or easier: how many requests, sequences and samples a scenario holds is
fixed at the largest the kind runs (``QUEUE_REQUESTS``, ``BATCH_SEQUENCES``, ``POOL_SEQUENCES``,
``Fork.draw``, ``FinishOrder.draw``), and what a kind is named for (eviction, a preemption, every kind
of sequence in a batch, a chunk that needs a new block) is in every draw; the seed picks the rest.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace

from ...serving import Sequence, sample_seed
from ..reading.calls import call_learner
from ..reading.learner_code import class_name, transfer
from ..reading.ledger import ceil_div
from ..reading.strict import learner_int, learner_list
from ..registry import check
from ..speaking.failure import CheckFailed, fail
from ..speaking.hidden import redraw_until
from ..story import Story, drawn, ran
from . import rules
from .watch import Refused, Watch, build

__all__ = ["check_engine_admission", "check_engine_plan", "check_engine_reserve", "check_engine_fork"]

BLOCK_SIZE = 4
CHUNK_SIZE = 8
STEP_TOKENS = 24
NOTEBOOK = "08_continuous_batching"
PARTNERS = (("04_fork_and_copy_on_write", "PagedKVCache"), ("05_prefix_caching", "PrefixCache"))


def _tokens(start: int, count: int) -> list[int]:
    return list(range(start, start + count))


# The stages are set up on the learner's own notebook 04 and 05 classes: a failure there names them.
SETTING_UP = "setting up the scenario with your PagedKVCache (notebook 04) and PrefixCache (notebook 05)"


def _engine(engine_class, cache_class, prefix_class, num_blocks: int, scenario: str, **sizes):
    watch = Watch(scenario)
    chunk, budget = sizes.get("chunk_size", CHUNK_SIZE), sizes.get("max_step_tokens", STEP_TOKENS)
    return build(engine_class, cache_class, prefix_class, watch, num_blocks, BLOCK_SIZE, chunk, budget)


def _leave_in_prefix_cache(cache, prefix, seq_id: str, tokens: list[int]) -> None:
    """A finished request whose prompt's full blocks stay in the prefix cache (as after its prefill)."""
    reused = learner_int(
        call_learner(f"prefix_cache.attach({seq_id!r}, ...)", prefix.attach, seq_id, tokens, scenario=SETTING_UP),
        f"prefix_cache.attach({seq_id!r}, ...)",
        SETTING_UP,
    )
    call_learner(f"cache.reserve({seq_id!r}, ...)", cache.reserve, seq_id, len(tokens) - reused, scenario=SETTING_UP)
    cache.lengths[seq_id] = len(tokens)  # as if the forward pass had written them
    call_learner(f"prefix_cache.remember({seq_id!r}, ...)", prefix.remember, seq_id, tokens, scenario=SETTING_UP)
    call_learner(f"cache.free({seq_id!r})", cache.free, seq_id, scenario=SETTING_UP)


def _place(engine, seq: Sequence, computed: int) -> Sequence:
    """seq running, with its first ``computed`` tokens in the cache (as if a forward pass wrote them)."""
    cache = engine.cache
    seq = transfer(engine, seq)
    call_learner(f"cache.create({seq.seq_id!r})", cache.create, seq.seq_id, scenario=SETTING_UP)
    call_learner(f"cache.reserve({seq.seq_id!r}, {computed})", cache.reserve, seq.seq_id, computed, scenario=SETTING_UP)
    cache.lengths[seq.seq_id] = computed
    seq.num_cached = computed
    engine.running.append(seq)
    return seq


def _decoding(seq_id: str, prompt: int, output: int, start: int = 1) -> Sequence:
    """A sequence in decode: prompt and output known, all but the last sampled token cached."""
    seq = Sequence(seq_id, seq_id, _tokens(start, prompt), max_new_tokens=output + 8, output=_tokens(900, output))
    seq.num_cached = prompt + output - 1
    return seq


def _prefilling(seq_id: str, prompt: int, cached: int = 0, output: int = 0, start: int = 1) -> Sequence:
    seq = Sequence(seq_id, seq_id, _tokens(start, prompt), max_new_tokens=output + 8, output=_tokens(900, output))
    seq.num_cached = cached
    return seq


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


def _expect_refused(engine, scenario: str, request_id: str, prompt: list[int], max_new: int) -> None:
    waiting = rules.queue(engine, "waiting", scenario)
    if _add_request(engine, scenario, request_id, prompt, max_new) is None:
        pool = len(rules.pool_refs(engine.cache, scenario))
        fail(
            f"{scenario}: add_request({request_id!r}) of {len(prompt)} + {max_new} tokens in a pool of {pool} blocks",
            "ValueError at once: the request can never fit, even alone in an empty pool",
            "the request was accepted (serving it would preempt everyone else forever)",
            "compare cache.blocks_needed(len(prompt) + max_new_tokens) with the pool's size, before queueing",
        )
    now = rules.queue(engine, "waiting", scenario)
    if not rules.same(now, waiting):
        fail(
            f"{scenario}: after refusing {request_id!r}",
            f"waiting unchanged: {rules.names(waiting)}",
            f"waiting {[getattr(seq, 'seq_id', seq) for seq in now]}",
            "validate before appending to the queue: a refused request leaves no trace",
        )


def _expect_accepted(engine, scenario: str, request_id: str, prompt, max_new, n=1, seed=0, temperature=0.0):
    free = rules.num_free(engine.cache, scenario)
    error = _add_request(engine, scenario, request_id, prompt, max_new, n, seed, temperature)
    if error is not None:
        fail(
            f"{scenario}: refuse only requests that can never fit: add_request({request_id!r}) of "
            f"{len(prompt) + max_new} tokens, {free} block(s) free",
            f"accepted: it needs {engine.cache.blocks_needed(len(prompt) + max_new)} blocks and the pool has "
            f"{len(rules.pool_refs(engine.cache, scenario))}",
            f"ValueError: {error}",
            "compare with the whole pool (len(cache.allocator.refs)), not with the free blocks of the moment: "
            "room is made later, by waiting, eviction and preemption",
        )
    waiting = rules.queue(engine, "waiting", scenario)
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
        got = rules.fields(seq, expected, scenario)
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
        engine, cache, _ = _engine(*classes, self.num_blocks, scenario)
        _expect_refused(engine, scenario, "too_long", _tokens(1, self.too_long[0]), self.too_long[1])
        _expect_accepted(engine, scenario, "exactly_the_pool", _tokens(1, self.exact[0]), self.exact[1], seed=3)
        # another request holds most of the pool now
        call_learner("cache.create('busy')", cache.create, "busy", scenario=SETTING_UP)
        busy_tokens = self.busy_blocks * BLOCK_SIZE
        call_learner(f"cache.reserve('busy', {busy_tokens})", cache.reserve, "busy", busy_tokens, scenario=SETTING_UP)
        _expect_accepted(
            engine,
            f"{scenario}, {self.busy_blocks} blocks in use",
            "fits_later",
            _tokens(50, self.later[0]),
            self.later[1],
            n=self.n,
            seed=self.seed,
            temperature=self.temperature,
        )


def _split(rng: random.Random, total: int) -> tuple[int, int]:
    """``total`` tokens as (prompt, max_new_tokens), both at least 1."""
    max_new = rng.randint(1, min(total - 1, 3 * BLOCK_SIZE))
    return total - max_new, max_new


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
        opening = _tokens(100, self.shared_blocks * BLOCK_SIZE) if shares else []
        return opening + _tokens(start, new)

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
        engine, cache, prefix = _engine(*classes, self.num_blocks, scenario)
        _leave_in_prefix_cache(cache, prefix, "earlier", _tokens(100, self.cached_blocks * BLOCK_SIZE))
        for number, (request_id, shares, new) in enumerate(self.requests):
            prompt = self.prompt(shares, new, 200 + 100 * number)
            _expect_accepted(engine, scenario, request_id, prompt, QUEUE_MAX_NEW)
        call_learner("_admit()", engine._admit, scenario=scenario)  # the watched _admit applies the rules
        admitted = rules.names(rules.queue(engine, "running", scenario), scenario)
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


# 10 blocks: the spare 1% is 0 blocks rounded down and 1 rounded up, and the answer is the same either
# way: 'b' fits only by evicting 1 or 2 of the two cached blocks nobody uses, and 'c' fits in neither.
VISIBLE_QUEUE = Queue(10, 4, 2, (("a", True, 5), ("b", False, 20), ("c", True, 16)))


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
        engine, cache, prefix = _engine(*classes, self.num_blocks, scenario)
        _leave_in_prefix_cache(cache, prefix, "earlier", _tokens(1000, self.cached_blocks * BLOCK_SIZE))
        _expect_accepted(engine, scenario, "alone", _tokens(3000, capacity - self.max_new), self.max_new)
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
        engine, _, _ = _engine(*classes, self.num_blocks, scenario)
        _expect_accepted(engine, scenario, "a", _tokens(1, self.first), 4)
        _expect_accepted(engine, scenario, "b", _tokens(5000, self.second), 4)
        call_learner("_admit()", engine._admit, scenario=scenario)  # the watched _admit applies the rules
        admitted = rules.names(rules.queue(engine, "running", scenario), scenario)
        if admitted != ["a"]:
            fail(
                f"{scenario}: admit only with room",
                f"['a'] admitted: 'a' and 'b' need {sum(blocks)} blocks together, and {spare} block(s) (1% of the "
                "pool) stay spare",
                admitted,
                "count the running prefills' blocks, this sequence's, and the spare 1% of the pool",
            )


VISIBLE_ADMISSION = (
    FrontDoor(9, (9 * BLOCK_SIZE - 1, 2), (9 * BLOCK_SIZE - 4, 4), 6, (20, 12), 2, 7, 0.0),
    VISIBLE_QUEUE,
    Idle(100, 4, 1),
    Spare(100, 200, 200),
)
ADMISSION_KINDS = {
    "the front door: a request too long for the pool, one of exactly the pool, one that fits later": FrontDoor.draw,
    "a queue behind a cached prompt: admission in order, eviction, the first that does not fit": Queue.draw,
    "an idle engine admitting a request of the whole pool": Idle.draw,
    "two prompts that fill the pool but leave less than its 1% spare": Spare.draw,
}


@check(notebook=NOTEBOOK, builds="EngineAdmission", partners=PARTNERS)
def check_engine_admission(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False):
    """add_request and _admit of the learner's EngineAdmission, on hand-built queues and pools.

    ``hidden=True`` (the hidden tests) runs every kind of ``ADMISSION_KINDS`` with sizes drawn from
    ``seed``, and names none of their numbers.
    """
    return _story(VISIBLE_ADMISSION, ADMISSION_KINDS, ADMISSION_TOLD).tell(
        (engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden
    )


ADMISSION_TOLD = "4 scenarios (the front door, a queue with a cached prefix, an idle engine, the spare 1%)"


def _story(visible: tuple, kinds: dict, told: str) -> Story:
    """A stage's story: its visible cases played in order; each hidden kind a case drawn from the seed.
    Every case plays on ``classes``, the learner's (engine, cache, prefix cache)."""
    return Story(
        visible=tuple(ran(case) for case in visible),
        hidden={description: drawn(draw) for description, draw in kinds.items()},
        told=told,
    )


# ---------------------------------------------------------------- planning a step


BATCH_SEQUENCES = 8  # sequences in every hidden batch (fixed, not drawn: the most a batch ever held)


@dataclass(frozen=True)
class Batch:
    """_plan on a running batch: (kind, prompt, cached or output) per sequence, oldest first.

    Kinds: "decode" (prompt and ``extra`` output tokens, all but the last cached), "prefill" (``extra``
    prompt tokens cached), "back" (readmitted after preemption: ``extra`` output tokens, nothing cached).
    Planning allocates nothing, so any batch is a fair one.
    """

    description: str
    sequences: tuple[tuple[str, int, int], ...]
    chunk_size: int
    max_step_tokens: int

    @classmethod
    def draw(cls, rng: random.Random) -> Batch:
        """A batch of ``BATCH_SEQUENCES`` holding every kind of sequence, on which each classic planning
        mistake plans otherwise (``telling``)."""
        every_kind = {"decode", "prefill", "back"}
        return redraw_until(
            functools.partial(cls._draw, rng),
            lambda batch: batch.telling() and {kind for kind, _, _ in batch.sequences} == every_kind,
        )

    @classmethod
    def _draw(cls, rng: random.Random) -> Batch:
        sequences = []
        for _ in range(BATCH_SEQUENCES):
            kind = rng.choice(("decode", "decode", "prefill", "prefill", "back"))
            prompt = rng.randint(2, 40)
            extra = {"decode": rng.randint(1, 6), "prefill": rng.randint(0, prompt - 2), "back": rng.randint(1, 6)}
            sequences.append((kind, prompt, extra[kind]))
        return cls("a running batch", tuple(sequences), rng.randint(1, 16), rng.randint(1, 48))

    def pending(self) -> list[int]:
        return [
            1 if kind == "decode" else prompt - extra if kind == "prefill" else prompt + extra
            for kind, prompt, extra in self.sequences
        ]

    def counts(self, oldest_first=True, chunks=True, budget=True, decoders_first=True) -> list[int]:
        """Tokens per sequence as the rules plan them, or with the named rule left out."""
        pending, counts = self.pending(), [0] * len(self.sequences)
        left = self.max_step_tokens if budget else 10**9
        if decoders_first:
            for i, p in enumerate(pending):
                if p == 1:
                    counts[i], left = 1, left - 1
        order = range(len(pending)) if oldest_first else reversed(range(len(pending)))
        for i in order:
            if pending[i] > 1 and left > 0:
                counts[i] = min(self.chunk_size if chunks else 10**9, pending[i], left)
                left -= counts[i]
        if not decoders_first:
            for i, p in enumerate(pending):
                if p == 1 and left > 0:
                    counts[i], left = 1, left - 1
        return counts

    def telling(self) -> bool:
        """Newest-first, no chunk size, no budget, prefills before decoders: each plans otherwise here."""
        right = self.counts()
        wrong = [dict(oldest_first=False), dict(chunks=False), dict(budget=False), dict(decoders_first=False)]
        return all(self.counts(**mistake) != right for mistake in wrong)

    def running(self) -> list[Sequence]:
        made = []
        for index, (kind, prompt, extra) in enumerate(self.sequences):
            sid, start = f"{kind[0]}{index}", 1 + 64 * index
            if kind == "decode":
                made.append(_decoding(sid, prompt, extra, start=start))
            elif kind == "prefill":
                made.append(_prefilling(sid, prompt, cached=extra, start=start))
            else:
                made.append(_prefilling(sid, prompt, output=extra, start=start))
        return made

    def run(self, classes) -> None:
        scenario = f"{self.description}; chunks of {self.chunk_size}, {self.max_step_tokens} tokens a step"
        engine, _, _ = _engine(*classes, 8, scenario, chunk_size=self.chunk_size, max_step_tokens=self.max_step_tokens)
        engine.running.extend(transfer(engine, seq) for seq in self.running())
        call_learner("_plan()", engine._plan, scenario=scenario)  # the watched _plan applies the rules


VISIBLE_BATCHES = (
    Batch(
        "decoders d0, d2 and prefills p1 (20 pending), p3 (5), p4 (30), p5 (12)",
        (
            ("decode", 6, 2),
            ("prefill", 20, 0),
            ("decode", 9, 1),
            ("prefill", 9, 4),
            ("prefill", 30, 0),
            ("prefill", 12, 0),
        ),
        8,
        24,
    ),
    Batch(
        "four decoders and a prefill (3 tokens a step: fewer than the decoders)",
        (("decode", 5, 1), ("decode", 5, 2), ("decode", 5, 3), ("decode", 5, 4), ("prefill", 10, 0)),
        8,
        3,
    ),
    Batch(
        "a sequence readmitted after preemption (prompt 6 + output 5, nothing cached) behind a decoder",
        (("decode", 6, 3), ("back", 6, 5)),
        4,
        16,
    ),
)
PLAN_KINDS = {
    "a running batch of decoders, prefills and readmitted sequences": Batch.draw,
    "another running batch, with its own chunk size and budget": Batch.draw,
}


@check(notebook=NOTEBOOK, builds="EnginePlanner", partners=PARTNERS)
def check_engine_plan(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False) -> str:
    """_plan of the learner's EnginePlanner on hand-built running batches.

    ``hidden=True`` (the hidden tests): batches, chunk sizes and budgets drawn from ``seed``.
    """
    story = _story(VISIBLE_BATCHES, PLAN_KINDS, f"{len(VISIBLE_BATCHES)} running batches")
    return story.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)


# ---------------------------------------------------------------- reserve, evict, preempt


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
                _decoding(sid, prompt, extra, start=start)
                if kind == "decode"
                else _prefilling(sid, prompt, cached=extra, start=start)
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
            _tokens(3000, self.cached_blocks * BLOCK_SIZE) if self.cached_blocks else None,
            self.sequences(),
            [_prefilling("w", 5, start=4000)] if self.waiting else [],
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
    engine, cache, prefix = _engine(*classes, num_blocks, scenario)
    if cached_prompt:
        _leave_in_prefix_cache(cache, prefix, "earlier", cached_prompt)
    plan = [(_place(engine, seq, computed), count) for seq, computed, count in placed]
    engine.waiting.extend(transfer(engine, seq) for seq in waiting)
    running = rules.queue(engine, "running", scenario)
    kept = call_learner("_reserve(plan)", engine._reserve, plan, scenario=scenario)  # watched: applies the rules
    for seq, count in rules.plan_of(kept, "what _reserve returned", scenario):
        sid = rules.seq_id(seq, scenario)
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
    still = rules.queue(engine, "running", scenario)
    victims = [seq for seq in running if not any(seq is s for s in still)]
    counted = rules.metric(engine, "preemptions", scenario)
    if counted != len(victims):
        fail(
            f"{scenario}: metrics",
            f"metrics.preemptions == {len(victims)} (preempted: {rules.names(victims)})",
            counted,
            "call self.metrics.record_preemption(seq) once in each preemption",
        )
    return rules.names(victims, scenario)


VISIBLE_POOLS = (
    Pool(
        "room for everything: 16 blocks, 'a' prefilling 8 of 10 tokens, 'b' decoding at position 6",
        16,
        0,
        (("a", "prefill", 10, 0, 8), ("b", "decode", 5, 2, 1)),
        False,
    ),
    Pool(
        "out of memory, a cached prompt nobody uses: 6 blocks, 2 of them cached, 'a' decoding at position 16",
        6,
        2,
        (("a", "decode", 12, 5, 1),),
        False,
    ),
    Pool(
        "out of memory, nothing to evict: 8 blocks; 'a' decodes at 16, 'b' at 6, 'c' (newest) at 7; 'w' waits",
        8,
        0,
        (("a", "decode", 12, 5, 1), ("b", "decode", 5, 2, 1), ("c", "decode", 6, 2, 1)),
        True,
    ),
    Pool(
        "the newest asks: 8 blocks; 'a' decodes at 16 (4 blocks), 'b' (newest) at 12 (3 blocks); 'w' waits",
        8,
        0,
        (("a", "decode", 12, 5, 1), ("b", "decode", 10, 3, 1)),
        True,
    ),
)
RESERVE_KINDS = {
    "a pool with room for every planned chunk": functools.partial(Pool.draw, want="room"),
    "a pool that runs short, where evicting the cached prompt is enough": functools.partial(Pool.draw, want="evict"),
    "a pool that runs short with several sequences running: someone is preempted": functools.partial(
        Pool.draw, want="preempt"
    ),
}


@check(notebook=NOTEBOOK, builds="EngineScheduler", partners=PARTNERS)
def check_engine_reserve(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False):
    """_reserve and _preempt of the learner's EngineScheduler on hand-built pools.

    ``hidden=True`` (the hidden tests): pools, sequences and plans drawn from ``seed``, the expected
    preemptions worked out from the blocks (``Pool.victims``).
    """
    story = _story(VISIBLE_POOLS, RESERVE_KINDS, f"{len(VISIBLE_POOLS)} pools")
    return story.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)


# ---------------------------------------------------------------- sampling by fork


@dataclass(frozen=True)
class Fork:
    """_fork_samples on a request of ``n`` samples whose ``prompt``-token prompt was just prefilled,
    behind ``others`` decoding sequences of other requests."""

    n: int
    seed: int
    prompt: int
    max_new: int
    temperature: float
    others: int

    @classmethod
    def draw(cls, rng: random.Random) -> Fork:
        """A request of 6 samples behind 2 other sequences (fixed, not drawn: the most a fork ever had)."""
        return cls(6, rng.getrandbits(31), rng.randint(2, 24), rng.randint(1, 8), rng.choice((0.5, 1.0)), 2)

    def run(self, classes) -> None:
        n, seed, length = self.n, self.seed, self.prompt
        scenario = f"forking a request with n={n}, seed {seed}, whose {length}-token prompt was just prefilled"
        engine, cache, _ = _engine(*classes, ceil_div(length, BLOCK_SIZE) + 2 * self.others + 4, scenario)
        others = [_place(engine, _decoding(f"other{i}", 5, 1, start=60 + 10 * i), 5) for i in range(self.others)]
        parent = Sequence(
            "r", "r", _tokens(1, length), self.max_new, n=n, seed=sample_seed(seed, 0), temperature=self.temperature
        )
        engine.request_seeds["r"] = seed
        engine.finished_samples["r"] = {}
        parent = _place(engine, parent, length)
        table = rules.tables(cache, scenario)["r"]
        children = call_learner("_fork_samples(parent)", engine._fork_samples, parent, scenario=scenario)
        if children is not None:
            children = learner_list(children, "what _fork_samples returned", scenario, _as_is)
        children = children or []
        running = rules.queue(engine, "running", scenario)
        if len(children) != n - 1 or not rules.same(running, [*others, parent, *children]):
            fail(
                f"{scenario}: running after the fork",
                f"{n - 1} new samples returned and appended to running: {rules.names(others) + ['r']} + the samples",
                f"returned {len(children)}; running {[getattr(seq, 'seq_id', seq) for seq in running]}",
                "create the samples 1..n-1, append them to self.running (they are the newest) and return them: "
                "_advance draws a first token for each sample _fork_samples returns",
            )
        for index, child in enumerate(children, start=1):
            self.expect_sample(scenario, cache, parent, children, index, child, table)
        pool = rules.pool_refs(cache, scenario)
        refs = [pool[block] for block in table]
        forked = rules.fields(parent, ["forked"], scenario)["forked"]
        if refs != [n] * len(table) or forked is not True:  # "(missing)" is no fork
            fail(
                f"{scenario}: the prompt's blocks after the fork",
                f"reference count {n} on each of {table} (parent + {n - 1} samples), parent.forked True",
                f"counts {refs}, parent.forked {forked}",
                "fork each sample once through cache.fork, and mark the parent forked so it is not forked again",
            )

    def expect_sample(self, scenario, cache, parent, children, index, child, table) -> None:
        expected = dict(
            request_id="r",
            prompt=_tokens(1, self.prompt),
            max_new_tokens=self.max_new,
            n=self.n,
            sample_index=index,
            seed=sample_seed(self.seed, index),
            temperature=self.temperature,
            output=[],
            num_cached=self.prompt,
            forked=True,
        )
        got = rules.fields(child, expected, scenario)
        if got != expected:
            wrong = [name for name in expected if got[name] != expected[name]]
            fail(
                f"{scenario}: sample {index}",
                expected,
                got,
                f"wrong: {wrong}. Sample i is a new Sequence of the same request with sample_index=i, its own "
                "seed sample_seed(self.request_seeds[request_id], i), the parent's num_cached and forked=True",
            )
        others = ["r", *[rules.seq_id(c, scenario) for c in children if c is not child]]
        sid = rules.seq_id(child, scenario)
        if child.output is parent.output or sid in others:
            fail(
                f"{scenario}: sample {index}",
                "a sequence of its own: a distinct seq_id and its own output list",
                f"seq_id {sid!r}, output shared with the parent: {child.output is parent.output}",
                "build a new Sequence (copy.copy(parent) shares the output list, so every sample would append "
                "to the same tokens), with a seq_id such as f'{request_id}/{i}'",
            )
        tables, lengths = rules.tables(cache, scenario), rules.lengths(cache, scenario)
        if tables.get(sid) != table or lengths.get(sid) != self.prompt:
            fail(
                f"{scenario}: sample {index} in the cache",
                f"a fork of 'r': table {table}, length {self.prompt}",
                f"table {tables.get(sid)}, length {lengths.get(sid)}",
                "cache.fork(parent.seq_id, child.seq_id) shares the prompt's blocks: no copy, no recomputation",
            )


def _as_is(item, _what, _scenario):
    return item


@dataclass(frozen=True)
class FinishOrder:
    """_finish on the ``n`` samples of one request, finishing one per step in ``order``.

    In the notebook's engine a request's samples usually finish together, in index order, so served
    workloads cannot tell a report in finishing order from one by index: here they finish apart.
    """

    n: int
    order: tuple[int, ...]
    max_new: int

    @classmethod
    def draw(cls, rng: random.Random) -> FinishOrder:
        """6 samples (fixed, not drawn: the most a request ever had), finishing in a drawn order other than
        by index."""
        n = 6
        order = list(range(n))

        def shuffled() -> tuple[int, ...]:
            rng.shuffle(order)
            return tuple(order)

        return cls(n, redraw_until(shuffled, lambda drawn: list(drawn) != sorted(drawn)), rng.randint(1, 4))

    def run(self, classes) -> None:
        n, max_new, order = self.n, self.max_new, self.order
        scenario = (
            f"a request with n={n} whose samples finish in {n} steps, in the order {list(order)} "
            "(_finish called once per sample, with that step's `finished` dict)"
        )
        engine, _, _ = _engine(*classes, 16 + n, scenario)
        prompt = _tokens(1, 6)
        what = f"add_request('s', prompt, {max_new}, n={n}, seed=5, temperature=1.0)"
        call_learner(what, engine.add_request, "s", prompt, max_new, n, 5, 1.0, scenario=scenario)
        waiting = rules.queue(engine, "waiting", scenario)
        parent = waiting[0]
        engine.waiting.remove(parent)
        parent = _place(engine, parent, len(prompt))
        children = call_learner("_fork_samples(parent)", engine._fork_samples, parent, scenario=scenario)
        samples = [parent, *learner_list(children, "what _fork_samples returned", scenario, _as_is)]
        outputs = [[200 + 10 * index + step for step in range(max_new)] for index in range(n)]
        for sample, tokens in zip(samples, outputs, strict=True):
            sample.output = list(tokens)  # as if decoded: max_new_tokens each, so each sample is finished
        reported = []
        for index in order:
            finished: dict = {}
            call_learner(
                f"_finish(sample {index}, finished)", engine._finish, samples[index], finished, scenario=scenario
            )
            reported.append(rules.step_outputs(finished, scenario))
        expected = [{}] * (n - 1) + [{"s": outputs}]
        if reported != expected:
            in_order = [outputs[index] for index in order]
            bug = (
                " (reported in the order the samples finished, not by sample index)"
                if reported[-1] == {"s": in_order}
                else ""
            )
            fail(
                f"{scenario}: what _finish reported",
                f"nothing until the last sample finishes, then {{'s': {outputs}}}: the outputs of samples "
                f"0 .. {n - 1}, in that order",
                f"step by step: {reported}{bug}",
                "a request's result lists its samples by sample_index (0 .. n - 1), whatever order they finished "
                "in: keep each output under its index (finished_samples[request_id][seq.sample_index]) and build "
                "the list from indices 0 .. n - 1 once all n are in",
            )


VISIBLE_FORKS = (Fork(3, 5, 10, 4, 1.0, 1), FinishOrder(3, (2, 0, 1), 2))
FORK_KINDS = {
    "forking a request whose prompt was just prefilled": Fork.draw,
    "a request whose samples finish out of order": FinishOrder.draw,
}


@check(notebook=NOTEBOOK, builds="ContinuousBatchingEngine", partners=PARTNERS)
def check_engine_fork(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False) -> str:
    """_fork_samples of the learner's engine: n - 1 samples sharing the parent's blocks, returned; _finish
    reporting a request's samples by index.

    ``hidden=True`` (the hidden tests): requests, seeds and finishing orders drawn from ``seed``.
    """
    fork = VISIBLE_FORKS[0]
    shared = ceil_div(fork.prompt, BLOCK_SIZE)
    told = f"{fork.n} samples sharing {shared} blocks; a request whose samples finish out of order"
    story = _story(VISIBLE_FORKS, FORK_KINDS, told)
    return story.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)
