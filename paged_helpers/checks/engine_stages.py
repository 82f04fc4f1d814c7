"""The engine of notebook 08 in stages: one small check per cell, before the end-to-end ones.

Each check builds the state it needs by hand (sequences placed in a small pool, a prompt left
in the prefix cache), calls one stage of the learner's engine, and holds it to the rules of
``engine_rules`` (the same functions ``check_engine`` applies on every step). No model runs:
each check takes milliseconds.

  check_engine_admission   EngineAdmission: add_request (refuse only what can never fit) and
                           _admit (queue order, evict to make room, undo, idle, prefix hits)
  check_engine_plan        EnginePlanner._plan: decoders, chunk size, token budget
  check_engine_reserve     EngineScheduler._reserve/_preempt: room, evict before preempting,
                           the newest as victim, the queue afterwards
  check_engine_fork        ContinuousBatchingEngine._fork_samples: n - 1 samples sharing blocks;
                           _finish: a request's samples reported by sample index
"""

from __future__ import annotations

from ..learner_view.access import transfer
from ..learner_view.remote import is_remote, remote_type
from ..serving import Sequence, sample_seed
from . import engine_rules as rules
from .engine_watch import Refused, Watch, build
from .report import CheckFailed, call_learner, check, fail
from .strict import learner_int, learner_list

__all__ = ["check_engine_admission", "check_engine_plan", "check_engine_reserve", "check_engine_fork"]

BLOCK_SIZE = 4
CHUNK_SIZE = 8
STEP_TOKENS = 24
NOTEBOOK = "08_continuous_batching"
PARTNERS = (("04_fork_and_copy_on_write", "PagedKVCache"), ("05_prefix_caching", "PrefixCache"))


def _tokens(start: int, count: int) -> list[int]:
    return list(range(start, start + count))


def _engine(engine_class, cache_class, prefix_class, num_blocks: int, scenario: str, **sizes):
    watch = Watch(scenario)
    chunk, budget = sizes.get("chunk_size", CHUNK_SIZE), sizes.get("max_step_tokens", STEP_TOKENS)
    return build(engine_class, cache_class, prefix_class, watch, num_blocks, BLOCK_SIZE, chunk, budget)


def _leave_in_prefix_cache(cache, prefix, seq_id: str, tokens: list[int]) -> None:
    """A finished request whose prompt's full blocks stay in the prefix cache (as after its prefill)."""
    reused = prefix.attach(seq_id, tokens)
    cache.reserve(seq_id, len(tokens) - reused)
    cache.lengths[seq_id] = len(tokens)  # as if the forward pass had written them
    prefix.remember(seq_id, tokens)
    cache.free(seq_id)


def _place(engine, seq: Sequence, computed: int) -> Sequence:
    """seq running, with its first ``computed`` tokens in the cache (as if a forward pass wrote them)."""
    cache = engine.cache
    seq = transfer(engine, seq)
    cache.create(seq.seq_id)
    cache.reserve(seq.seq_id, computed)
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
    name = remote_type(seq) if is_remote(seq) else type.__dict__["__name__"].__get__(type(seq))
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


def _admission_front_door(engine_class, cache_class, prefix_class) -> None:
    num_blocks = 9
    capacity = num_blocks * BLOCK_SIZE
    scenario = f"the front door, a pool of {num_blocks} blocks of {BLOCK_SIZE} ({capacity} tokens)"
    engine, cache, _ = _engine(engine_class, cache_class, prefix_class, num_blocks, scenario)
    _expect_refused(engine, scenario, "too_long", _tokens(1, capacity - 1), 2)
    _expect_accepted(engine, scenario, "exactly_the_pool", _tokens(1, capacity - 4), 4, seed=3)
    cache.create("busy")  # another request holds most of the pool now
    cache.reserve("busy", 6 * BLOCK_SIZE)
    _expect_accepted(engine, f"{scenario}, 6 blocks in use", "fits_later", _tokens(50, 20), 12, n=2, seed=7)


def _admission_queue(engine_class, cache_class, prefix_class) -> None:
    # 10 blocks: the spare 1% is 0 blocks rounded down and 1 rounded up, and the answer is the same
    # either way (the notebook accepts both readings): 'b' fits only by evicting 1 or 2 of the two
    # cached blocks nobody uses, and 'c' fits in neither.
    num_blocks = 10
    scenario = (
        f"admission in a pool of {num_blocks} blocks of {BLOCK_SIZE}: a 16-token prompt left in the prefix "
        "cache; waiting: 'a' (its first 8 tokens + 5), 'b' (20 new tokens), 'c' (its first 8 tokens + 16)"
    )
    engine, cache, prefix = _engine(engine_class, cache_class, prefix_class, num_blocks, scenario)
    cached = _tokens(100, 16)
    _leave_in_prefix_cache(cache, prefix, "earlier", cached)
    queue = (("a", cached[:8] + _tokens(200, 5)), ("b", _tokens(300, 20)), ("c", cached[:8] + _tokens(400, 16)))
    for request_id, prompt in queue:
        _expect_accepted(engine, scenario, request_id, prompt, 3)
    call_learner("_admit()", engine._admit, scenario=scenario)  # the watched _admit applies the rules
    admitted = rules.names(rules.queue(engine, "running", scenario), scenario)
    if admitted != ["a", "b"]:
        fail(
            f"{scenario}: admit while there is room",
            "['a', 'b'] admitted: 'a' reuses 8 cached tokens and needs 2 more blocks; 'b' needs 5, which fit "
            "once the cached blocks nobody uses are evicted, with the spare kept (1% of 10 blocks: 0 rounded "
            "down, 1 rounded up, either is accepted); 'c' (4 more) does not fit",
            admitted,
            "admit from the front while the free blocks, after _make_room evicts from the prefix cache, "
            "cover what the running prefills and this sequence still need plus the spare 1% of the pool; "
            "stop at the first that does not fit",
        )


def _admission_idle(engine_class, cache_class, prefix_class) -> None:
    num_blocks = 100
    capacity = num_blocks * BLOCK_SIZE
    scenario = (
        f"an idle engine, a pool of {num_blocks} blocks, 4 of them holding a cached prompt; waiting: one "
        f"request of exactly {capacity} tokens (the whole pool, no room left for a 1% spare)"
    )
    engine, cache, prefix = _engine(engine_class, cache_class, prefix_class, num_blocks, scenario)
    _leave_in_prefix_cache(cache, prefix, "earlier", _tokens(1000, 16))
    _expect_accepted(engine, scenario, "alone", _tokens(300, capacity - 1), 1)
    call_learner("_admit()", engine._admit, scenario=scenario)


def _admission_spare(engine_class, cache_class, prefix_class) -> None:
    num_blocks = 100
    scenario = (
        f"an idle engine, a pool of {num_blocks} blocks of {BLOCK_SIZE}; waiting: 'a' and 'b', prompts of 200 "
        "tokens (50 blocks each)"
    )
    engine, _, _ = _engine(engine_class, cache_class, prefix_class, num_blocks, scenario)
    _expect_accepted(engine, scenario, "a", _tokens(1, 200), 4)
    _expect_accepted(engine, scenario, "b", _tokens(300, 200), 4)
    call_learner("_admit()", engine._admit, scenario=scenario)  # the watched _admit applies the rules
    admitted = rules.names(rules.queue(engine, "running", scenario), scenario)
    if admitted != ["a"]:
        fail(
            f"{scenario}: admit only with room",
            "['a'] admitted: 'a' and 'b' need 100 blocks together, and 1 block (1% of the pool) stays spare",
            admitted,
            "count the running prefills' blocks, this sequence's, and the spare 1% of the pool",
        )


@check(notebook=NOTEBOOK, builds="EngineAdmission", partners=PARTNERS)
def check_engine_admission(engine_class, cache_class, prefix_cache_class) -> str:
    """add_request and _admit of the learner's EngineAdmission, on hand-built queues and pools."""
    for stage in (_admission_front_door, _admission_queue, _admission_idle, _admission_spare):
        stage(engine_class, cache_class, prefix_cache_class)
    return "4 scenarios (the front door, a queue with a cached prefix, an idle engine, the spare 1%)"


# ---------------------------------------------------------------- planning a step


def _plan_case(engine_class, cache_class, prefix_class, scenario, running, chunk_size, max_step_tokens) -> None:
    engine, _, _ = _engine(
        engine_class, cache_class, prefix_class, 8, scenario, chunk_size=chunk_size, max_step_tokens=max_step_tokens
    )
    running = [transfer(engine, seq) for seq in running]
    engine.running.extend(running)
    call_learner("_plan()", engine._plan, scenario=scenario)  # the watched _plan applies the rules


@check(notebook=NOTEBOOK, builds="EnginePlanner", partners=PARTNERS)
def check_engine_plan(engine_class, cache_class, prefix_cache_class) -> str:
    """_plan of the learner's EnginePlanner on hand-built running batches."""
    cases = [
        (
            "decoders d0, d2 and prefills p1 (20 pending), p3 (5), p4 (30), p5 (12); chunks of 8, 24 tokens a step",
            [
                _decoding("d0", 6, 2),
                _prefilling("p1", 20),
                _decoding("d2", 9, 1),
                _prefilling("p3", 9, cached=4),
                _prefilling("p4", 30),
                _prefilling("p5", 12),
            ],
            8,
            24,
        ),
        (
            "four decoders and a prefill; chunks of 8, 3 tokens a step (fewer than the decoders)",
            [_decoding(f"d{i}", 5, 1 + i) for i in range(4)] + [_prefilling("p", 10)],
            8,
            3,
        ),
        (
            "a sequence readmitted after preemption (prompt 6 + output 5, nothing cached) behind a decoder; "
            "chunks of 4, 16 tokens a step",
            [_decoding("d", 6, 3), _prefilling("back", 6, output=5)],
            4,
            16,
        ),
    ]
    for scenario, running, chunk, budget in cases:
        _plan_case(engine_class, cache_class, prefix_cache_class, scenario, running, chunk, budget)
    return f"{len(cases)} running batches"


# ---------------------------------------------------------------- reserve, evict, preempt


def _reserve_case(engine_class, cache_class, prefix_class, scenario, num_blocks, cached_prompt, placed, waiting):
    """Run the learner's _reserve on ``placed`` [(seq, computed, count)]; returns (engine, kept, victims)."""
    engine, cache, prefix = _engine(engine_class, cache_class, prefix_class, num_blocks, scenario)
    if cached_prompt:
        _leave_in_prefix_cache(cache, prefix, "earlier", cached_prompt)
    plan = [(_place(engine, seq, computed), count) for seq, computed, count in placed]
    waiting = [transfer(engine, seq) for seq in waiting]
    engine.waiting.extend(waiting)
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


@check(notebook=NOTEBOOK, builds="EngineScheduler", partners=PARTNERS)
def check_engine_reserve(engine_class, cache_class, prefix_cache_class) -> str:
    """_reserve and _preempt of the learner's EngineScheduler on hand-built pools."""
    cases = [
        (
            "room for everything: 16 blocks, 'a' prefilling 8 of 10 tokens, 'b' decoding at position 6",
            16,
            None,
            [(_prefilling("a", 10), 0, 8), (_decoding("b", 5, 2), 6, 1)],
            [],
            [],
        ),
        (
            "out of memory, a cached prompt nobody uses: 6 blocks, 2 of them cached, 'a' decoding at position 16",
            6,
            _tokens(100, 8),
            [(_decoding("a", 12, 5), 16, 1)],
            [],
            [],
        ),
        (
            "out of memory, nothing to evict: 8 blocks; 'a' decodes at 16, 'b' at 6, 'c' (newest) at 7; 'w' waits",
            8,
            None,
            [(_decoding("a", 12, 5), 16, 1), (_decoding("b", 5, 2, start=40), 6, 1), (_decoding("c", 6, 2), 7, 1)],
            [_prefilling("w", 5)],
            ["c"],
        ),
        (
            "the newest asks: 8 blocks; 'a' decodes at 16 (4 blocks), 'b' (newest) at 12 (3 blocks); 'w' waits",
            8,
            None,
            [(_decoding("a", 12, 5), 16, 1), (_decoding("b", 10, 3, start=40), 12, 1)],
            [_prefilling("w", 5)],
            ["b"],
        ),
    ]
    for scenario, num_blocks, cached, placed, waiting, expected in cases:
        victims = _reserve_case(
            engine_class, cache_class, prefix_cache_class, scenario, num_blocks, cached, placed, waiting
        )
        if victims != expected:
            fail(
                f"{scenario}: preemptions",
                f"preempted {expected}" + ("" if expected else " (none: reserve, evicting if needed, is enough)"),
                f"preempted {victims}",
                "preempt only when reserve raises MemoryError and the prefix cache has nothing left to evict, "
                "and then the newest running sequence, until the chunk fits",
            )
    return f"{len(cases)} pools"


# ---------------------------------------------------------------- sampling by fork


@check(notebook=NOTEBOOK, builds="ContinuousBatchingEngine", partners=PARTNERS)
def check_engine_fork(engine_class, cache_class, prefix_cache_class) -> str:
    """_fork_samples of the learner's engine: n - 1 samples sharing the parent's blocks."""
    n, seed = 3, 5
    scenario = f"forking a request with n={n}, seed {seed}, whose 10-token prompt was just prefilled"
    engine, cache, _ = _engine(engine_class, cache_class, prefix_cache_class, 16, scenario)
    other = _place(engine, _decoding("other", 5, 1, start=60), 5)
    parent = Sequence("r", "r", _tokens(1, 10), 4, n=n, seed=sample_seed(seed, 0), temperature=1.0)
    engine.request_seeds["r"] = seed
    engine.finished_samples["r"] = {}
    parent = _place(engine, parent, 10)
    table = rules.tables(cache, scenario)["r"]
    children = call_learner("_fork_samples(parent)", engine._fork_samples, parent, scenario=scenario)
    if children is not None:
        children = learner_list(children, "what _fork_samples returned", scenario, lambda item, _what, _scenario: item)
    children = children or []
    running = rules.queue(engine, "running", scenario)
    if len(children) != n - 1 or not rules.same(running, [other, parent, *children]):
        fail(
            f"{scenario}: running after the fork",
            f"{n - 1} new samples returned and appended to running: ['other', 'r', ...]",
            f"returned {len(children)}; running {[getattr(seq, 'seq_id', seq) for seq in running]}",
            "create the samples 1..n-1, append them to self.running (they are the newest) and return them",
        )
    for index, child in enumerate(children, start=1):
        expected = dict(
            request_id="r",
            prompt=parent.prompt,
            max_new_tokens=4,
            n=n,
            sample_index=index,
            seed=sample_seed(seed, index),
            temperature=1.0,
            output=[],
            num_cached=10,
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
        if tables.get(sid) != table or lengths.get(sid) != 10:
            fail(
                f"{scenario}: sample {index} in the cache",
                f"a fork of 'r': table {table}, length 10",
                f"table {tables.get(sid)}, length {lengths.get(sid)}",
                "cache.fork(parent.seq_id, child.seq_id) shares the prompt's blocks: no copy, no recomputation",
            )
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
    _finish_out_of_order(engine_class, cache_class, prefix_cache_class)
    return f"{n} samples sharing {len(table)} blocks; a request whose samples finish out of order"


def _finish_out_of_order(engine_class, cache_class, prefix_cache_class) -> None:
    """_finish reports a request's samples by sample index, whatever order they finish in.

    In the notebook's engine a request's samples usually finish together, in index order, so served
    workloads cannot tell a report in finishing order from one by index: here they finish one per
    step, sample 2 first."""
    n, max_new, order = 3, 2, (2, 0, 1)
    scenario = (
        f"a request with n={n} whose samples finish in three steps, in the order {list(order)} "
        "(_finish called once per sample, with that step's `finished` dict)"
    )
    engine, _, _ = _engine(engine_class, cache_class, prefix_cache_class, 16, scenario)
    prompt = _tokens(1, 6)
    what = f"add_request('s', prompt, {max_new}, n={n}, seed=5, temperature=1.0)"
    call_learner(what, engine.add_request, "s", prompt, max_new, n, 5, 1.0, scenario=scenario)
    waiting = rules.queue(engine, "waiting", scenario)
    parent = waiting[0]
    engine.waiting.remove(parent)
    parent = _place(engine, parent, len(prompt))
    children = call_learner("_fork_samples(parent)", engine._fork_samples, parent, scenario=scenario)
    samples = [parent, *learner_list(children, "what _fork_samples returned", scenario, lambda item, _w, _s: item)]
    outputs = [[200 + 10 * index, 201 + 10 * index] for index in range(n)]
    for sample, tokens in zip(samples, outputs, strict=True):
        sample.output = list(tokens)  # as if decoded: max_new_tokens each, so each sample is finished
    reported = []
    for index in order:
        finished: dict = {}
        call_learner(f"_finish(sample {index}, finished)", engine._finish, samples[index], finished, scenario=scenario)
        reported.append(rules.step_outputs(finished, scenario))
    expected = [{}, {}, {"s": outputs}]
    if reported != expected:
        in_order = [outputs[index] for index in order]
        bug = (
            " (reported in the order the samples finished, not by sample index)"
            if reported[-1] == {"s": in_order}
            else ""
        )
        fail(
            f"{scenario}: what _finish reported",
            f"nothing until the last sample finishes, then {{'s': {outputs}}}: the outputs of samples 0, 1, 2, "
            "in that order",
            f"step by step: {reported}{bug}",
            "a request's result lists its samples by sample_index (0 .. n - 1), whatever order they finished in: "
            "keep each output under its index (finished_samples[request_id][seq.sample_index]) and build the "
            "list from indices 0 .. n - 1 once all n are in",
        )
