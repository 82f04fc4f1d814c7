"""The Triton notebooks' checks: 06's warm-up kernels, 07's paged decode, 09's paged prefill and
the model on the learner's kernels.

    warmup       notebook 06: scale, row max, gather rows, softmax, load a block
    attention    notebooks 07 and 09: paged decode (and split-K) and paged prefill on seeded pools
    scenarios    the seeded decode and prefill cases both draw from
    bugs         the classic kernel mistakes recomputed, so a message can name the one it sees
    model_path   notebook 09: 04's fork milestone with attention on the learner's kernels
"""
