"""``check_cache_aware_order`` (notebook 10): admission order on a waiting queue, no model.

scenarios  ORDER_CASES (the visible queues), the hidden kinds drawn until each slip shows, ORDER_STORY
ordering   the rule and its classic slips (expected_order), one queue put to the learner (judge_order)
"""
