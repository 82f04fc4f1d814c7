"""Notebook 06's checks, the Triton warm-up: eight small kernels, each launched by the check itself.

    check               the eight ``@check`` entries and the kernels' signatures, each telling its story
    scenarios           puzzles 1 to 5: visible cases, hidden kinds (drawn from the grader's seed), stories
    scores_scenarios    the same for puzzles 6 to 8
    story_shapes        the shapes a puzzle's story takes over the one runner (a list, a table, drawn kinds)
    puzzle_cases        the cases that are objects: puzzle 5's block of a coded pool, 7's attention, 8's chunk
    puzzle_launches     how each case is launched (seeded inputs, poison, the expected answer); ``run_cases``
    puzzle_judge        the one runner's verdict: ``Attempt``, the questions a ``Diagnosis`` answers,
                        ``judge`` (right, unwritten, a named mistake, odd values, the worst element), the comparisons
    puzzle_mistakes     the classic mistakes recomputed: what a kernel with one of them would store
    diagnosis           what puzzles 1 to 5 say when wrong: their hints and the mistakes they name
    scores_diagnosis    the same for puzzles 6 to 8 (block scores, online attention, causal scores)

A new puzzle is a case table and its draws in ``scenarios`` (or ``scores_scenarios``), a ``launch_*``
in ``puzzle_launches``, a ``Diagnosis`` with its hints, and a ``@check`` entry.
"""
