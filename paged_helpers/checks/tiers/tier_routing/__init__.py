"""``check_tier_aware_router`` (notebook 11): a router whose KV events carry the medium, GPU or host.

scenarios    the seeded event streams of replicas with a host tier, the hidden kinds, STORY
credit_feed  CreditFeed: a stream fed to the learner's TierAwareRouter, credit, cost and choice asked
credits      the credit rule, the check's account of the events, what each classic mistake answers
diagnosis    the hints, and the mistake that explains the most wrong credits
"""

# The tests' old import path (tiers.tier_routing was one module).
from .scenarios import STORY  # noqa: F401
