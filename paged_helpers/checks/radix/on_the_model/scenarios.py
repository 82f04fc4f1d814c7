"""The scenarios of ``check_radix_logits``: plans, drawn from the check's rng before any model runs.

A scenario is a plan: ("serve", seq, prompt, name, expect_reuse) steps and ("finish", seq) steps,
run in order. Its pool is sized from the plan by ``_account`` before anything runs, so that what the
plan asks for is possible for any correct implementation, whatever it evicts first.

    _chat_and_neighbour           a 3-turn chat, then a second chat sharing its system prompt (reuse
                                  equal to a brute-force longest match)
    _branches_inside_edges        prompts leaving a cached prompt inside an edge (splits)
    _side_by_side_under_pressure  three chats, two requests at a time, in a pool that forces evictions
"""

from __future__ import annotations

import functools
import random
from typing import Any, NamedTuple

from ....workloads import multi_turn_chats, random_tokens
from ...reading.ledger import ceil_div
from ...story import Story
from .radix_server import RadixModelServer
from .request_server import BLOCK, DECODE_STEPS, VOCAB

__all__ = ["SCENARIOS", "model_story"]

Plan = list[tuple]


def _held_by_one_request(prompt: list[int], earlier: list[list[int]]) -> int:
    """The most blocks a correct implementation holds on one running request's behalf.

    Its table: the prompt plus DECODE_STEPS tokens, in whole blocks. Plus one when the prompt ends
    on a block boundary and an earlier prompt starts with all of it: match (which leaves out the
    last token) cannot hand that last block over, so insert keeps the tree's copy, locked, beside
    the table's own. Nothing is assumed shared with other requests (a correct tree may have evicted
    what they could have shared).
    """
    duplicate = len(prompt) % BLOCK == 0 and any(other[: len(prompt)] == prompt for other in earlier)
    return ceil_div(len(prompt) + DECODE_STEPS, BLOCK) + duplicate


def _account(plan: Plan) -> tuple[int, int, int]:
    """(running, unevicted, tree) blocks of ``plan`` for any correct implementation.

    ``running``: the most blocks the requests running at one time hold (tables and locked tree
    blocks): every other block is an unlocked tree block that evict can free, so a pool of at least
    this many blocks can serve the plan. ``unevicted``: a bound on the blocks in use if nothing is
    ever evicted (every distinct whole-block prefix served so far in the tree, plus the running
    requests): a pool of at least this many never runs short. ``tree``: the distinct whole-block
    prefixes of all the plan's prompts, which a tree that never evicts holds at the end: a pool of
    fewer blocks forces evictions.
    """
    held: dict[str, int] = {}
    served: list[list[int]] = []
    prefixes: set[tuple[int, ...]] = set()
    running = unevicted = 0
    for step in plan:
        if step[0] == "finish":
            del held[step[1]]
            continue
        _, seq, prompt, _, _ = step
        held[seq] = _held_by_one_request(prompt, served)
        served.append(prompt)
        prefixes |= {tuple(prompt[:end]) for end in range(BLOCK, len(prompt) + 1, BLOCK)}
        running = max(running, sum(held.values()))
        unevicted = max(unevicted, len(prefixes) + sum(held.values()))
    return running, unevicted, len(prefixes)


class _Scenario(NamedTuple):
    """A scenario's name in messages, its pool, and the plan to run in it."""

    name: str
    pool: int
    plan: Plan


def _without_pressure(what: str, plan: Plan) -> _Scenario:
    """A pool that never runs short (the account's ``unevicted`` bound, and at least 48 blocks): these
    scenarios expect the brute-force reuse, which counts every prompt served as still cached."""
    pool = max(48, _account(plan)[1])
    return _Scenario(f"{what} (pool of {pool})", pool, plan)


def _chat_and_neighbour(rng: random.Random) -> _Scenario:
    """Three turns of a chat, then a second chat's first turn sharing the system prompt; no pressure."""
    chats = multi_turn_chats(2, 3, 8, (3, 6), (4, 8), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    for turn, prompt in enumerate(chats[0]):
        plan += [("serve", f"chat0-turn{turn}", prompt, f"chat 0, turn {turn}", True), ("finish", f"chat0-turn{turn}")]
    plan.append(("serve", "chat1-turn0", chats[1][0], "chat 1, turn 0", True))
    return _without_pressure("a 3-turn chat, then a second chat", plan)


def _branches_inside_edges(rng: random.Random) -> _Scenario:
    """A 5-block prompt, then prompts leaving it after 2 and 3 blocks (splits), then it again."""
    base = random_tokens(21, VOCAB, rng)
    prompts = [
        ("the 21-token prompt", base),
        ("a prompt leaving it after 2 blocks", base[:8] + random_tokens(7, VOCAB, rng)),
        ("a prompt leaving it after 3 blocks", base[:12] + random_tokens(6, VOCAB, rng)),
        ("the 21-token prompt again", base),
    ]
    plan: Plan = []
    for number, (name, prompt) in enumerate(prompts):
        plan.append(("serve", f"request{number}", prompt, name, True))
        if number % 2:
            plan += [("finish", f"request{number - 1}"), ("finish", f"request{number}")]
    return _without_pressure("prompts branching inside a cached edge", plan)


def _side_by_side_under_pressure(rng: random.Random) -> _Scenario:
    """Three chats of four turns, two requests running at once, in a pool that forces evictions.

    The pool is 18 blocks, or fewer when the chats are short (one block fewer than their tree would
    hold, so that evictions are still forced), or more when two requests running side by side hold
    more (the account's ``running`` bound: never a plan that a correct implementation cannot serve).
    """
    chats = multi_turn_chats(3, 4, 4, (2, 5), (3, 6), VOCAB, seed=rng.randrange(2**31)).turns
    plan: Plan = []
    running: list[str] = []
    for turn in range(4):
        for chat in rng.sample(range(3), 3):
            seq = f"chat{chat}-turn{turn}"
            plan.append(("serve", seq, chats[chat][turn], f"chat {chat}, turn {turn}", False))
            running.append(seq)
            if len(running) > 1:
                plan.append(("finish", running.pop(0)))
    held, _, tree = _account(plan)
    pool = max(held, min(18, tree - 1))
    return _Scenario(f"three chats of four turns, two requests at once (pool of {pool})", pool, plan)


# Each draws its prompts from the check's rng, in this order, before any model runs.
SCENARIOS = (_chat_and_neighbour, _branches_inside_edges, _side_by_side_under_pressure)


def _run(RadixCache: Any, PagedKVCache: Any, scenario: _Scenario, seed: int) -> None:
    server = RadixModelServer(RadixCache, PagedKVCache, scenario.pool, scenario.name, seed)
    for step in scenario.plan:
        if step[0] == "serve":
            _, seq, prompt, name, expect_reuse = step
            server.serve(seq, prompt, name, expect_reuse=expect_reuse)
        else:
            server.finish(step[1])
    server.drain()


def _planned(make: Any, RadixCache: Any, PagedKVCache: Any, rng: random.Random, *, seed: int) -> None:  # noqa: N803
    """One scenario: planned from ``rng`` before any model runs (``make``), then served."""
    _run(RadixCache, PagedKVCache, make(rng), seed)


def model_story(seed: int) -> Story:
    """The check's story for one call: every scenario planned from the rng, then served on the model of ``seed``."""
    return Story(
        visible=tuple(functools.partial(_planned, make, seed=seed) for make in SCENARIOS),
        told=f"{len(SCENARIOS)} scenarios, every prefilled and decoded row equal to a from-scratch run",
    )
