"""``check_radix_logits`` (notebook 10): the radix cache on the model, every row of logits against a
from-scratch run.

    scenarios       the plans (a 3-turn chat and a neighbour, branches inside edges, chats under pressure),
                    each pool sized by the plan's account before the model runs
    request_server  RequestServer: an engine's steps on the learner's tree and paged cache (shared with 11)
    radix_server    RadixModelServer: the check's record of every prefilled block, compared before each pass
    diagnosis       the hints, by the cause found first
"""
