"""``check_kv_router`` (notebook 11): a cache-aware router fed by the replicas' KV events.

scenarios     the seeded event streams, the hidden kinds (redrawn until each classic mistake shows), STORY
overlap_feed  OverlapFeed: a stream fed to the learner's CacheAwareRouter, overlap, cost and choice asked
diagnosis     the hints, and the one a wrong overlap gets
"""

# The tests' old import path (tiers.routing was one module).
from .scenarios import STORY  # noqa: F401
