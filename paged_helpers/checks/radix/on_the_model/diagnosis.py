"""What ``check_radix_logits`` says when a row of logits is wrong, by the cause it found first.

Before a request's forward pass the server (``radix_server``) compares what it knows with what the
learner's code handed out, so that a wrong logit comes with its cause: a matched block holding
another prefix's keys (``MATCHED_WRONG_HINT``), a block the tree holds given back to the free list
(``OVERWRITTEN_HINT``), a match that reused less than brute force (``REUSE_HINT``); only when the
cached keys were right does a wrong row point at the request's table and the prefill
(``LOGITS_HINT``).
"""

from __future__ import annotations

MATCHED_WRONG_HINT = (
    "match may only return blocks whose keys and values belong to exactly the probe's prefix: walk "
    "children by whole blocks of tokens, and when a split cuts an edge, cut its blocks at the same "
    "place (tokens[:cut] with blocks[:cut // block_size])"
)
OVERWRITTEN_HINT = (
    "a block in the tree must never go back to the free list while the tree holds it: insert takes "
    "the cache's own reference (allocator.share) on each new leaf block, and evict releases only "
    "the blocks of the leaves it removes"
)
REUSE_HINT = (
    "match walks down from the root while the next whole block of the prompt equals the edge's, "
    "into the middle of an edge if need be, and returns every block it walked over"
)
LOGITS_HINT = (
    "the cached keys and values were right, so look at what the request's table holds after the "
    "matched blocks: the matched blocks first, in order, then the blocks reserve added; and the "
    "prefill starts at the first position after the match"
)
BLOCKS_KEPT_HINT = (
    "the logits were right but blocks stayed in use; check_radix_cache walks the tree after every "
    "step and names where a reference or a lock is lost"
)
