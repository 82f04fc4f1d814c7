"""Notebook 04's checks: check_copy_on_write and check_fork_logits.

    check             the two ``@check`` entries
    scenarios         the copy-on-write scenes and the fork milestone's story, as tables
    cow_scene         a scene: the learner's cache driven one step at a time (create, fork, reserve, free)
    cow_account       the check's own account: which tokens each sequence holds, who wrote them where
    cow_expectations  what must hold after each step: tables, reference counts, every key and value
    fork_milestone    the tiny Qwen3 on the learner's cache, with the fork under test
    diagnosis         the hints, and the functions that name the bug from what the check saw

``tiny_qwen3`` is read from this package when check_fork_logits runs, so that gpu-check and the
tests can swap in a loader in bfloat16.
"""

from ...checkpoint import tiny_qwen3  # noqa: F401
