"""check_engine: notebook 08's continuous-batching engine on the learner's paged cache, end to end.

The check serves small seeded workloads with the tiny model and compares against each
request run alone (``serving.solo_run``). Greedy outputs do not depend on the schedule, so
it also watches the schedule (``watch``): subclasses of the learner's engine, cache and
prefix cache that change nothing, record every phase of every step, and stop the run at the
first broken rule of ``rules`` (admission order, room, undo, prefix hits that stick;
every decoder in every plan, chunk size, token budget; evict before preempting, the newest as
victim, back at the front of the queue; no eviction of a block in use), and at the first write
at the wrong positions or into a block not reserved, or shared, before the forward pass.

It scores only what no stage check scores (CONTRIBUTING, "How points are set", rule 2): every rule
it applies names the stages whose methods could break it (``blame``), and a part that fails first
runs those stages' own checks (``attribution``); if one fails too, the bug is that stage's, already
scored in its cell, and the part passes with a note that says so and that the whole engine was not
proven. What is left is what only the whole engine shows: ``_forward``, which no stage runs (tested
alone first, ``forward``), the step loop, and the stages working together.

Parts (``parts=``), each a separate graded cell in the notebook (the stage checks in
``stages`` come before them):

  batching     ``_forward`` alone on two plans the check makes (``forward``); then two bursts of
               four requests, chunked prefill competing for the step's budget with decoders,
               prefix hits; outputs equal solo runs; every block back on the free list afterwards
  preemption   a pool too small for the whole batch: preemption must happen, be counted in
               the metrics, stay under two per request, and the outputs still equal solo
               runs; then a workload where only eviction lets the oldest (only) request go on
  rejection    a request that can never fit is refused by add_request (ValueError); one that
               exactly fits the pool is accepted while another runs, and served
  sampling     n = 4 seeded samples: one prefill, n - 1 forks, distinct samples, each equal to
               its solo run with its own seed, and the same seed gives the same samples

Hidden scenarios (``hidden=True``, the grader's seed): each part's workload with its token ids
relabelled by a permutation of the vocabulary drawn from the seed (``Relabelled``), and the
sampling request's seed drawn too (its ``n`` is ``HIDDEN_SAMPLES`` in every draw). A permutation
keeps every equality between tokens, so every shared prefix, every length, and with them every
admission, plan, eviction and preemption are those of the visible workload, which any correct engine
serves (its decisions depend on lengths and on which prefixes are equal, never on token values); the
outputs, and so the expected answers, are new. Whatever the seed, a hidden call serves each part
it names at its visible workload's full size. A hidden failure is excused as a visible one is, and its
note names no number of the hidden workload.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections import Counter
from collections.abc import Iterator

from ...model import tiny_config
from ...serving import EngineStalled, Serving, one_thread, sample_seed, solo_run
from ...workloads import Request, serving_workload
from ..reading.calls import call_learner
from ..reading.strict import learner_bool
from ..registry import check
from ..speaking.failure import CheckFailed, NotImplementedYet, fail
from ..speaking.failure import Refused as RefusedValue
from ..speaking.hidden import redraw_until, run_hidden_scenarios
from . import attribution, rules
from .blame import ADMISSION, ADVANCE, EVERY_STAGE, FORK, FORWARD, RESERVE, blamed, recording
from .forward import forward_alone
from .watch import Refused, Watch, build, model

__all__ = ["check_engine", "PARTS"]

PARTS = ("batching", "preemption", "rejection", "sampling")
BLOCK_SIZE = 4
CHUNK_SIZE = 8
STEP_TOKENS = 24
VOCAB = tiny_config().vocab_size  # the model every engine check serves (watch.model)


@dataclasses.dataclass(frozen=True)
class Relabelled:
    """What a part's scenario draws from the seed: ``relabel[token]`` for every token id of its
    workload (None: the visible tokens), the sampling request's seed, and its number of samples
    (``HIDDEN_SAMPLES`` when drawn: never fewer)."""

    relabel: tuple[int, ...] | None = None
    sampling_seed: int = 11
    samples: int = 4

    @classmethod
    def draw(cls, rng: random.Random) -> Relabelled:
        permutation = list(range(VOCAB))
        rng.shuffle(permutation)
        return cls(tuple(permutation), rng.getrandbits(31), HIDDEN_SAMPLES)

    def tokens(self, ids) -> list[int]:
        return list(ids) if self.relabel is None else [self.relabel[token] for token in ids]

    def requests(self, requests: list[Request]) -> list[Request]:
        return [dataclasses.replace(request, prompt=self.tokens(request.prompt)) for request in requests]


VISIBLE = Relabelled()
HIDDEN_SAMPLES = 5  # n of the hidden sampling request in every draw (fixed, not drawn: the most it ever had)


def _batching_workload() -> list[Request]:
    """Eight requests, many opening with the same 12-token system prompt, in two bursts of four:
    at step 0 their prefills compete for the step's budget; at step 6 they compete with the
    first burst's decoders."""
    requests = serving_workload(
        count=8,
        prompt_range=(5, 30),
        output_range=(4, 10),
        shared_prefix_share=0.5,
        shared_prefix_tokens=12,
        seed=4,
    )
    return [dataclasses.replace(r, arrival_step=0 if i < 4 else 6) for i, r in enumerate(requests)]


def _pressure_workload() -> list[Request]:
    """Short prompts, long answers, all at once: admission cannot foresee the growth."""
    return serving_workload(
        count=6,
        prompt_range=(4, 10),
        output_range=(18, 26),
        shared_prefix_share=0.5,
        shared_prefix_tokens=8,
        arrival_every=0,
        seed=5,
    )


@functools.cache
def _solo(key: tuple[tuple[int, ...], int, float, int]) -> list[int]:
    prompt, max_new_tokens, temperature, seed = key
    with one_thread():
        return solo_run(model(), list(prompt), max_new_tokens, temperature, seed)


def _solo_greedy(requests: list[Request]) -> dict[str, list[list[int]]]:
    return {r.request_id: [_solo((tuple(r.prompt), r.max_new_tokens, 0.0, 0))] for r in requests}


def _build(engine_class, cache_class, prefix_class, num_blocks: int, watch: Watch):
    return build(engine_class, cache_class, prefix_class, watch, num_blocks, BLOCK_SIZE, CHUNK_SIZE, STEP_TOKENS)


def _serve(engine, requests, scenario: str, **options) -> dict[str, list[list[int]]]:
    serving = Serving(engine, requests, **options)
    _steps(serving, scenario, lambda: serving.done)
    return serving.outputs


def _steps(serving: Serving, scenario: str, until) -> None:
    """``serving.step()`` until ``until()``; a request refused or an engine that stalls is named as such."""
    engine, requests = serving.engine, serving.requests
    try:
        while not until():
            call_learner("engine.step()", serving.step, scenario=scenario)
    except CheckFailed as error:
        cause = error.__cause__
        if isinstance(cause, Refused):
            _fail_blaming(
                (ADMISSION,),
                f"{scenario}: refuse only requests that can never fit",
                f"every request of this workload accepted: each fits the pool of "
                f"{len(rules.pool_refs(engine.cache, scenario))} "
                "blocks alone",
                f"add_request raised ValueError: {cause}",
                "compare the request's blocks with the whole pool (len(cache.allocator.refs)), not with the free "
                "blocks of the moment: room is made later, by waiting, eviction and preemption",
            )
        if isinstance(cause, EngineStalled):
            _fail_blaming(
                EVERY_STAGE,
                f"{scenario}: the engine stopped making progress",
                f"all {len(requests)} requests finished within {serving.max_steps} steps",
                str(error.__cause__),
                "a livelock: the same sequences are admitted and preempted again and again, or waiting "
                "requests are never admitted. On MemoryError evict from the prefix cache first, then "
                "preempt the newest running sequence; admit the oldest waiting sequence whenever nothing "
                "is running.",
            )
        raise


def _fail_blaming(stages: tuple[str, ...], scenario: str, expected, got, hint: str) -> None:
    """``fail``, for a rule that the methods of ``stages`` could break (``blame``)."""
    with blamed(*stages):
        fail(scenario, expected, got, hint)


# The rules of a served workload that no phase's hook applies, and who could break them.
SERVED = EVERY_STAGE  # outputs equal to solo runs: every method of the engine on the way
LEAKS = (ADMISSION, RESERVE, FORK, ADVANCE)  # blocks back: an undone admission, _preempt, _finish


@blamed(*SERVED)
def _compare_outputs(scenario: str, expected: dict, got: dict, hint: str) -> None:
    """``got``: what step() returned, already read as plain values (the watched step reads it strictly)."""
    for request_id, samples in expected.items():
        if request_id not in got:
            fail(
                f"{scenario}: request {request_id!r} never came back from step()",
                samples,
                "(missing)",
                "step() returns {request_id: [output of each sample]} for every request that finished in it",
            )
        if got[request_id] != samples:
            mine, solo = got[request_id], samples
            where = next(
                (i for i, (a, b) in enumerate(zip(solo[0], mine[0] if mine else [], strict=False)) if a != b),
                None,
            )
            at = f" (first difference at output token {where})" if where is not None else ""
            fail(f"{scenario}: request {request_id!r} differs from its solo run{at}", solo, mine, hint)


@blamed(*LEAKS)
def _expect_all_blocks_free(scenario: str, cache, prefix) -> None:
    """After every request finished and the prefix cache let go, the pool is whole again."""
    total = len(rules.pool_refs(cache, scenario))
    call_learner("prefix_cache.evict(num_blocks)", prefix.evict, total, scenario=scenario)
    live = list(rules.tables(cache, scenario))
    held = [block for block, refs in enumerate(rules.pool_refs(cache, scenario)) if refs != 0]
    free = rules.num_free(cache, scenario)
    if live or free != total or held:
        fail(
            f"{scenario}: after all requests finished and the prefix cache was cleared (evict({total}))",
            f"all {total} blocks on the free list, no sequence left in the cache",
            f"{free} free; blocks still referenced: "
            f"{held[:12]}{' ...' if len(held) > 12 else ''}; sequences still in the cache: {live[:8]}",
            "blocks leaked: free a sequence's blocks (cache.free) when it finishes and when it is "
            "preempted, and never share a block without a matching release",
        )


def _part_batching(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE) -> None:
    forward_alone(engine_class, cache_class, prefix_class, drawn.tokens)  # _forward, scored here first
    scenario = "eight requests, four at step 0 and four at step 6 (chunked prefill, decode batches, shared prefix)"
    requests = drawn.requests(_batching_workload())
    watch = Watch(scenario)
    engine, cache, prefix = _build(engine_class, cache_class, prefix_class, 200, watch)
    outputs = _serve(engine, requests, scenario)
    _compare_outputs(
        scenario,
        _solo_greedy(requests),
        outputs,
        "greedy outputs must not depend on batching: check each chunk's tokens and positions, and sample "
        "only when a sequence's last known token has just been computed",
    )
    if watch.reused_tokens == 0:
        _fail_blaming(
            (ADMISSION, ADVANCE),  # attach in _admit, remember in _advance
            f"{scenario}: prefix reuse",
            "some prompt tokens reused from the prefix cache (attach > 0)",
            "0 tokens reused",
            "admit each sequence with prefix_cache.attach(seq_id, tokens) and publish its full blocks with "
            "prefix_cache.remember(seq_id, tokens) after each prefill chunk",
        )
    hits = rules.metric(engine, "prefix_hit_tokens", scenario)
    if not 0 < hits <= watch.reused_tokens:
        _fail_blaming(
            (ADMISSION,),
            f"{scenario}: metrics",
            f"metrics.prefix_hit_tokens between 1 and {watch.reused_tokens} (the tokens attach returned)",
            hits,
            "call self.metrics.record_admission(seq, reused) once per admission with attach's return value",
        )
    _expect_all_blocks_free(scenario, cache, prefix)


def _eviction_workload(capacity: int) -> list[Request]:
    """A request that leaves its prompt in the prefix cache, then one that needs the whole pool."""
    first, second = serving_workload(count=2, prompt_range=(12, 12), shared_prefix_share=0.0, seed=9)
    return [
        Request("cached_prompt", first.prompt, 3),
        Request("whole_pool", second.prompt[:6], capacity - 6, arrival_step=6),
    ]


def _preemption_bound(requests: list[Request]) -> int:
    """A generous ceiling on preemptions: two per request.

    Admitting only what fits (every running prefill's blocks counted) lets each admitted prompt
    complete; what is left is decode growth, which pushes a request out about once (the
    instructor's engine: 7 preemptions for the 6 requests of the pressure workload). An engine
    that admits without counting the running prefills needs 18 there; this ceiling is a
    backstop behind the rule "admit only with room", which catches that engine first.
    """
    return 2 * len(requests)


def _part_preemption(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE) -> None:
    num_blocks = 16
    scenario = f"six requests at once in a pool of {num_blocks} blocks of {BLOCK_SIZE} (memory pressure)"
    requests = drawn.requests(_pressure_workload())
    watch = Watch(scenario)
    engine, cache, prefix = _build(engine_class, cache_class, prefix_class, num_blocks, watch)
    outputs = _serve(engine, requests, scenario)
    preempted = sum(watch.readmitted.values())
    if preempted == 0:
        _fail_blaming(
            (ADMISSION, RESERVE),
            f"{scenario}: preemption",
            "at least one sequence freed and readmitted later (preempted)",
            "no sequence was ever preempted",
            "admit a waiting sequence when its prompt fits; when reserve later raises MemoryError, evict "
            "from the prefix cache, then preempt the newest running sequence (free its blocks, put it back "
            "at the front of the waiting queue)",
        )
    bound = _preemption_bound(requests)
    if watch.preemptions > bound:
        _fail_blaming(
            (ADMISSION, RESERVE),
            f"{scenario}: preemptions",
            f"at most {bound} (two per request): admitted sequences whose blocks were counted do not need more",
            f"{watch.preemptions} preemptions",
            "admit only while the free blocks (after eviction) cover what every running prefill and the new "
            "sequence still have to allocate; each preemption throws away computed work",
        )
    _compare_outputs(
        scenario,
        _solo_greedy(requests),
        outputs,
        f"{preempted} preemption(s) happened: a preempted sequence keeps its output and is recomputed "
        "(prompt + output so far) from position 0, or from what attach returns, before sampling again",
    )
    counted = rules.metric(engine, "preemptions", scenario)
    if counted != watch.preemptions:
        _fail_blaming(
            (RESERVE,),
            f"{scenario}: metrics",
            f"metrics.preemptions == {watch.preemptions} (the sequences freed by _reserve before finishing)",
            counted,
            "call self.metrics.record_preemption(seq) once in each preemption",
        )
    _expect_all_blocks_free(scenario, cache, prefix)
    _part_eviction(engine_class, cache_class, prefix_class, drawn)


def _part_eviction(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE) -> None:
    """Only eviction lets the oldest (and only) request continue: preempting it could only repeat."""
    num_blocks = 8
    capacity = num_blocks * BLOCK_SIZE
    scenario = (
        f"a pool of {num_blocks} blocks: a finished request's prompt stays cached, then a request of "
        f"exactly {capacity} tokens runs alone"
    )
    requests = drawn.requests(_eviction_workload(capacity))
    watch = Watch(scenario)
    engine, cache, prefix = _build(engine_class, cache_class, prefix_class, num_blocks, watch)
    outputs = _serve(engine, requests, scenario)
    _compare_outputs(
        scenario,
        _solo_greedy(requests),
        outputs,
        "the request running alone must get the cached blocks by eviction and go on",
    )
    if watch.preemptions:
        _fail_blaming(
            (RESERVE, ADMISSION),
            f"{scenario}: preemptions",
            "none: the request runs alone and fits the pool once the cached prompt is evicted",
            f"{watch.preemptions} preemption(s)",
            "on MemoryError evict from the prefix cache first; the oldest running sequence is never preempted",
        )
    _expect_all_blocks_free(scenario, cache, prefix)


def _part_rejection(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE) -> None:
    num_blocks = 8
    capacity = num_blocks * BLOCK_SIZE
    scenario = f"a pool of {num_blocks} blocks of {BLOCK_SIZE} tokens ({capacity} tokens)"
    engine, cache, prefix = _build(engine_class, cache_class, prefix_class, num_blocks, Watch(scenario))
    too_long = drawn.tokens(range(1, capacity - 2))
    try:
        engine.add_request("too_long", too_long, 5)
    except ValueError:
        pass
    except NotImplementedError:
        # call_learner turns it into NotImplementedYet, naming the notebook whose code raised.
        call_learner("add_request", engine.add_request, "too_long", too_long, 5, scenario=scenario)
    except Exception as error:  # a clear error, but the wrong kind
        _fail_blaming(
            (ADMISSION,),
            f"{scenario}: add_request of {len(too_long)} + 5 tokens",
            "ValueError",
            f"{type(error).__name__}: {error}",
            "reject a request that can never fit with a ValueError naming it, before it joins the queue",
        )
    else:
        _fail_blaming(
            (ADMISSION,),
            f"{scenario}: add_request of {len(too_long)} + 5 = {len(too_long) + 5} tokens",
            "ValueError at once: the request can never fit, even alone in an empty pool",
            "the request was accepted (serving it would preempt forever)",
            "in add_request, compare cache.blocks_needed(len(prompt) + max_new_tokens) with the pool's size",
        )
    if _unfinished(engine, scenario):
        _fail_blaming(
            (ADMISSION,),
            f"{scenario}: after the rejection",
            "has_unfinished() is False (nothing was queued)",
            True,
            "validate before appending the request to the waiting queue",
        )
    busy = Request("busy", drawn.tokens(range(40, 52)), 4)
    fits = Request("fits_exactly", drawn.tokens(range(1, capacity - 4)), 5)
    serving = Serving(engine, [busy], max_steps=2)
    _steps(serving, scenario, lambda: serving.steps >= 2)
    free = rules.num_free(cache, scenario)
    try:
        engine.add_request(fits.request_id, list(fits.prompt), fits.max_new_tokens)
    except ValueError as error:
        _fail_blaming(
            (ADMISSION,),
            f"{scenario}: refuse only requests that can never fit: add_request of {capacity} tokens while "
            f"{free} block(s) are free",
            "accepted: the request fits the whole pool, so it can run once the others finish",
            f"ValueError: {error}",
            "compare the request's blocks with the whole pool (len(cache.allocator.refs)), not with the free "
            "blocks of the moment: room is made later, by waiting, eviction and preemption",
        )
    scenario = f"{scenario}: a request of exactly {capacity} tokens behind a running one"
    outputs = serving.outputs
    serving = Serving(engine, [busy, fits])
    serving.arriving = []
    _steps(serving, scenario, lambda: serving.done)
    outputs.update(serving.outputs)
    _compare_outputs(
        scenario,
        _solo_greedy([busy, fits]),
        outputs,
        "a request that fits the whole pool must be served (alone, after evicting the prefix cache)",
    )
    _expect_all_blocks_free(scenario, cache, prefix)


def _seed_chain(seed: int) -> Iterator[int]:
    """``seed``, then each seed drawn from the one before: the sampling request's seeds to try, in order."""
    while True:
        yield seed
        seed = random.Random(f"sampling/{seed}").getrandbits(31)


def _unfinished(engine, scenario: str) -> bool:
    """has_unfinished(), read as a plain bool (or int: a count of unfinished sequences)."""
    answer = call_learner("engine.has_unfinished()", engine.has_unfinished, scenario=scenario)
    if type(answer) is int:
        return answer != 0
    return learner_bool(answer, "what has_unfinished() returned", scenario)


def _part_sampling(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE) -> None:
    n, seed, temperature, max_new = drawn.samples, drawn.sampling_seed, 1.0, 6
    prompt = drawn.tokens(serving_workload(count=1, prompt_range=(14, 14), shared_prefix_share=0.0, seed=7)[0].prompt)
    request = Request("sampled", prompt, max_new)
    scenario = f"one request with n={n} samples, temperature {temperature}, seed {seed}, prompt of {len(prompt)}"
    seeds = _seed_chain(seed)

    def solo_samples() -> tuple[int, list[list[int]]]:
        drawn_seed = next(seeds)
        return drawn_seed, [_solo((tuple(prompt), max_new, temperature, sample_seed(drawn_seed, i))) for i in range(n)]

    # A seed whose n solo samples are not all equal (the check asks for different samples): the first one
    # of its chain, for the visible seed and nearly every drawn one.
    seed, expected = redraw_until(solo_samples, lambda drawn: len({tuple(sample) for sample in drawn[1]}) > 1)
    runs = []
    for attempt in range(2):
        watch = Watch(scenario)
        engine, cache, prefix = _build(engine_class, cache_class, prefix_class, 64, watch)
        outputs = _serve(engine, [request], scenario, n=n, temperature=temperature, seed=seed)
        got = outputs.get("sampled")
        if got is None or len(got) != n:
            _fail_blaming(
                (FORK, ADVANCE),
                f"{scenario}: step() results",
                f"a list of {n} outputs for 'sampled'",
                got,
                "return all n samples of a request together, ordered by sample index, once the last finishes",
            )
        if attempt == 0:
            _expect_sampling_structure(scenario, got, expected, prompt, watch, n, seed)
        runs.append(got)
        _expect_all_blocks_free(scenario, cache, prefix)
    if runs[0] != runs[1]:
        _fail_blaming(
            SERVED,
            f"{scenario}: run twice",
            runs[0],
            runs[1],
            "the same seed must give the same samples: draw with sample_token(logits, temperature, "
            "seq.seed, len(seq.output)) and no other randomness",
        )


def _expect_sampling_structure(scenario, got, expected, prompt, watch: Watch, n: int, seed: int) -> None:
    if len({tuple(sample) for sample in got}) == 1:
        _fail_blaming(
            (ADMISSION, FORK, ADVANCE),  # the seeds: add_request's for sample 0, _fork_samples' for the others
            f"{scenario}: the samples",
            f"{n} different samples",
            f"{n} identical samples: {got[0]}",
            "every sample needs its own seed: sample i draws with sample_seed(request_seed, i), not the request's seed",
        )
    computed: Counter[int] = Counter()  # prompt position -> times computed, over all samples
    for (_, position), times in watch.writes.items():
        if position < len(prompt):
            computed[position] += times
    prefills = max(computed.values(), default=0)
    if prefills != 1 or len(watch.forks) != n - 1:
        _fail_blaming(
            (ADMISSION, FORK, ADVANCE),  # one Sequence queued, forked by _advance through _fork_samples
            f"{scenario}: how the samples were made",
            f"the prompt computed once, then {n - 1} forks (cache.fork) sharing its blocks",
            f"the prompt computed {prefills} time(s), {len(watch.forks)} fork(s)",
            "prefill the request once; when its prompt is complete, fork the sequence n - 1 times so the "
            "samples share the prompt's blocks, then let each sample draw its first token from the same "
            "logits",
        )
    if got != expected:
        index = next(i for i in range(n) if got[i] != expected[i])
        _fail_blaming(
            (ADMISSION, FORK, ADVANCE, FORWARD),
            f"{scenario}: sample {index}",
            expected[index],
            got[index],
            f"sample {index} must equal a solo run seeded sample_seed({seed}, {index}); each sample draws "
            "token t with sample_token(logits, temperature, its seed, t), from the logits of its own last "
            "token",
        )


@check(
    notebook="08_continuous_batching",
    builds="ContinuousBatchingEngine",
    partners=(("04_fork_and_copy_on_write", "PagedKVCache"), ("05_prefix_caching", "PrefixCache")),
)
def check_engine(
    engine_class, cache_class, prefix_cache_class, parts=PARTS, *, seed: int = 0, hidden: bool = False
) -> str | None:
    """The learner's whole engine serving workloads on the model, scoring what no stage check scores:
    _forward, the step loop and the stages working together (a failure a stage check scores is a note).

    ``engine_class(model, cache, prefix_cache, chunk_size=..., max_step_tokens=...)`` must offer
    ``add_request``, ``step``, ``has_unfinished``, ``running``, ``metrics`` and ``cache`` (see
    ``paged_helpers.serving.driver``). ``parts`` selects among PARTS (default: all).
    ``hidden=True`` (the hidden tests) serves each part's workload relabelled as drawn from ``seed``
    (``Relabelled``) instead of the visible one, and names none of its numbers. Returns the note of each
    part that was not proven (``attribution.Excuse``), or None when every part was.
    """
    parts = (parts,) if isinstance(parts, str) else tuple(parts)
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise ValueError(f"parts must be a non-empty selection of {PARTS}; got {parts}")
    classes = (engine_class, cache_class, prefix_cache_class)
    results: dict[str, str | None] = {}
    with one_thread():
        for part in parts:
            judged = _judged(part, RUNNERS[part], results)
            if hidden:
                kind = {f"the {part} workload, its tokens relabelled by the grader's seed": judged}
                run_hidden_scenarios(kind, random.Random(f"{part}/{seed}").getrandbits(31), classes)
            else:
                judged(classes, None)
    if not any(results.values()):
        return None  # the pass line counts the scenarios and calls
    return "; ".join(note or f"the {part} part passed" for part, note in results.items())


RUNNERS = {
    "batching": _part_batching,
    "preemption": _part_preemption,
    "rejection": _part_rejection,
    "sampling": _part_sampling,
}
# What a part tests on its own before it serves a workload, so never asks again: the batching part
# begins with _forward alone (``forward``), which scores _forward in its cell.
TESTED_FIRST = {"batching": (FORWARD,)}


def _judged(part: str, runner, results: dict[str, str | None]):
    """``runner`` (a part) as a scenario ``(classes, rng)``: on the visible workload (rng None) or on its
    workload relabelled as drawn from ``rng`` (a hidden call). A failure that a stage check scores (the
    stages its rule blames fail their own checks too: ``attribution``) does not fail the part: the part's
    result is then a note saying so (``results[part]``), and the whole engine is not proven."""

    def scenario(classes, rng: random.Random | None) -> None:
        drawn = VISIBLE if rng is None else Relabelled.draw(rng)
        with recording() as record:
            try:
                runner(*classes, drawn)
            except (NotImplementedYet, RefusedValue):
                raise  # unfinished code, or a value built to fool a comparison: never excused
            except CheckFailed as error:
                failure = error
                suspects = tuple(stage for stage in record.suspects(error) if stage not in TESTED_FIRST.get(part, ()))
            else:
                results[part] = None
                return
        excuse = attribution.excuse(part, suspects, classes)
        if excuse is None:
            raise failure
        results[part] = excuse.note(failure, hidden=rng is not None)

    return scenario
