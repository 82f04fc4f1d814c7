"""How the checks speak to a learner: the layer every check module stands on.

    failure   ``CheckFailed`` and its four-part message (scenario, expected, got, hint); tiered
              hints (``more_hint()``); ``Refused`` for a value built to fool a comparison
    report    the ``@check`` decorator and ``REGISTRY``; the pass line (scenarios and calls
              counted); the hidden call's label; quiet output (never stderr); hidden scenarios

It reads nothing of the learner's objects (that is ``checks.reading``, above it) and imports no
notebook's checks.
"""
