"""Notebook 11's checks: a host tier for the radix cache, and cache-aware routing.

    host_tier     check_tiered_cache: offload, write-back or write-through, pinned load-back, under the model
    routing       check_kv_router: KV events and Dynamo's cost on seeded streams
    tier_routing  check_tier_aware_router: KV events that carry the medium, host blocks credited less
    keys          the block keys (notebook 05's chain of hashes, as hex) the checks and demos compute
"""
