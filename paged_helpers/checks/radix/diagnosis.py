"""What ``check_radix_cache`` says when the learner's tree breaks a rule: one hint per rule.

Each hint names the idea to fix, never the learner's numbers (those go in the failure's expected and
got). The tree's account (``tree_account``), the call expectations (``tree_expectations``), the
engine (``tree``) and the scenarios pick the hint for the rule they caught broken.
"""

from __future__ import annotations

SPLIT_HINT = (
    "when a match ends inside a node's edge, split the node there: the node match returns must end "
    "exactly where the match ends, so that locking it protects only what the request uses"
)
SPLIT_KEEPS_HINT = (
    "a split cuts the edge's tokens and its blocks at the same place: the upper node takes "
    "tokens[:cut] and blocks[:cut // block_size], the lower keeps the rest, in order"
)
SPLIT_LOSES_HINT = (
    "a split must keep the whole edge: the new upper node takes tokens[:cut] and blocks[:cut // block_size], "
    "and the node itself, hung below it (upper.children[its first block] = node), keeps the rest of the tokens "
    "and blocks, and its children; match only cuts nodes in two, so no block leaves the tree"
)
SHARE_HINT = (
    "insert shares (allocator.share) each block of the new leaf once: the cache's own reference; "
    "positions already cached keep the cache's blocks, and the request's duplicates are not taken"
)
LEAF_HINT = (
    "evict removes leaves only (nodes without children): an inner node's blocks are the prefix of "
    "its children's, which would become unreachable while still holding their blocks"
)
LOCK_HINT = (
    "lock(node) adds one to node.lock_count and to every ancestor's up to the root; unlock(node) "
    "takes one away from the same nodes; evict skips any node whose lock_count is above 0"
)
LRU_HINT = (
    "match and insert stamp every node on their path with a new, larger last_used; evict removes "
    "the unlocked leaf with the smallest last_used first"
)
MATCH_WALK_HINT = (
    "match walks down the tree while the next whole block of the prompt equals the edge's, "
    "from the root, through every child, into the middle of an edge"
)
KEEP_WALKING_HINT = "keep walking while the next whole block equals the edge's"
INSERT_NODE_HINT = "insert returns the node whose path from the root is exactly the inserted whole blocks"
MATCH_SHAPE_HINT = "return the node where the match ends and its blocks"
ALLOCATE_HINT = "allocate hands out a block from the free list"
RELEASE_HINT = "release blocks through the allocator"
EVICT_STOPS_HINT = "evict stops as soon as allocator.num_free >= blocks_wanted"
SPLIT_KEEPS_NODE_HINT = (
    "a split keeps the node itself as the lower part (it still ends where it did) and "
    "puts a new node above it, so the handles requests hold stay right"
)
