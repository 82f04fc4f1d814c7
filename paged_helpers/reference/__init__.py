"""Slow, obvious references that the learner's kernels are compared against.

Each reference first gathers a sequence's history out of the block pool into an ordinary
contiguous tensor, then runs plain attention on it. That is exactly the copy a paged kernel
exists to avoid, so a reference gives nothing of the kernel away: no online softmax, no
program grid, no masks over a block.

    gather_history          pool + block tables -> contiguous [B, kv_heads, max_len, head_dim]
    paged_decode_reference  one new query per sequence (notebook 07)
    paged_prefill_reference a chunk of new queries of one sequence, causal (notebook 09)
"""

from .attention import gather_history, paged_decode_reference, paged_prefill_reference

__all__ = ["gather_history", "paged_decode_reference", "paged_prefill_reference"]
