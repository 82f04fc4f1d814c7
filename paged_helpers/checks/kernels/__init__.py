"""The Triton notebooks' checks: 06's warm-up kernels, 07's paged decode, 09's paged prefill and
the model on the learner's kernels.

    launching        how every kernel check launches the learner's kernel itself, and speaks of what happened
    puzzles          notebook 06's warm-up puzzles: scale, row max, gather rows, softmax, load a block,
                     block scores, online attention, causal scores
    paged_attention  notebooks 07 and 09: the paged decode and prefill kernels, and their launchers
    scenarios        the seeded decode and prefill cases both draw from
    bugs             the classic kernel mistakes recomputed, so a message can name the one it sees
    model_path       notebook 09: 04's fork milestone with attention on the learner's kernels
"""
