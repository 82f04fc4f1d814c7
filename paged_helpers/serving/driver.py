"""Feeding a workload to an engine, step by step, and noticing when it stops making progress.

Any engine with this shape can be driven (the learner's engine from notebook 08, on paged
blocks or on slot-sized blocks as the static baseline):

    engine.add_request(request_id, prompt, max_new_tokens, n=1, seed=0, temperature=0.0)
    engine.step() -> {request_id: [output tokens of sample 0, sample 1, ...]}   (requests finished)
    engine.has_unfinished() -> bool
    engine.running   the sequences in the running batch
    engine.metrics   an EngineMetrics
    engine.cache     the KV cache (for the memory timeline)

Requests arrive at their ``arrival_step``; the driver records arrivals and one timeline
entry per step in the engine's metrics.
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceOf

from ..workloads import Request
from .metrics import kv_tokens_reserved, kv_tokens_stored
from .progress import ProgressBar


class EngineStalled(RuntimeError):
    """The engine ran far more steps than the workload can need: it is livelocked or stuck."""


def step_limit(requests: SequenceOf[Request], n: int = 1) -> int:
    """A generous bound on steps: a healthy engine advances its oldest sequence every step."""
    tokens = sum(len(r.prompt) + r.max_new_tokens for r in requests) * n
    last_arrival = max((r.arrival_step for r in requests), default=0)
    return 2 * tokens + last_arrival + 100


class Serving:
    """One workload being served by one engine, advanced one ``step()`` at a time.

    Request i is seeded ``seed + i``. ``outputs`` fills in as requests finish.
    """

    def __init__(
        self,
        engine,
        requests: SequenceOf[Request],
        n: int = 1,
        temperature: float = 0.0,
        seed: int = 0,
        max_steps: int | None = None,
    ) -> None:
        self.engine, self.requests = engine, list(requests)
        self.n, self.temperature, self.seed = n, temperature, seed
        self.max_steps = step_limit(self.requests, n) if max_steps is None else max_steps
        self.arriving = sorted(enumerate(self.requests), key=lambda pair: (pair[1].arrival_step, pair[0]))
        self.outputs: dict[str, list[list[int]]] = {}
        self.steps = 0

    @property
    def done(self) -> bool:
        return not self.arriving and not self.engine.has_unfinished()

    def step(self) -> None:
        """Hand over the requests that arrived, run one engine step, record the timeline."""
        engine = self.engine
        while self.arriving and self.arriving[0][1].arrival_step <= self.steps:
            index, request = self.arriving.pop(0)
            engine.metrics.record_arrival(request.request_id)
            engine.add_request(
                request.request_id,
                list(request.prompt),
                request.max_new_tokens,
                n=self.n,
                seed=self.seed + index,
                temperature=self.temperature,
            )
        self.outputs.update(engine.step())
        engine.metrics.record_step(
            len(engine.running), kv_tokens_reserved(engine.cache), kv_tokens_stored(engine.cache)
        )
        self.steps += 1
        if self.steps > self.max_steps and not self.done:
            raise EngineStalled(
                f"after {self.steps} steps, {len(self.requests) - len(self.outputs)} of "
                f"{len(self.requests)} requests are still unfinished ({len(engine.running)} running); a "
                f"healthy engine needs at most {self.max_steps} steps"
            )


def serve(
    engine,
    requests: SequenceOf[Request],
    n: int = 1,
    temperature: float = 0.0,
    seed: int = 0,
    progress: ProgressBar | None = None,
    max_steps: int | None = None,
) -> dict[str, list[list[int]]]:
    """Run ``requests`` to completion; returns each request's n outputs (request i is seeded seed + i).

    Raises EngineStalled if the engine runs past ``max_steps`` (default ``step_limit``).
    """
    serving = Serving(engine, requests, n, temperature, seed, max_steps)
    while not serving.done:
        serving.step()
        if progress is not None:
            progress.update(len(serving.outputs), f"running {len(engine.running):3d}")
    if progress is not None:
        progress.close()
    return serving.outputs
