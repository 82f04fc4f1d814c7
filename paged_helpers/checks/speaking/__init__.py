"""How the checks speak to a learner: the layer every check module stands on.

    failure   ``CheckFailed`` and its four-part message (scenario, expected, got, hint); tiered
              hints (``more_hint()``); ``Refused`` for a value built to fool a comparison
    tally     the pass line (scenarios and calls counted); quiet output (never stderr)
    hidden    hidden scenarios: every kind run at the grader's seed; what a hidden failure may say

It reads nothing of the learner's objects (that is ``checks.reading``, above it) and imports no
notebook's checks.
"""
