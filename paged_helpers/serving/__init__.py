"""The pieces of a serving engine that are not the exercise.

  sequence        Sequence: the state of one sample of one request
  sampler         sample_token / sample_seed: seeded sampling that survives preemption
  metrics         EngineMetrics: prefix hits, memory, preemptions, time to first token, tokens/s
  progress        ProgressBar: stdout only (stderr zeroes an nbgrader cell)
  driver          serve(engine, requests) / Serving: feeds a workload, detects a stalled engine
  threads         one_thread(): tiny tensors run faster and steadier on one CPU thread
  clock           BusyClock: time spent inside one engine's steps (for interleaved benchmarks)
  reference       solo_run: one request alone, the output every engine must reproduce

The engine itself (admission with prefix reuse, chunked prefill, batched decode, reserve,
eviction, preemption, fork) is what the learner writes in notebook 08. Its static-slot
baseline is the same engine on a cache whose blocks are whole slots (see demos/engine.py),
so this package holds no engine loop.
"""

from .clock import BusyClock
from .driver import EngineStalled, Serving, serve, step_limit
from .metrics import EngineMetrics, StepRecord, kv_tokens_reserved, kv_tokens_stored
from .progress import ProgressBar
from .reference import solo_run
from .sampler import sample_seed, sample_token
from .sequence import Sequence
from .threads import one_thread

__all__ = [
    "BusyClock",
    "Serving",
    "EngineMetrics",
    "EngineStalled",
    "ProgressBar",
    "Sequence",
    "StepRecord",
    "one_thread",
    "kv_tokens_reserved",
    "kv_tokens_stored",
    "sample_seed",
    "sample_token",
    "serve",
    "solo_run",
    "step_limit",
]
