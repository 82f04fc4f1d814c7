"""Notebook 10's checks: the radix tree's bookkeeping, admission order, then the tree under the model.

check              the three @check entries: check_radix_cache, check_cache_aware_order, check_radix_logits
scenarios          check_radix_cache's five visible scenarios (TREE_STORY)
diagnosis          check_radix_cache's hints, one per rule of the tree
tree               TreeEngine: the learner's RadixCache over the learner's allocator, used as an engine uses it
tree_expectations  what match, evict and insert must give, checked right after each call
tree_account       TreeAccount: the check's record of the run, and the invariants verified after every step
tree_reads         TreeReads: the learner's tree and pool read strictly (one request across the wire)
order/             check_cache_aware_order's queues, the rule and its slips
on_the_model/      check_radix_logits: plans, the request server (shared with 11), its hints
"""
