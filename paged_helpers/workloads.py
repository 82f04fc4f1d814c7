"""Seeded request generators: the same seed gives the same requests on every machine.

Lengths and token ids come from ``random.Random(seed)``, never from global random state,
so a check, a notebook cell and ``run.py`` see identical workloads.

Request-length workloads by name (``workload_lengths``): ``uniform`` is the chapter's seeded
uniform draw; every other name is a trace in the data folder's ``workloads/NAME.json`` (request
lengths shaped after the vLLM paper's ShareGPT and Alpaca statistics; each file says how).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

UNIFORM = "uniform"
UNIFORM_CAPACITY = 1024  # the chapter's static slot, tokens
# The seed whose uniform draw is the chapter's figure (32 requests holding 9924 tokens); every
# request-length workload defaults to it, so run.py paged and notebook 01 print the chapter's numbers.
CHAPTER_LENGTHS_SEED = 2


def request_lengths(
    count: int = 32, shortest: int = 20, longest: int = 500, seed: int = CHAPTER_LENGTHS_SEED
) -> list[int]:
    """Token counts of ``count`` live requests, uniform in [shortest, longest).

    Drawn with torch's CPU generator (the same numbers on every machine): the defaults give the
    chapter's 32 requests, 9924 tokens in all.
    """
    import torch

    if not 0 < shortest < longest:
        raise ValueError(f"need 0 < shortest < longest, got shortest={shortest}, longest={longest}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(shortest, longest, (count,), generator=generator).tolist()


@dataclass(frozen=True)
class LengthTrace:
    """Input and output lengths (tokens) of recorded-style requests, with where they come from."""

    name: str
    source: str
    how_made: str
    static_capacity: int  # the slot a static-slot server reserves per request, tokens
    input_tokens: list[int] = field(repr=False)
    output_tokens: list[int] = field(repr=False)

    @property
    def total_tokens(self) -> list[int]:
        """Tokens each request holds in the KV cache once its last output token is written."""
        return [i + o for i, o in zip(self.input_tokens, self.output_tokens, strict=True)]


def workload_names() -> list[str]:
    """``uniform`` and the name of every trace file in the data folder."""
    from .data_files import data_path

    return [UNIFORM, *sorted(path.stem for path in data_path("workloads").glob("*.json"))]


def length_trace(name: str) -> LengthTrace:
    """The trace ``data/workloads/NAME.json``."""
    from .data_files import data_path

    names = workload_names()
    if name not in names[1:]:
        raise ValueError(f"workload must be one of {names}, got {name!r}")
    raw = json.loads(data_path("workloads", f"{name}.json").read_text())
    return LengthTrace(
        name=name,
        source=raw["source"],
        how_made=raw["how_made"],
        static_capacity=raw["static_capacity"],
        input_tokens=raw["input_tokens"],
        output_tokens=raw["output_tokens"],
    )


def workload_capacity(name: str) -> int:
    """The static slot (tokens) that fits every request of the workload."""
    return UNIFORM_CAPACITY if name == UNIFORM else length_trace(name).static_capacity


def workload_lengths(name: str = UNIFORM, count: int = 32, seed: int = CHAPTER_LENGTHS_SEED) -> list[int]:
    """Token counts of ``count`` live requests of the named workload.

    ``uniform``: ``request_lengths(count, seed=seed)``. A trace: ``count`` of its requests drawn
    without replacement by ``random.Random(seed)``, each holding input + output tokens.
    """
    if name == UNIFORM:
        return request_lengths(count, seed=seed)
    totals = length_trace(name).total_tokens
    if not 0 < count <= len(totals):
        raise ValueError(f"count must be between 1 and {len(totals)} for the workload {name!r}, got {count}")
    return [totals[index] for index in random.Random(seed).sample(range(len(totals)), count)]


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


# --- Prompts that share prefixes in different ways (notebook 10, run.py radix) ------------------


@dataclass(frozen=True)
class ChatWorkload:
    """Seeded multi-turn chats: ``turns[c][t]`` is the prompt of turn t of conversation c.

    Each prompt is the whole conversation so far: a system prompt every conversation shares, then
    user message 1, reply 1, ..., user message t. So turn t + 1's prompt starts with turn t's, plus
    the reply to it and the next user message: the cache hits only if turn t's blocks survived.
    """

    turns: list[list[list[int]]] = field(repr=False)
    parameters: dict
    name: str = "multi_turn_chats"  # the generator that made it

    @property
    def requests(self) -> int:
        return sum(len(conversation) for conversation in self.turns)

    @property
    def prompt_tokens(self) -> int:
        return sum(len(prompt) for conversation in self.turns for prompt in conversation)


def _length(rng: random.Random, bounds: tuple[int, int], name: str) -> int:
    low, high = bounds
    if not 0 < low <= high:
        raise ValueError(f"{name} must be (low, high) with 0 < low <= high, got {bounds!r}")
    return rng.randint(low, high)


def _check_chat_sizes(conversations: int, turns: int, system_tokens: int) -> None:
    """ValueError unless there are chats and turns to make and the system prompt's length is not negative."""
    if conversations < 1 or turns < 1 or system_tokens < 0:
        raise ValueError(
            "conversations and turns must be positive and system_tokens non-negative, got "
            f"{conversations}, {turns}, {system_tokens}"
        )


def multi_turn_chats(
    conversations: int = 12,
    turns: int = 6,
    system_tokens: int = 32,
    user_tokens: tuple[int, int] = (8, 24),
    reply_tokens: tuple[int, int] = (16, 48),
    vocab_size: int = 256,
    seed: int = 0,
) -> ChatWorkload:
    """``conversations`` chats of ``turns`` turns each; see ChatWorkload."""
    _check_chat_sizes(conversations, turns, system_tokens)
    rng = random.Random(seed)
    system = random_tokens(system_tokens, vocab_size, rng)
    chats = []
    for _ in range(conversations):
        history, prompts = list(system), []
        for turn in range(turns):
            if turn:  # the reply to the previous turn is part of this turn's prompt
                history += random_tokens(_length(rng, reply_tokens, "reply_tokens"), vocab_size, rng)
            history += random_tokens(_length(rng, user_tokens, "user_tokens"), vocab_size, rng)
            prompts.append(list(history))
        chats.append(prompts)
    parameters = {
        "conversations": conversations,
        "turns": turns,
        "system_tokens": system_tokens,
        "user_tokens": list(user_tokens),
        "reply_tokens": list(reply_tokens),
        "vocab_size": vocab_size,
        "seed": seed,
    }
    return ChatWorkload(chats, parameters)


def few_shot_prompts(
    count: int = 16,
    instruction_tokens: int = 16,
    examples: int = 6,
    shots: int = 3,
    example_tokens: tuple[int, int] = (16, 32),
    question_tokens: int = 8,
    vocab_size: int = 256,
    seed: int = 0,
) -> list[list[int]]:
    """Prompts of one instruction, ``shots`` of a pool of ``examples`` in a seeded order, a question.

    Two prompts share the instruction and then only as many examples as they list in the same
    order: a prefix cache reuses exactly that run, whatever else they have in common.
    """
    if not 0 < shots <= examples:
        raise ValueError(f"shots must be between 1 and examples ({examples}), got {shots}")
    rng = random.Random(seed)
    instruction = random_tokens(instruction_tokens, vocab_size, rng)
    pool = [random_tokens(_length(rng, example_tokens, "example_tokens"), vocab_size, rng) for _ in range(examples)]
    prompts = []
    for _ in range(count):
        chosen = rng.sample(range(examples), shots)
        body = [token for index in chosen for token in pool[index]]
        prompts.append(instruction + body + random_tokens(question_tokens, vocab_size, rng))
    return prompts


def document_questions(
    questions: int = 16,
    document_tokens: int = 256,
    question_tokens: tuple[int, int] = (8, 16),
    vocab_size: int = 256,
    seed: int = 0,
) -> list[list[int]]:
    """One shared document followed by each of ``questions`` different questions."""
    rng = random.Random(seed)
    document = random_tokens(document_tokens, vocab_size, rng)
    return [
        document + random_tokens(_length(rng, question_tokens, "question_tokens"), vocab_size, rng)
        for _ in range(questions)
    ]


def trace_chats(
    trace: str = "sharegpt",
    conversations: int = 12,
    turns: int = 3,
    system_tokens: int = 32,
    vocab_size: int = 256,
    seed: int = 0,
) -> ChatWorkload:
    """Multi-turn chats whose message lengths follow a length trace of ``data/workloads/`` (notebook 11,
    ``run.py route --workload sharegpt``): each turn's user message and the reply to it take the input
    and output lengths of one request of the trace, drawn by ``random.Random(seed)``. The tokens are
    random; only the lengths come from the trace. See ChatWorkload for how the prompts grow."""
    _check_chat_sizes(conversations, turns, system_tokens)
    lengths = length_trace(trace)
    pairs = list(zip(lengths.input_tokens, lengths.output_tokens, strict=True))
    rng = random.Random(seed)
    system = random_tokens(system_tokens, vocab_size, rng)
    chats = []
    for _ in range(conversations):
        history, prompts, reply = list(system), [], 0
        for _turn in range(turns):
            history += random_tokens(reply, vocab_size, rng)  # the previous turn's reply
            user, reply = rng.choice(pairs)
            history += random_tokens(user, vocab_size, rng)
            prompts.append(list(history))
        chats.append(prompts)
    parameters = {
        "trace": trace,
        "conversations": conversations,
        "turns": turns,
        "system_tokens": system_tokens,
        "vocab_size": vocab_size,
        "seed": seed,
    }
    return ChatWorkload(chats, parameters, f"trace_chats({trace})")
