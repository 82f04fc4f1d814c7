"""Notebook 11's checks: a host tier for the radix cache, and cache-aware routing.

check              the three @check entries: check_tiered_cache, check_kv_router, check_tier_aware_router
scenarios          check_tiered_cache's plans (both write policies, a pinned load-back, a churning host)
diagnosis          check_tiered_cache's hints, one per rule of the tiers
host_tier          check_tiered_cache's story step: every plan drawn from the seed, each served and drained
tiered_server      TieredServer: an engine's requests with a host tier on the model (on radix's RequestServer)
tier_expectations  what match and load_back must give, checked right after each call
tier_account       TierAccount: the check's record of both tiers, and the invariants after every call
keys               the block keys (notebook 05's chain of hashes, as hex) the checks and demos compute
router_streams     what both router checks' streams are made of: prompts sharing stems, block keys, asks
router_feed        RouterFeed: a stream of KV events fed to a router of the learner's, cost and choice asked
routing/           check_kv_router: its streams, its feed (OverlapFeed), its hints
tier_routing/      check_tier_aware_router: its streams, the credit rule and its mistakes, its feed, its hints
"""
