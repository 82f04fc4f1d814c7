"""Notebook 08's checks: the continuous-batching engine, stage by stage (one cell each), then whole.

  check_engine_admission   EngineAdmission: add_request (refuse only what can never fit) and
                           _admit (queue order, evict to make room, undo, idle, prefix hits)
  check_engine_plan        EnginePlanner._plan: decoders, chunk size, token budget
  check_engine_reserve     EngineScheduler._reserve/_preempt: room, evict before preempting,
                           the newest as victim, the queue afterwards
  check_engine_fork        ContinuousBatchingEngine._fork_samples: n - 1 samples sharing blocks,
                           returned; _finish: a request's samples reported by sample index
  check_engine_advance     ContinuousBatchingEngine._advance: the step after the forward pass
  check_engine             the whole engine serving seeded workloads on the model (``whole``)

Each stage check builds the state it needs by hand (``hand_built``), calls one stage of the learner's
engine, and holds it to ``rules`` (the same functions ``check_engine`` applies on every step): no model
runs, each takes milliseconds. Their stories are in ``scenarios``; ``hidden=True`` runs every hidden
kind drawn from ``seed`` (messages without numbers).
"""

from __future__ import annotations

from ..registry import check
from .hand_built import NOTEBOOK, PARTNERS
from .judging import tell_parts
from .scenarios import ADMISSION_STORY, ADVANCE_STORY, FORK_STORY, PLAN_STORY, RESERVE_STORY
from .whole import PARTS

__all__ = [
    "check_engine_admission",
    "check_engine_plan",
    "check_engine_reserve",
    "check_engine_fork",
    "check_engine_advance",
    "check_engine",
]


@check(notebook=NOTEBOOK, builds="EngineAdmission", partners=PARTNERS)
def check_engine_admission(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False):
    """add_request and _admit of the learner's EngineAdmission, on hand-built queues and pools.

    ``hidden=True`` (the hidden tests) runs every kind of ``ADMISSION_KINDS`` with sizes drawn from
    ``seed``, and names none of their numbers.
    """
    return ADMISSION_STORY.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)


@check(notebook=NOTEBOOK, builds="EnginePlanner", partners=PARTNERS)
def check_engine_plan(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False) -> str:
    """_plan of the learner's EnginePlanner on hand-built running batches.

    ``hidden=True`` (the hidden tests): batches, chunk sizes and budgets drawn from ``seed``.
    """
    return PLAN_STORY.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)


@check(notebook=NOTEBOOK, builds="EngineScheduler", partners=PARTNERS)
def check_engine_reserve(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False):
    """_reserve and _preempt of the learner's EngineScheduler on hand-built pools.

    ``hidden=True`` (the hidden tests): pools, sequences and plans drawn from ``seed``, the expected
    preemptions worked out from the blocks (``Pool.victims``).
    """
    return RESERVE_STORY.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)


@check(notebook=NOTEBOOK, builds="ContinuousBatchingEngine", partners=PARTNERS)
def check_engine_fork(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False) -> str:
    """_fork_samples of the learner's engine: n - 1 samples sharing the parent's blocks, returned; _finish
    reporting a request's samples by index.

    ``hidden=True`` (the hidden tests): requests, seeds and finishing orders drawn from ``seed``.
    """
    return FORK_STORY.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)


@check(notebook=NOTEBOOK, builds="ContinuousBatchingEngine", partners=PARTNERS)
def check_engine_advance(engine_class, cache_class, prefix_cache_class, *, seed: int = 0, hidden: bool = False):
    """_advance of the learner's engine after a forward pass: counts, tokens, forks, finishes, published blocks.

    ``hidden=True`` (the hidden tests): both ``ADVANCE_KINDS`` steps, each of every kind of chunk and
    ``EXTRA_CHUNKS`` more, drawn from ``seed`` (``Step.draw``), messages without their numbers.
    """
    return ADVANCE_STORY.tell((engine_class, cache_class, prefix_cache_class), seed=seed, hidden=hidden)


@check(notebook=NOTEBOOK, builds="ContinuousBatchingEngine", partners=PARTNERS)
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
    return tell_parts((engine_class, cache_class, prefix_cache_class), parts, seed=seed, hidden=hidden)
