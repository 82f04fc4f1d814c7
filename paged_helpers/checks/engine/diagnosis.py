"""Notebook 08's engine checks: the hints several rules share and the functions that name a bug.

A rule's own hint stays next to the rule (``rules``, the cases, the parts); what is here either names
which classic mistake produced a wrong value (``why_token``, ``finish_order_bug``, ``preempted_earlier``)
or is a hint more than one place gives (``REFUSE_ONLY_WHAT_NEVER_FITS``, ``FORWARD_HINT``). Each returns
text only: none reads the learner's code.
"""

from __future__ import annotations

import torch

# add_request refused a request that fits the whole pool (the whole engine's parts; the front door's own
# case says it in its words).
REFUSE_ONLY_WHAT_NEVER_FITS = (
    "compare the request's blocks with the whole pool (len(cache.allocator.refs)), not with the free "
    "blocks of the moment: room is made later, by waiting, eviction and preemption"
)

# What _forward returns, for every failure of _forward alone (``forward``).
FORWARD_HINT = (
    "_forward returns {seq.seq_id: the logits at the last of the chunk's `count` new tokens} for every (seq, "
    "count) of the plan: for each group of equal counts, cache.set_batch(the group's seq_ids, in row order), "
    "then one model call on seq.tokens[num_cached : num_cached + count] at positions num_cached, ..., "
    "num_cached + count - 1, each row with its own num_cached"
)


def why_token(chunk, logits: torch.Tensor, got: int, index: int, step: int) -> str:
    """The mistake that draws ``got`` instead of the right token, when it is a classic one (``chunk``: a
    ``step_chunks.Chunk``, whose ``token`` is the right draw)."""
    if chunk.temperature and got == int(torch.argmax(logits)) != chunk.token(logits, index, step):
        return " (that is the argmax: the sample's temperature was not used)"
    if step and got == chunk.token(logits, index, 0):
        return " (that is the token of step 0: pass len(sample.output), the tokens this sample has drawn)"
    if index and chunk.temperature and got == chunk.token(logits, 0, step):
        return " (that is the parent's draw: each sample draws with its own seed, sample.seed)"
    return ""


def finish_order_bug(reported: list, outputs: list[list[int]], order: tuple[int, ...]) -> str:
    """Says so when ``_finish`` reported request 's' with its samples in finishing order, not by index."""
    in_order = [outputs[index] for index in order]
    return (
        " (reported in the order the samples finished, not by sample index)" if reported[-1] == {"s": in_order} else ""
    )


def preempted_earlier(times: int) -> str:
    """Why a readmitted sequence's positions restart: it was preempted ``times`` time(s) (0: nothing to say)."""
    if not times:
        return ""
    return (
        f" This sequence was preempted earlier ({times} time(s)): its blocks were "
        "freed, so it restarts at position 0 (or where the prefix cache's attach left it)."
    )


def span(positions: list[int]) -> str:
    """Positions as a message shows them: one, or the first..the last."""
    if not positions:
        return "(none)"
    return str(positions[0]) if len(positions) == 1 else f"{positions[0]}..{positions[-1]}"
