"""How the checks read what the learner's code holds and returns: strictly, as plain data.

    learner_code    the one door to the learner's code (``learner_view`` and ``running``): reads ahead,
                    writes, subclasses, runs apart, the learner's kernel
    strict          ints, lists, dicts and tensors read as the plain values they claim to be;
                    comparisons with torch overrides off
    calls           ``call_learner``: the learner's exceptions become messages about the call
    snapshot        a paged cache's bookkeeping at one moment; refusals that must change nothing
    ledger          the check's own account of a pool (who holds each block, what it wrote where),
                    held against the learner's allocator through ``paged_helpers.pool_invariant``
    scratch         logits through the learner's cache against a from-scratch run: one tolerance
    cache_reads     a paged cache's tables, lengths, refs and num_free, read strictly: the one reader
    model_run       the tiny Qwen3 on a learner's cache, one checked step at a time: the one driver
                    of every check that runs the model (notebooks 03, 04, 09, 10, 11)

It stands on ``checks.speaking`` (to fail) and, through ``learner_code`` alone, on ``learner_view``
(objects that live in the learner's process when grading) and ``running``; it imports no notebook's
checks.
"""
