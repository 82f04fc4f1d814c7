"""Notebook 02's checks: the block allocator's free list and reference counts.

check            check_block_allocator
scenarios        the visible steps (a fresh pool, sharing, a random walk) and HIDDEN_KINDS
allocator_reads  the learner's allocator read strictly: its members, its free list
exact_counts     the check's own count of every block, held against the allocator after each call
diagnosis        the hints that name a wrong count, a lost or doubled free block, a wrong num_free
"""

# Names tests and the grader's tests reach through this module's old path (a single module once).
from .check import check_block_allocator  # noqa: F401
from .scenarios import HIDDEN_KINDS  # noqa: F401
