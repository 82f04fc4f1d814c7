"""Notebook 05's check: check_prefix_cache.

check                the ``@check`` entry
scenarios            the visible steps in order and the hidden kinds, as tables
reuse_stories        visible scenarios: what attach reuses, and the references attach and remember take
eviction_stories     visible scenarios: LRU order, blocks in use, tails evicted first
prefix_server        the learner's PrefixCache over the learner's PagedKVCache, driven like an engine
prefix_expectations  what must hold after each step: reuse, histories, reference counts, reachability
prefix_codes         the prompts' tokens, and the number the check writes for each prefix
diagnosis            the hints, and the functions that name the bug from what the check saw
"""
