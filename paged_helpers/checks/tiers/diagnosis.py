"""What ``check_tiered_cache`` says when the tiers break a rule: one hint per rule.

Each hint names the rule, never the learner's numbers. ``tier_account``, ``tier_expectations`` and
``tiered_server`` pick the hint of the rule they caught broken (a pinned slot given away, a load-back
into a held block, a block lost between the tiers, a host slot or GPU block miscounted, another key's
data); only when both tiers were right does a wrong row of logits point at the request's table
(``LOGITS_HINT``).
"""

from __future__ import annotations

PIN_HINT = (
    "a slot that match_host pinned (count above 1) belongs to the request loading it until load_back "
    "unpins it: when the host is full, _host_slot may drop only an entry whose slot has count 1, and "
    "returns None when every slot is pinned"
)
FRESH_HINT = (
    "load_back copies into blocks it just allocated from the GPU allocator (after evict, if too few were "
    "free), never into a block the tree or a running request still holds"
)
LOST_HINT = (
    "a block may leave the GPU tree only with a copy on the host: evict offloads every block of the leaf "
    "(offload copies a dirty block, one with no host entry, and finds a clean one already there) before "
    "it releases them"
)
THROUGH_HINT = "with write-through, insert offloads every whole block of the prompt as soon as it is cached"
KEYS_HINT = (
    "block_keys is given code: it must return notebook 05's block_hashes of the tokens' whole blocks, each "
    "digest as hex (restore it from the notebook, and notebook 05's block_hashes, chain_step and root_hash)"
)
HOST_DATA_HINT = (
    "offload copies every layer's keys and values of the GPU block into the host slot it gives the key, "
    "and the entry names that slot"
)
HOST_COUNT_HINT = (
    "a host slot's count is 1 for its entry (allocate), plus 1 per pin (match_host shares it) until "
    "load_back releases the pin; dropping an entry releases its slot"
)
GPU_COUNT_HINT = (
    "a GPU block's count is 1 for the tree plus 1 per request table: load_back hands each block over "
    "with count 1 (allocate), and evict releases the tree's reference of every block of the leaf"
)
REUSE_HINT = (
    "match finds the GPU's part of the prefix; match_host continues from there with the next whole "
    "blocks' keys, as long as each has a host entry; a prefix evicted from the GPU to a host with room "
    "must come back from the host"
)
LOGITS_HINT = (
    "the tiers' contents were right, so look at the request's table: the matched blocks, then the loaded "
    "ones in order, then the reserved ones; the prefill starts after the GPU and host matches"
)
