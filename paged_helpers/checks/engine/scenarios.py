"""The scenario tables of notebook 08's stage checks: the cases each check plays, and its hidden kinds.

Each stage check is a ``Story`` (``checks/story.py``) of case objects: its visible cases (``VISIBLE_*``,
their numbers fixed here) played in order, and its hidden kinds (``*_KINDS``: a description and the
``draw(rng)`` that makes a case from the grader's seed; a hidden call runs every kind, messages
without numbers). A case class holds its sizes, its draw and its ``run`` (in ``front_door``,
``admission_cases``, ``plan_cases``, ``reserve_cases``, ``fork_cases`` and ``advance``).

A draw never makes a kind smaller or easier: how many requests, sequences and samples a case holds is
fixed at the largest the kind runs (``QUEUE_REQUESTS``, ``BATCH_SEQUENCES``, ``POOL_SEQUENCES``,
``Fork.draw``, ``FinishOrder.draw``, ``advance.EXTRA_CHUNKS``), and what a kind is named for (eviction,
a preemption, every kind of sequence in a batch, a chunk that needs a new block, every kind of chunk)
is in every draw; the seed picks the rest.

The whole engine (``check_engine``, ``whole``) serves fixed workloads instead; a hidden call serves them
relabelled (``Relabelled``, last here).

To add a case to a stage: a case class with ``draw`` and ``run`` in that stage's module, then a row here.
"""

from __future__ import annotations

import dataclasses
import functools
import random

from ...workloads import Request
from ..reading.ledger import ceil_div
from ..story import Story, drawn, ran
from .admission_cases import Idle, Queue, Spare
from .advance import ADVANCE_KINDS, VISIBLE_STEP
from .fork_cases import FinishOrder, Fork
from .front_door import FrontDoor
from .hand_built import BLOCK_SIZE
from .plan_cases import Batch
from .reserve_cases import Pool
from .watch import VOCAB

# ---------------------------------------------------------------- admission and rejection

# 10 blocks: the spare 1% is 0 blocks rounded down and 1 rounded up, and the answer is the same either
# way: 'b' fits only by evicting 1 or 2 of the two cached blocks nobody uses, and 'c' fits in neither.
VISIBLE_QUEUE = Queue(10, 4, 2, (("a", True, 5), ("b", False, 20), ("c", True, 16)))
VISIBLE_ADMISSION = (
    FrontDoor(9, (9 * BLOCK_SIZE - 1, 2), (9 * BLOCK_SIZE - 4, 4), 6, (20, 12), 2, 7, 0.0),
    VISIBLE_QUEUE,
    Idle(100, 4, 1),
    Spare(100, 200, 200),
)
ADMISSION_KINDS = {
    "the front door: a request too long for the pool, one of exactly the pool, one that fits later": FrontDoor.draw,
    "a queue behind a cached prompt: admission in order, eviction, the first that does not fit": Queue.draw,
    "an idle engine admitting a request of the whole pool": Idle.draw,
    "two prompts that fill the pool but leave less than its 1% spare": Spare.draw,
}
ADMISSION_TOLD = "4 scenarios (the front door, a queue with a cached prefix, an idle engine, the spare 1%)"

# ---------------------------------------------------------------- planning a step


VISIBLE_BATCHES = (
    Batch(
        "decoders d0, d2 and prefills p1 (20 pending), p3 (5), p4 (30), p5 (12)",
        (
            ("decode", 6, 2),
            ("prefill", 20, 0),
            ("decode", 9, 1),
            ("prefill", 9, 4),
            ("prefill", 30, 0),
            ("prefill", 12, 0),
        ),
        8,
        24,
    ),
    Batch(
        "four decoders and a prefill (3 tokens a step: fewer than the decoders)",
        (("decode", 5, 1), ("decode", 5, 2), ("decode", 5, 3), ("decode", 5, 4), ("prefill", 10, 0)),
        8,
        3,
    ),
    Batch(
        "a sequence readmitted after preemption (prompt 6 + output 5, nothing cached) behind a decoder",
        (("decode", 6, 3), ("back", 6, 5)),
        4,
        16,
    ),
)
PLAN_KINDS = {
    "a running batch of decoders, prefills and readmitted sequences": Batch.draw,
    "another running batch, with its own chunk size and budget": Batch.draw,
}

# ---------------------------------------------------------------- reserve, evict, preempt


VISIBLE_POOLS = (
    Pool(
        "room for everything: 16 blocks, 'a' prefilling 8 of 10 tokens, 'b' decoding at position 6",
        16,
        0,
        (("a", "prefill", 10, 0, 8), ("b", "decode", 5, 2, 1)),
        False,
    ),
    Pool(
        "out of memory, a cached prompt nobody uses: 6 blocks, 2 of them cached, 'a' decoding at position 16",
        6,
        2,
        (("a", "decode", 12, 5, 1),),
        False,
    ),
    Pool(
        "out of memory, nothing to evict: 8 blocks; 'a' decodes at 16, 'b' at 6, 'c' (newest) at 7; 'w' waits",
        8,
        0,
        (("a", "decode", 12, 5, 1), ("b", "decode", 5, 2, 1), ("c", "decode", 6, 2, 1)),
        True,
    ),
    Pool(
        "the newest asks: 8 blocks; 'a' decodes at 16 (4 blocks), 'b' (newest) at 12 (3 blocks); 'w' waits",
        8,
        0,
        (("a", "decode", 12, 5, 1), ("b", "decode", 10, 3, 1)),
        True,
    ),
)
RESERVE_KINDS = {
    "a pool with room for every planned chunk": functools.partial(Pool.draw, want="room"),
    "a pool that runs short, where evicting the cached prompt is enough": functools.partial(Pool.draw, want="evict"),
    "a pool that runs short with several sequences running: someone is preempted": functools.partial(
        Pool.draw, want="preempt"
    ),
}

# ---------------------------------------------------------------- sampling by fork


VISIBLE_FORKS = (Fork(3, 5, 10, 4, 1.0, 1), FinishOrder(3, (2, 0, 1), 2))
FORK_KINDS = {
    "forking a request whose prompt was just prefilled": Fork.draw,
    "a request whose samples finish out of order": FinishOrder.draw,
}

# ---------------------------------------------------------------- the stories


def _story(visible: tuple, kinds: dict, told: str) -> Story:
    """A stage's story: its visible cases played in order; each hidden kind a case drawn from the seed.
    Every case plays on ``classes``, the learner's (engine, cache, prefix cache)."""
    return Story(
        visible=tuple(ran(case) for case in visible),
        hidden={description: drawn(draw) for description, draw in kinds.items()},
        told=told,
    )


def _fork_told() -> str:
    fork = VISIBLE_FORKS[0]
    shared = ceil_div(fork.prompt, BLOCK_SIZE)
    return f"{fork.n} samples sharing {shared} blocks; a request whose samples finish out of order"


ADMISSION_STORY = _story(VISIBLE_ADMISSION, ADMISSION_KINDS, ADMISSION_TOLD)
PLAN_STORY = _story(VISIBLE_BATCHES, PLAN_KINDS, f"{len(VISIBLE_BATCHES)} running batches")
RESERVE_STORY = _story(VISIBLE_POOLS, RESERVE_KINDS, f"{len(VISIBLE_POOLS)} pools")
FORK_STORY = _story(VISIBLE_FORKS, FORK_KINDS, _fork_told())
# ADVANCE_KINDS names the case class (its draw is ``Step.draw``), as the advance tests read it.
ADVANCE_STORY = Story(
    visible=(ran(VISIBLE_STEP),),
    hidden={description: drawn(kind.draw) for description, kind in ADVANCE_KINDS.items()},
    told=f"one step of {len(VISIBLE_STEP.chunks)} chunks ({', '.join(chunk.kind for chunk in VISIBLE_STEP.chunks)})",
)


# ---------------------------------------------------------------- the whole engine's draws

HIDDEN_SAMPLES = 5  # n of the hidden sampling request in every draw (fixed, not drawn: the most it ever had)


@dataclasses.dataclass(frozen=True)
class Relabelled:
    """What a part's scenario draws from the seed: ``relabel[token]`` for every token id of its
    workload (None: the visible tokens), the sampling request's seed, and its number of samples
    (``HIDDEN_SAMPLES`` when drawn: never fewer)."""

    relabel: tuple[int, ...] | None = None
    sampling_seed: int = 11
    samples: int = 4

    @classmethod
    def draw(cls, rng: random.Random) -> Relabelled:
        permutation = list(range(VOCAB))
        rng.shuffle(permutation)
        return cls(tuple(permutation), rng.getrandbits(31), HIDDEN_SAMPLES)

    def tokens(self, ids) -> list[int]:
        return list(ids) if self.relabel is None else [self.relabel[token] for token in ids]

    def requests(self, requests: list[Request]) -> list[Request]:
        return [dataclasses.replace(request, prompt=self.tokens(request.prompt)) for request in requests]


VISIBLE_TOKENS = Relabelled()  # a visible call: each part's workload as written
