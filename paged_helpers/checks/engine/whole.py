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

Parts (``parts=``), each a separate graded cell in the notebook (the stage checks of ``check``
come before them). This module holds their workloads and what each serves (``RUNNERS``); ``served``
what serving a workload takes, ``part_rejection`` the rejection part, ``judging`` how a part's
failure is judged:

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
import random
from collections import Counter
from collections.abc import Iterator

from ...serving import sample_seed
from ...workloads import Request, serving_workload
from ..speaking.hidden import redraw_until
from . import engine_reads
from .blame import ADMISSION, ADVANCE, FORK, FORWARD, RESERVE
from .forward import forward_alone
from .hand_built import BLOCK_SIZE
from .part_rejection import serve_rejection
from .scenarios import VISIBLE_TOKENS, Relabelled
from .served import (
    SERVED,
    build_engine,
    compare_outputs,
    expect_all_blocks_free,
    fail_blaming,
    serve,
    solo_greedy,
)
from .served import solo as _solo  # the sampling part's solo runs, looked up here (a test replaces them)
from .watch import VOCAB, Watch

# BLOCK_SIZE, VOCAB and Relabelled: the sizes and the draw of the parts' scenarios, as the tests read them here.
__all__ = ["BLOCK_SIZE", "PARTS", "RUNNERS", "VOCAB", "Relabelled"]

PARTS = ("batching", "preemption", "rejection", "sampling")


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


def _part_batching(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE_TOKENS) -> None:
    forward_alone(engine_class, cache_class, prefix_class, drawn.tokens)  # _forward, scored here first
    scenario = "eight requests, four at step 0 and four at step 6 (chunked prefill, decode batches, shared prefix)"
    requests = drawn.requests(_batching_workload())
    watch = Watch(scenario)
    engine, cache, prefix = build_engine(engine_class, cache_class, prefix_class, 200, watch)
    outputs = serve(engine, requests, scenario)
    compare_outputs(
        scenario,
        solo_greedy(requests),
        outputs,
        "greedy outputs must not depend on batching: check each chunk's tokens and positions, and sample "
        "only when a sequence's last known token has just been computed",
    )
    if watch.reused_tokens == 0:
        fail_blaming(
            (ADMISSION, ADVANCE),  # attach in _admit, remember in _advance
            f"{scenario}: prefix reuse",
            "some prompt tokens reused from the prefix cache (attach > 0)",
            "0 tokens reused",
            "admit each sequence with prefix_cache.attach(seq_id, tokens) and publish its full blocks with "
            "prefix_cache.remember(seq_id, tokens) after each prefill chunk",
        )
    hits = engine_reads.metric(engine, "prefix_hit_tokens", scenario)
    if not 0 < hits <= watch.reused_tokens:
        fail_blaming(
            (ADMISSION,),
            f"{scenario}: metrics",
            f"metrics.prefix_hit_tokens between 1 and {watch.reused_tokens} (the tokens attach returned)",
            hits,
            "call self.metrics.record_admission(seq, reused) once per admission with attach's return value",
        )
    expect_all_blocks_free(scenario, cache, prefix)


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


def _part_preemption(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE_TOKENS) -> None:
    num_blocks = 16
    scenario = f"six requests at once in a pool of {num_blocks} blocks of {BLOCK_SIZE} (memory pressure)"
    requests = drawn.requests(_pressure_workload())
    watch = Watch(scenario)
    engine, cache, prefix = build_engine(engine_class, cache_class, prefix_class, num_blocks, watch)
    outputs = serve(engine, requests, scenario)
    preempted = sum(watch.readmitted.values())
    if preempted == 0:
        fail_blaming(
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
        fail_blaming(
            (ADMISSION, RESERVE),
            f"{scenario}: preemptions",
            f"at most {bound} (two per request): admitted sequences whose blocks were counted do not need more",
            f"{watch.preemptions} preemptions",
            "admit only while the free blocks (after eviction) cover what every running prefill and the new "
            "sequence still have to allocate; each preemption throws away computed work",
        )
    compare_outputs(
        scenario,
        solo_greedy(requests),
        outputs,
        f"{preempted} preemption(s) happened: a preempted sequence keeps its output and is recomputed "
        "(prompt + output so far) from position 0, or from what attach returns, before sampling again",
    )
    counted = engine_reads.metric(engine, "preemptions", scenario)
    if counted != watch.preemptions:
        fail_blaming(
            (RESERVE,),
            f"{scenario}: metrics",
            f"metrics.preemptions == {watch.preemptions} (the sequences freed by _reserve before finishing)",
            counted,
            "call self.metrics.record_preemption(seq) once in each preemption",
        )
    expect_all_blocks_free(scenario, cache, prefix)
    _part_eviction(engine_class, cache_class, prefix_class, drawn)


def _part_eviction(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE_TOKENS) -> None:
    """Only eviction lets the oldest (and only) request continue: preempting it could only repeat."""
    num_blocks = 8
    capacity = num_blocks * BLOCK_SIZE
    scenario = (
        f"a pool of {num_blocks} blocks: a finished request's prompt stays cached, then a request of "
        f"exactly {capacity} tokens runs alone"
    )
    requests = drawn.requests(_eviction_workload(capacity))
    watch = Watch(scenario)
    engine, cache, prefix = build_engine(engine_class, cache_class, prefix_class, num_blocks, watch)
    outputs = serve(engine, requests, scenario)
    compare_outputs(
        scenario,
        solo_greedy(requests),
        outputs,
        "the request running alone must get the cached blocks by eviction and go on",
    )
    if watch.preemptions:
        fail_blaming(
            (RESERVE, ADMISSION),
            f"{scenario}: preemptions",
            "none: the request runs alone and fits the pool once the cached prompt is evicted",
            f"{watch.preemptions} preemption(s)",
            "on MemoryError evict from the prefix cache first; the oldest running sequence is never preempted",
        )
    expect_all_blocks_free(scenario, cache, prefix)


def _seed_chain(seed: int) -> Iterator[int]:
    """``seed``, then each seed drawn from the one before: the sampling request's seeds to try, in order."""
    while True:
        yield seed
        seed = random.Random(f"sampling/{seed}").getrandbits(31)


def _part_sampling(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE_TOKENS) -> None:
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
        engine, cache, prefix = build_engine(engine_class, cache_class, prefix_class, 64, watch)
        outputs = serve(engine, [request], scenario, n=n, temperature=temperature, seed=seed)
        got = outputs.get("sampled")
        if got is None or len(got) != n:
            fail_blaming(
                (FORK, ADVANCE),
                f"{scenario}: step() results",
                f"a list of {n} outputs for 'sampled'",
                got,
                "return all n samples of a request together, ordered by sample index, once the last finishes",
            )
        if attempt == 0:
            _expect_sampling_structure(scenario, got, expected, prompt, watch, n, seed)
        runs.append(got)
        expect_all_blocks_free(scenario, cache, prefix)
    if runs[0] != runs[1]:
        fail_blaming(
            SERVED,
            f"{scenario}: run twice",
            runs[0],
            runs[1],
            "the same seed must give the same samples: draw with sample_token(logits, temperature, "
            "seq.seed, len(seq.output)) and no other randomness",
        )


def _expect_sampling_structure(scenario, got, expected, prompt, watch: Watch, n: int, seed: int) -> None:
    if len({tuple(sample) for sample in got}) == 1:
        fail_blaming(
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
        fail_blaming(
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
        fail_blaming(
            (ADMISSION, FORK, ADVANCE, FORWARD),
            f"{scenario}: sample {index}",
            expected[index],
            got[index],
            f"sample {index} must equal a solo run seeded sample_seed({seed}, {index}); each sample draws "
            "token t with sample_token(logits, temperature, its seed, t), from the logits of its own last "
            "token",
        )


RUNNERS = {
    "batching": _part_batching,
    "preemption": _part_preemption,
    "rejection": serve_rejection,
    "sampling": _part_sampling,
}
