"""What a serving engineer reads off an engine: hits, memory, preemptions, latency, throughput.

The engine reports events as they happen (``record_admission``, ``record_token``,
``record_preemption``); whoever drives the engine calls ``record_arrival`` when a request
arrives and ``record_step`` after every step. ``summary()`` turns the events into numbers.
Times are seconds on ``clock`` since the metrics object was created: wall-clock time
(``time.perf_counter``) unless a benchmark passes a ``BusyClock``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


def kv_tokens_reserved(cache: object) -> int:
    """Token slots of KV memory held right now, used or not: whole blocks of a paged cache
    (including blocks kept alive only by a prefix cache). The static baseline is the same
    paged cache with slot-sized blocks, so it is measured the same way.
    """
    allocator = cache.allocator
    return (len(allocator.refs) - allocator.num_free) * cache.block_size


def kv_tokens_stored(cache: object) -> int:
    """Tokens the live sequences have in the cache (a block shared by k sequences counts k times)."""
    return sum(cache.lengths.values())


@dataclass(frozen=True)
class StepRecord:
    """The engine right after one step."""

    time: float
    tokens_generated: int  # since the start
    kv_tokens_reserved: int
    kv_tokens_stored: int
    running: int


@dataclass
class EngineMetrics:
    """Counters and a per-step timeline. One object per engine; never shared."""

    clock: Callable[[], float] = time.perf_counter
    start: float | None = None  # clock() at creation
    prompt_tokens: int = 0  # tokens admissions had to place in the cache (prompt + output so far)
    prefix_hit_tokens: int = 0  # of those, tokens found in the prefix cache instead of computed
    preemptions: int = 0
    tokens_generated: int = 0
    arrivals: dict[str, float] = field(default_factory=dict)
    first_tokens: dict[str, float] = field(default_factory=dict)
    timeline: list[StepRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.start is None:
            self.start = self.clock()

    def now(self) -> float:
        return self.clock() - self.start

    def record_arrival(self, request_id: str) -> None:
        self.arrivals.setdefault(request_id, self.now())

    def record_admission(self, seq: object, reused_tokens: int) -> None:
        """A sequence entered the running batch; ``reused_tokens`` came from the prefix cache."""
        self.prompt_tokens += len(seq.tokens)
        self.prefix_hit_tokens += reused_tokens

    def record_token(self, seq: object) -> None:
        """A sequence sampled one token (call once per token)."""
        self.tokens_generated += 1
        self.first_tokens.setdefault(seq.request_id, self.now())

    def record_preemption(self, seq: object) -> None:
        self.preemptions += 1

    def record_step(self, running: int, kv_tokens_reserved: int, kv_tokens_stored: int) -> None:
        self.timeline.append(
            StepRecord(self.now(), self.tokens_generated, kv_tokens_reserved, kv_tokens_stored, running)
        )

    @property
    def prefix_hit_rate(self) -> float:
        """Share of admitted tokens whose K/V came from the prefix cache."""
        return self.prefix_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def time_to_first_token(self) -> dict[str, float]:
        """Seconds from arrival to first token, per request that has both."""
        return {r: self.first_tokens[r] - self.arrivals[r] for r in self.first_tokens if r in self.arrivals}

    def summary(self) -> dict[str, float | int]:
        elapsed = self.timeline[-1].time if self.timeline else self.now()
        ttft = sorted(self.time_to_first_token().values())
        return {
            "steps": len(self.timeline),
            "seconds": round(elapsed, 3),
            "tokens_generated": self.tokens_generated,
            "tokens_per_second": round(self.tokens_generated / elapsed, 1) if elapsed > 0 else 0.0,
            "peak_running": max((r.running for r in self.timeline), default=0),
            "peak_kv_tokens_reserved": max((r.kv_tokens_reserved for r in self.timeline), default=0),
            "prefill_tokens_saved": self.prefix_hit_tokens,
            "prefix_hit_rate": round(self.prefix_hit_rate, 3),
            "preemptions": self.preemptions,
            "mean_time_to_first_token_s": round(sum(ttft) / len(ttft), 4) if ttft else 0.0,
        }
