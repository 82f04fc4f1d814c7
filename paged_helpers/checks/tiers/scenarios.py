"""The scenarios of ``check_tiered_cache``: plans, drawn from the seed before any model runs.

A plan is ("serve", seq, prompt, name, expect_reuse), ("finish", seq) and ("evict_all",) steps, with
its GPU pool, host slots and write policy sized for what it asks:

    _one_at_a_time            (both policies) chats taking turns through a GPU pool of about one request,
                              over a host that holds them all: every evicted prefix comes back from the host
    _load_back_while_pinned   (write-back) a load-back that evicts from the GPU while every host slot is pinned
    _two_at_a_time_churning   (write-through) two requests at once, a host half the pool's size: its LRU churns
"""

from __future__ import annotations

import random
from typing import NamedTuple

from ...model import tiny_config
from ...workloads import multi_turn_chats, random_tokens
from ..radix.on_the_model.request_server import BLOCK
from ..reading.ledger import ceil_div

__all__ = ["DECODE_STEPS", "SCENARIOS", "WRITE_BACK", "WRITE_THROUGH", "scenarios"]

DECODE_STEPS = 1  # tokens each request decodes (TieredServer's): every pool is sized for them
VOCAB = tiny_config().vocab_size
WRITE_BACK, WRITE_THROUGH = "write-back", "write-through"

Plan = list[tuple]


class PlannedScenario(NamedTuple):
    name: str
    pool: int
    host: int
    policy: str
    plan: Plan


def _request_blocks(prompt: list[int]) -> int:
    """The most GPU blocks one running request holds: its table, plus the tree's duplicate of a last
    prompt block that match (which leaves out the last token) could not hand over."""
    return ceil_div(len(prompt) + DECODE_STEPS, BLOCK) + (len(prompt) % BLOCK == 0)


def _one_at_a_time(rng: random.Random, policy: str) -> PlannedScenario:
    """Three chats of three turns, one request at a time, chats taking turns; a GPU pool of one request
    plus a block, a host with room for every block (so every evicted prefix must come back)."""
    chats = multi_turn_chats(3, 3, 4, (2, 5), (3, 6), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    for turn in range(3):
        for chat in range(3):
            seq = f"chat{chat}-turn{turn}"
            plan += [("serve", seq, chats[chat][turn], f"chat {chat}, turn {turn}", True), ("finish", seq)]
    pool = max(_request_blocks(prompt) for chat in chats for prompt in chat) + 1
    host = sum(len(chat[-1]) // BLOCK for chat in chats) + 4
    return PlannedScenario(
        f"{policy}: three chats taking turns, one at a time (GPU pool {pool}, host {host})", pool, host, policy, plan
    )


def _load_back_while_pinned(rng: random.Random, policy: str) -> PlannedScenario:
    """Write-back, a host of 2 slots, a GPU pool of 3. Prompt X (two whole blocks) is served and
    evicted to the host; prompt Y fills the GPU tree; X comes back: match_host pins both host slots
    and load_back must evict Y from the GPU while nothing on the host may be dropped."""
    x, y = random_tokens(9, VOCAB, rng), random_tokens(9, VOCAB, rng)
    plan: Plan = [
        ("serve", "x", x, "prompt X", True),
        ("finish", "x"),
        ("evict_all",),
        ("serve", "y", y, "prompt Y", True),
        ("finish", "y"),
        ("serve", "x-again", x, "prompt X again (its blocks on the host)", True),
        ("finish", "x-again"),
    ]
    return PlannedScenario(
        f"{policy}: a load-back that evicts while every host slot is pinned (GPU pool 3, host 2)", 3, 2, policy, plan
    )


def _two_at_a_time_churning(rng: random.Random, policy: str) -> PlannedScenario:
    """Three chats of four turns, two requests at once, in a GPU pool that forces evictions over a host
    of half its size: the host fills and its LRU drops entries (reuse is not compared: any LRU order
    a correct tier keeps is fine)."""
    chats = multi_turn_chats(3, 4, 4, (2, 5), (3, 6), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    running: list[str] = []
    held: dict[str, int] = {}
    most = 0
    for turn in range(4):
        for chat in rng.sample(range(3), 3):
            seq = f"chat{chat}-turn{turn}"
            plan.append(("serve", seq, chats[chat][turn], f"chat {chat}, turn {turn}", False))
            running.append(seq)
            held[seq] = _request_blocks(chats[chat][turn])
            most = max(most, sum(held[s] for s in running))
            if len(running) > 1:
                done = running.pop(0)
                plan.append(("finish", done))
    pool = max(most, 14)
    host = max(2, pool // 2)
    return PlannedScenario(
        f"{policy}: three chats, two at a time (GPU pool {pool}, host {host}: the host churns)",
        pool,
        host,
        policy,
        plan,
    )


# The churning host is write-through's regime (every insert writes); write-back's eviction path is
# under pressure in the pinned scenario.
SCENARIOS = (
    (_one_at_a_time, (WRITE_BACK, WRITE_THROUGH)),
    (_load_back_while_pinned, (WRITE_BACK,)),
    (_two_at_a_time_churning, (WRITE_THROUGH,)),
)


def scenarios(seed: int) -> list[PlannedScenario]:
    """The scenarios of one check call, drawn from ``seed`` (before any model runs)."""
    rng = random.Random(seed)
    return [make(rng, policy) for make, policies in SCENARIOS for policy in policies]
