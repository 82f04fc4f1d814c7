"""The Triton notebooks' checks: 06's warm-up kernels, 07's paged decode, 09's paged prefill and
the model on the learner's kernels.

    launching             how every kernel check launches the learner's kernel itself, and speaks of what happened
    puzzles/              notebook 06's eight warm-up puzzles (scale, row max, gather rows, softmax, load a block,
                          block scores, online attention, causal scores): its own check, scenarios, launches,
                          one runner (puzzle_judge) and diagnosis; see its docstring
    paged_attention       notebooks 07 and 09: the five @check entries (the decode and prefill kernels, their
                          launchers, split-K) and the driver that calls a launcher in a child process
    attention_kernels     the decode and prefill kernels' signatures and the one driver that launches them
    attention_diagnosis   the tolerances, and what 07's and 09's checks say when an output is wrong
    scenarios             the tables of decode and prefill cases both draw from (and the GPU compile shapes)
    attention_inputs      a decode or prefill case, and the seeded tensors it is drawn into
    bugs                  the classic kernel mistakes recomputed, so a message can name the one it sees
    model_path            notebook 09: 04's fork milestone with attention on the learner's kernels (@check, story)
    model_calls           the learner's launchers inside the model: every call recorded
    model_path_diagnosis  which recorded call answered wrongly, and which mistake only a model shows
"""
