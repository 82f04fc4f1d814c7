"""Notebook 03's checks: the paged KV cache, block by block and then under the tiny Qwen3.

check          check_paged_kv_cache
scenarios      CACHE_STORY, MODEL_STORY (named steps, in order) and HIDDEN_KINDS (the churn moves)
cache_account  the learner's cache, the check's account of its tables, what holds after every step
cache_harness  the bookkeeping steps an engine takes: create, reserve, truncate, free
batch_rows     what set_batch must leave: the batch, and its table_tensor row by row
kv_writes      update's writes: where each key and value must land, lengths committed once
kv_history     what update returns: the whole history of each row, as written
model_harness  the tiny Qwen3 on the cache, each step's logits against a from-scratch run
diagnosis      the hints that name the bug: miscounted reserves, misplaced writes, wrong lengths
"""
