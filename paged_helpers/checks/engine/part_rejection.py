"""``check_engine``'s rejection part: add_request refuses what can never fit, and only that.

A request longer than the whole pool is refused at once (a ValueError, nothing queued); one of exactly
the pool, added while another request runs and most blocks are taken, is accepted and served (alone,
after the prefix cache is evicted). Every rule here is the admission stage's (``blame.ADMISSION``)
but the outputs and the blocks given back, which every stage serves (``served``).
"""

from __future__ import annotations

from ...serving import Serving
from ...workloads import Request
from ..reading.calls import call_learner
from . import engine_reads
from .blame import ADMISSION
from .diagnosis import REFUSE_ONLY_WHAT_NEVER_FITS
from .hand_built import BLOCK_SIZE
from .scenarios import VISIBLE_TOKENS, Relabelled
from .served import (
    build_engine,
    compare_outputs,
    expect_all_blocks_free,
    fail_blaming,
    has_unfinished,
    solo_greedy,
    step_until,
)
from .watch import Watch

__all__ = ["serve_rejection"]

NUM_BLOCKS = 8


def serve_rejection(engine_class, cache_class, prefix_class, drawn: Relabelled = VISIBLE_TOKENS) -> None:
    """The rejection part, on the visible tokens or on ``drawn``'s relabelling of them."""
    capacity = NUM_BLOCKS * BLOCK_SIZE
    scenario = f"a pool of {NUM_BLOCKS} blocks of {BLOCK_SIZE} tokens ({capacity} tokens)"
    engine, cache, prefix = build_engine(engine_class, cache_class, prefix_class, NUM_BLOCKS, Watch(scenario))
    _expect_too_long_refused(engine, scenario, drawn.tokens(range(1, capacity - 2)))
    busy = Request("busy", drawn.tokens(range(40, 52)), 4)
    fits = Request("fits_exactly", drawn.tokens(range(1, capacity - 4)), 5)
    serving = Serving(engine, [busy], max_steps=2)
    step_until(serving, scenario, lambda: serving.steps >= 2)
    free = engine_reads.num_free(cache, scenario)
    try:
        engine.add_request(fits.request_id, list(fits.prompt), fits.max_new_tokens)
    except ValueError as error:
        fail_blaming(
            (ADMISSION,),
            f"{scenario}: refuse only requests that can never fit: add_request of {capacity} tokens while "
            f"{free} block(s) are free",
            "accepted: the request fits the whole pool, so it can run once the others finish",
            f"ValueError: {error}",
            REFUSE_ONLY_WHAT_NEVER_FITS,
        )
    scenario = f"{scenario}: a request of exactly {capacity} tokens behind a running one"
    outputs = serving.outputs
    serving = Serving(engine, [busy, fits])
    serving.arriving = []
    step_until(serving, scenario, lambda: serving.done)
    outputs.update(serving.outputs)
    compare_outputs(
        scenario,
        solo_greedy([busy, fits]),
        outputs,
        "a request that fits the whole pool must be served (alone, after evicting the prefix cache)",
    )
    expect_all_blocks_free(scenario, cache, prefix)


def _expect_too_long_refused(engine, scenario: str, too_long: list[int]) -> None:
    """add_request of ``too_long`` + 5 tokens, more than the pool: a ValueError, and nothing queued."""
    try:
        engine.add_request("too_long", too_long, 5)
    except ValueError:
        pass
    except NotImplementedError:
        # call_learner turns it into NotImplementedYet, naming the notebook whose code raised.
        call_learner("add_request", engine.add_request, "too_long", too_long, 5, scenario=scenario)
    except Exception as error:  # a clear error, but the wrong kind
        fail_blaming(
            (ADMISSION,),
            f"{scenario}: add_request of {len(too_long)} + 5 tokens",
            "ValueError",
            f"{type(error).__name__}: {error}",
            "reject a request that can never fit with a ValueError naming it, before it joins the queue",
        )
    else:
        fail_blaming(
            (ADMISSION,),
            f"{scenario}: add_request of {len(too_long)} + 5 = {len(too_long) + 5} tokens",
            "ValueError at once: the request can never fit, even alone in an empty pool",
            "the request was accepted (serving it would preempt forever)",
            "in add_request, compare cache.blocks_needed(len(prompt) + max_new_tokens) with the pool's size",
        )
    if has_unfinished(engine, scenario):
        fail_blaming(
            (ADMISSION,),
            f"{scenario}: after the rejection",
            "has_unfinished() is False (nothing was queued)",
            True,
            "validate before appending the request to the waiting queue",
        )
