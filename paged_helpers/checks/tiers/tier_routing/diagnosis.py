"""What ``check_tier_aware_router`` says when a router's answer is wrong, and the mistake a wrong credit
is named by.

One wrong answer can fit two mistakes, so after the first wrong credit the feed goes on through the
stream asking only for credits, and ``score_credits`` counts, for each mistake, how many of the wrong
credits it explains (``hypotheses``: the credit each mistaken router answers); ``most_explained`` names
the one that explains the most.
"""

from __future__ import annotations

from .credits import WEIGHTS, MediaAccount, blind_credit, credit, credit_after_gaps

STALE_HINT = (
    "a 'removed' event means the replica no longer holds those blocks on that medium: take them out of "
    "held_on[replica][medium], or the router credits blocks that are gone"
)
MEDIUM_HINT = (
    "keep the keys per medium (held_on[replica][medium]): a block the replica holds only on the host earns "
    "tier_weights['CPU'] of a GPU block's credit, read from self.tier_weights"
)
REMOVED_MEDIUM_HINT = (
    "a 'removed' event takes the keys out of its own medium only: a block evicted from the GPU may still be "
    "on the host, and one the host dropped may still be on the GPU"
)
BOTH_MEDIA_HINT = (
    "a block held on both media earns the larger of the two weights (the GPU copy is used), once: neither the "
    "sum nor the smaller weight"
)
LEADING_HINT = (
    "only a prefix can be reused: walk the request's keys from the first and stop at the first key the "
    "replica holds on neither medium"
)
TIER_WEIGHTS_HINT = (
    "the weights are the router's own tier_weights (its third argument, kept in self.tier_weights), not "
    "constants: a deployment may credit the host at another weight"
)
CREDIT_HINT = (
    "overlap_credit: from the first key, while the replica holds the key on GPU or CPU, add the largest "
    "weight among the media holding it; stop at the first key held on neither"
)
COST_HINT = "cost = overlap_weight x (the request's blocks - its credit on the replica) + decode_blocks[replica]"
CHOOSE_HINT = (
    "choose (your CacheAwareRouter's) must compare self.cost, so that the credit counts: the replica of lowest "
    "cost, ties to the lowest index"
)


def hypotheses(account: MediaAccount, replica: int, keys: list, weights: dict[str, float]) -> list[tuple[str, float]]:
    """(hint, the credit a router with that mistake answers), most specific first."""
    held = account.held[replica]
    found = [(TIER_WEIGHTS_HINT, credit(held, keys, WEIGHTS))] if weights != WEIGHTS else []
    return found + [
        (STALE_HINT, credit(account.ever[replica], keys, weights)),
        (MEDIUM_HINT, blind_credit(account.blind[replica], keys)),
        (REMOVED_MEDIUM_HINT, credit(account.both_gone[replica], keys, weights)),
        (BOTH_MEDIA_HINT, credit(held, keys, weights, sum)),
        (BOTH_MEDIA_HINT, credit(held, keys, weights, min)),
        (LEADING_HINT, credit_after_gaps(held, keys, weights)),
    ]


def score_credits(
    score: dict[str, int], account: MediaAccount, answers: dict[tuple[int, int], float], asks: list, weights: dict
) -> None:
    """Add to ``score``, for each mistake, how many of the router's wrong credits ``answers`` it explains
    ((request, replica) -> credit, after one event). A single answer can fit two mistakes; a stream's
    worth of them rarely does."""

    def near(value: float, got: float) -> bool:
        return abs(value - got) <= 1e-9 * max(1.0, abs(got))

    for (ask, replica), got in answers.items():
        keys = asks[ask][0]
        if near(credit(account.held[replica], keys, weights), got):
            continue
        score.setdefault(CREDIT_HINT, 0)
        for hint in dict.fromkeys(h for h, value in hypotheses(account, replica, keys, weights) if near(value, got)):
            score[hint] = score.get(hint, 0) + 1


def most_explained(score: dict[str, int]) -> str:
    """The hint of the mistake that explains the most wrong credits (ties: the most specific);
    CREDIT_HINT when none explains any."""
    named = {hint: count for hint, count in score.items() if hint != CREDIT_HINT and count}
    return max(named, key=lambda hint: named[hint]) if named else CREDIT_HINT
