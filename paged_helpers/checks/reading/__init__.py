"""How the checks read what the learner's code holds and returns: strictly, as plain data.

    strict          ints, lists, dicts and tensors read as the plain values they claim to be;
                    comparisons with torch overrides off
    calls           ``call_learner``: the learner's exceptions become messages about the call
    snapshot        a paged cache's bookkeeping at one moment; refusals that must change nothing
    pool_invariant  the free-list/refcount invariant, read from any allocator (widgets too)
    pool_accounts   a check's account of who holds each block, against the allocator
    scratch         logits through the learner's cache against a from-scratch run: one tolerance
    cache_reads     a paged cache's tables, lengths, refs and num_free, read strictly: the one reader
    model_run       the tiny Qwen3 on a learner's cache, one checked step at a time: the one driver
                    of every check that runs the model (notebooks 03, 04, 09, 10, 11)

It stands on ``checks.speaking`` (to fail) and on ``learner_view`` (for objects that live in the
learner's process when grading); it imports no notebook's checks.
"""
