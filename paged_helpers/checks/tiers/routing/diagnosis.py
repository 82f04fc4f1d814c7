"""What ``check_kv_router`` says when a router's answer is wrong: one hint per rule, and the one that
names a wrong overlap by the mistake that gives it (``overlap_hint``).
"""

from __future__ import annotations

STALE_HINT = (
    "a 'removed' event means the replica evicted those blocks: take them out of what the router thinks "
    "the replica holds, or requests go to replicas that no longer have their prefix (and prefill it all)"
)
LEADING_HINT = (
    "only a prefix can be reused: count the request's keys from the first and stop at the first key the "
    "replica does not hold"
)
STORED_HINT = "a 'stored' event adds its keys to what the replica holds (the router knows nothing else)"
COST_HINT = "cost = overlap_weight x (the request's blocks - its overlap on the replica) + decode_blocks[replica]"
CHOOSE_HINT = "choose returns the replica of lowest cost; among equal costs, the lowest replica index"


def overlap_hint(got: int, expected: int, stale: bool) -> str:
    """The hint for a wrong overlap: a router deaf to "removed" events (``stale``: its answer is the overlap
    with every key ever stored), one that counts held keys after a gap (more than expected), else a
    "stored" event not taken in."""
    return STALE_HINT if stale else (LEADING_HINT if got > expected else STORED_HINT)
