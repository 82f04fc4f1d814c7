"""Notebook 10's checks: the radix tree's bookkeeping, then the tree under the model.

    tree          check_radix_cache (match, split, insert, lock, evict on the learner's allocator)
                  and check_cache_aware_order
    on_the_model  check_radix_logits: the tiny Qwen3 on the learner's cache and tree, every row
                  of logits against a from-scratch run
"""

# Registered in the order notebook 10's cells call them: the tree's checks first.
from . import tree  # noqa: E402, F401, I001
from . import on_the_model  # noqa: E402, F401
