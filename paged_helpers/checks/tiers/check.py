"""Notebook 11's checks, each entry naming its story and telling it.

check_tiered_cache       a host tier under the radix cache, on the model (host_tier: every plan of scenarios)
check_kv_router          a cache-aware router fed by KV events (routing.scenarios: STORY)
check_tier_aware_router  a router whose events carry the medium (tier_routing.scenarios: STORY)
"""

from __future__ import annotations

import functools
from typing import Any

from ..registry import check
from ..story import Story
from .host_tier import planned_scenarios
from .routing.scenarios import STORY as ROUTER_STORY
from .tier_routing.scenarios import STORY as TIER_ROUTER_STORY

__all__ = ["check_kv_router", "check_tier_aware_router", "check_tiered_cache"]


@check(
    notebook="11_cache_tiers_and_routing",
    builds="TieredRadixCache",
    partners=(("04_fork_and_copy_on_write", "PagedKVCache"),),
)
def check_tiered_cache(TieredRadixCache: Any, PagedKVCache: Any, *, seed: int = 0) -> str:  # noqa: N803
    """Blocks go to the host and come back with their from-scratch logits; counts hold in both pools, none is lost."""
    return Story(visible=(functools.partial(planned_scenarios, seed=seed),)).tell(
        TieredRadixCache, PagedKVCache, seed=seed
    )


@check(notebook="11_cache_tiers_and_routing", builds="CacheAwareRouter")
def check_kv_router(CacheAwareRouter: Any, *, seed: int = 0, hidden: bool = False) -> str:  # noqa: N803
    """Overlaps from the replicas' KV events (stored and removed), Dynamo's cost, the cheapest replica."""
    return ROUTER_STORY.tell(CacheAwareRouter, seed=seed, hidden=hidden)


@check(notebook="11_cache_tiers_and_routing", builds="TierAwareRouter")
def check_tier_aware_router(TierAwareRouter: Any, *, seed: int = 0, hidden: bool = False) -> str:  # noqa: N803
    """KV events per medium, host blocks credited at their weight, Dynamo's cost on the credit, the cheapest replica."""
    return TIER_ROUTER_STORY.tell(TierAwareRouter, seed=seed, hidden=hidden)
