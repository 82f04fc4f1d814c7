"""Seeded request generators: the same seed gives the same requests on every machine.

Lengths and token ids come from ``random.Random(seed)``, never from global random state,
so a check, a notebook cell and ``run.py`` see identical workloads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


def request_lengths(count: int = 32, shortest: int = 20, longest: int = 500, seed: int = 0) -> list[int]:
    """Token counts of ``count`` live requests, uniform in [shortest, longest]."""
    if not 0 < shortest <= longest:
        raise ValueError(f"need 0 < shortest <= longest, got shortest={shortest}, longest={longest}")
    rng = random.Random(seed)
    return [rng.randint(shortest, longest) for _ in range(count)]


def random_tokens(length: int, vocab_size: int, rng: random.Random) -> list[int]:
    return [rng.randrange(vocab_size) for _ in range(length)]


def shared_prefix_prompts(
    count: int = 8, prefix_tokens: int = 96, own_tokens: int = 8, vocab_size: int = 256, seed: int = 0
) -> list[list[int]]:
    """``count`` prompts: one system prompt of ``prefix_tokens``, then ``own_tokens`` each."""
    rng = random.Random(seed)
    system = random_tokens(prefix_tokens, vocab_size, rng)
    return [system + random_tokens(own_tokens, vocab_size, rng) for _ in range(count)]


def fork_prompt(length: int = 40, vocab_size: int = 256, seed: int = 0) -> list[int]:
    """One prompt to fork from (parallel sampling, beam search)."""
    return random_tokens(length, vocab_size, random.Random(seed))


@dataclass(frozen=True)
class Request:
    """One request of a serving workload."""

    request_id: str
    prompt: list[int] = field(repr=False)
    max_new_tokens: int
    arrival_step: int = 0


def serving_workload(
    count: int = 32,
    vocab_size: int = 256,
    prompt_range: tuple[int, int] = (20, 200),
    output_range: tuple[int, int] = (8, 64),
    shared_prefix_share: float = 0.5,
    shared_prefix_tokens: int = 64,
    arrival_every: int = 0,
    seed: int = 0,
) -> list[Request]:
    """Mixed lengths, and a share of requests that start with one common system prompt.

    ``arrival_every`` = 0 puts every request in the queue at step 0; k > 0 lets request i
    arrive at step i * k.
    """
    rng = random.Random(seed)
    system = random_tokens(shared_prefix_tokens, vocab_size, rng)
    requests = []
    for index in range(count):
        prompt = random_tokens(rng.randint(*prompt_range), vocab_size, rng)
        if rng.random() < shared_prefix_share:
            prompt = system + prompt
        requests.append(
            Request(
                request_id=f"r{index:03d}",
                prompt=prompt,
                max_new_tokens=rng.randint(*output_range),
                arrival_step=index * arrival_every,
            )
        )
    return requests
