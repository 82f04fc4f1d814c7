"""The story step of ``check_tiered_cache``: every scenario planned from the seed, then served.

``scenarios(seed)`` (``scenarios``) plans every scenario before any model runs, each pool sized for
what its plan asks; ``_run`` serves one plan on a new ``TieredServer`` and drains it. Every prefilled
and decoded row of logits must equal a from-scratch run; the pass line counts the blocks the host gave
back.
"""

from __future__ import annotations

import random
from typing import Any

from .scenarios import PlannedScenario, scenarios
from .tiered_server import TieredServer

__all__ = ["planned_scenarios", "scenarios"]


def _run(classes: tuple[Any, Any], scenario: PlannedScenario, seed: int) -> TieredServer:
    server = TieredServer(classes, scenario.pool, scenario.host, scenario.policy, scenario.name, seed)
    for step in scenario.plan:
        if step[0] == "serve":
            _, seq, prompt, name, expect_reuse = step
            server.serve(seq, prompt, name, expect_reuse)
        elif step[0] == "finish":
            server.finish(step[1])
        else:
            server.evict_all()
    server.drain()
    return server


def planned_scenarios(TieredRadixCache: Any, PagedKVCache: Any, _rng: random.Random, *, seed: int) -> str:  # noqa: N803
    """Every scenario planned from ``seed`` (each pool sized for what its plan asks), then served."""
    planned = scenarios(seed)
    loaded = 0
    for scenario in planned:
        loaded += _run((TieredRadixCache, PagedKVCache), scenario, seed).host_hits
    return (
        f"{len(planned)} scenarios, {loaded} blocks loaded back from the host, "
        "every row of logits equal to a from-scratch run"
    )
