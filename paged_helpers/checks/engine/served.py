"""Serving a workload on the learner's watched engine, and what every part of ``check_engine`` expects of it.

A part builds a watched engine (``build_engine``: the engine checks' sizes), serves its requests
(``serve``, step by step through ``serving.Serving``: a refused request or an engine that stalls is named
as such) and compares the outputs with each request run alone (``solo``, ``compare_outputs``); after the
last request, every block is back (``expect_all_blocks_free``). Each rule here fails inside
``blame.blamed`` naming the stages that could break it (``fail_blaming``).
"""

from __future__ import annotations

import functools

from ...serving import EngineStalled, Serving, one_thread, solo_run
from ...workloads import Request
from ..reading.calls import call_learner
from ..reading.strict import learner_bool
from ..speaking.failure import CheckFailed, fail
from . import engine_reads
from .blame import ADMISSION, ADVANCE, EVERY_STAGE, FORK, RESERVE, blamed
from .diagnosis import REFUSE_ONLY_WHAT_NEVER_FITS
from .hand_built import BLOCK_SIZE, CHUNK_SIZE, STEP_TOKENS
from .watch import Refused, Watch, build, model


@functools.cache
def solo(key: tuple[tuple[int, ...], int, float, int]) -> list[int]:
    prompt, max_new_tokens, temperature, seed = key
    with one_thread():
        return solo_run(model(), list(prompt), max_new_tokens, temperature, seed)


def solo_greedy(requests: list[Request]) -> dict[str, list[list[int]]]:
    return {r.request_id: [solo((tuple(r.prompt), r.max_new_tokens, 0.0, 0))] for r in requests}


def build_engine(engine_class, cache_class, prefix_class, num_blocks: int, watch: Watch):
    return build(engine_class, cache_class, prefix_class, watch, num_blocks, BLOCK_SIZE, CHUNK_SIZE, STEP_TOKENS)


def serve(engine, requests, scenario: str, **options) -> dict[str, list[list[int]]]:
    serving = Serving(engine, requests, **options)
    step_until(serving, scenario, lambda: serving.done)
    return serving.outputs


def step_until(serving: Serving, scenario: str, until) -> None:
    """``serving.step()`` until ``until()``; a request refused or an engine that stalls is named as such."""
    engine, requests = serving.engine, serving.requests
    try:
        while not until():
            call_learner("engine.step()", serving.step, scenario=scenario)
    except CheckFailed as error:
        cause = error.__cause__
        if isinstance(cause, Refused):
            fail_blaming(
                (ADMISSION,),
                f"{scenario}: refuse only requests that can never fit",
                f"every request of this workload accepted: each fits the pool of "
                f"{len(engine_reads.pool_refs(engine.cache, scenario))} "
                "blocks alone",
                f"add_request raised ValueError: {cause}",
                REFUSE_ONLY_WHAT_NEVER_FITS,
            )
        if isinstance(cause, EngineStalled):
            fail_blaming(
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


def fail_blaming(stages: tuple[str, ...], scenario: str, expected, got, hint: str) -> None:
    """``fail``, for a rule that the methods of ``stages`` could break (``blame``)."""
    with blamed(*stages):
        fail(scenario, expected, got, hint)


# The rules of a served workload that no phase's hook applies, and who could break them.
SERVED = EVERY_STAGE  # outputs equal to solo runs: every method of the engine on the way
LEAKS = (ADMISSION, RESERVE, FORK, ADVANCE)  # blocks back: an undone admission, _preempt, _finish


@blamed(*SERVED)
def compare_outputs(scenario: str, expected: dict, got: dict, hint: str) -> None:
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
def expect_all_blocks_free(scenario: str, cache, prefix) -> None:
    """After every request finished and the prefix cache let go, the pool is whole again."""
    total = len(engine_reads.pool_refs(cache, scenario))
    call_learner("prefix_cache.evict(num_blocks)", prefix.evict, total, scenario=scenario)
    live = list(engine_reads.tables(cache, scenario))
    held = [block for block, refs in enumerate(engine_reads.pool_refs(cache, scenario)) if refs != 0]
    free = engine_reads.num_free(cache, scenario)
    if live or free != total or held:
        fail(
            f"{scenario}: after all requests finished and the prefix cache was cleared (evict({total}))",
            f"all {total} blocks on the free list, no sequence left in the cache",
            f"{free} free; blocks still referenced: "
            f"{held[:12]}{' ...' if len(held) > 12 else ''}; sequences still in the cache: {live[:8]}",
            "blocks leaked: free a sequence's blocks (cache.free) when it finishes and when it is "
            "preempted, and never share a block without a matching release",
        )


def has_unfinished(engine, scenario: str) -> bool:
    """has_unfinished(), read as a plain bool (or int: a count of unfinished sequences)."""
    answer = call_learner("engine.has_unfinished()", engine.has_unfinished, scenario=scenario)
    if type(answer) is int:
        return answer != 0
    return learner_bool(answer, "what has_unfinished() returned", scenario)
