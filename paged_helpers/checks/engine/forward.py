"""_forward alone: the one method of notebook 08's engine that no stage check runs.

``check_engine``'s batching part runs this first, so that what ``_forward`` gets wrong is scored there
whatever the stages do (a stage bug stops a served workload before the forward pass is proven), and
the other parts leave a failure that may come from ``_forward`` to it (``attribution``), as they leave
a stage's failure to the stage's check. The check makes the plans itself: no other method of the
learner's engine runs, only their cache's create and reserve (notebook 04) before each pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...serving import Sequence
from ..reading.calls import call_learner
from ..reading.learner_code import transfer
from ..reading.scratch import expect_from_scratch
from ..reading.strict import learner_dict, learner_tensor
from ..speaking.failure import fail
from .blame import whole_engine_only
from .diagnosis import FORWARD_HINT
from .watch import VOCAB, Watch, build, model

__all__ = ["FORWARD_PLANS", "FORWARD_PROMPTS", "forward_alone"]

# _forward on plans the check makes itself: three prompts (lengths), prefilled from position 0 in a plan
# of three chunk lengths, then a plan of two groups: a decoder and a prompt's last token (count 1, at other
# positions in one batch) and a prompt's next chunk (count 2). (index of the sequence, count) per chunk.
FORWARD_PROMPTS = (9, 6, 5)
FORWARD_PLANS = (((0, 8), (1, 6), (2, 3)), ((1, 1), (0, 1), (2, 2)))


def forward_alone(engine_class, cache_class, prefix_class, tokens: Callable[[Iterable[int]], list[int]] = list) -> None:
    """_forward alone, the one method of the engine no stage check runs: two plans made by the check (no
    other method of the engine runs), each chunk's logits held to a run from scratch. What fails here is
    _forward's, whatever the stages do (``blame.whole_engine_only``). ``tokens`` maps the check's token ids
    to the ones served (a hidden call's relabelling; the ids themselves by default)."""
    lengths = ", ".join(f"'f{i}' ({length} tokens)" for i, length in enumerate(FORWARD_PROMPTS))
    plans = [", ".join(f"('f{i}', {count})" for i, count in plan) for plan in FORWARD_PLANS]
    scenario = (
        f"your _forward alone, on two plans the check makes (prompts {lengths}): plan 1 [{plans[0]}] from "
        f"position 0; plan 2, 'f1' having drawn a token, [{plans[1]}]"
    )
    with whole_engine_only():
        watch = Watch(scenario)
        engine, cache, _ = build(engine_class, cache_class, prefix_class, watch, 16, 4, 8, 24)
        known, seqs = [], []
        for index, length in enumerate(FORWARD_PROMPTS):
            sid, start = f"f{index}", 10 + 30 * index
            known.append(tokens(range(start, start + length)))
            seqs.append(transfer(engine, Sequence(sid, sid, list(known[index]), 4)))
            call_learner(f"cache.create({sid!r})", cache.create, sid, scenario=scenario)
        cached = [0] * len(seqs)
        for number, plan in enumerate(FORWARD_PLANS):
            watch.unit, watch.step = "plan", number + 1
            if number:  # 'f1' has computed its prompt and drawn its first token: it decodes
                token = tokens([7])[0]
                seqs[1].output = [token]
                known[1].append(token)
            _one_plan(engine, cache, watch, scenario, plan, seqs, known, cached)


def _one_plan(engine, cache, watch: Watch, scenario: str, plan, seqs: list, known: list, cached: list[int]) -> None:
    """Reserve ``plan``'s chunks, run the learner's _forward on it, and hold each chunk's logits to a run
    from scratch of its sequence's known tokens; ``cached[index]`` then counts the chunk, as _advance would."""
    for index, count in plan:
        call_learner(f"cache.reserve('f{index}', {count})", cache.reserve, f"f{index}", count, scenario=scenario)
    chunks = [(seqs[index], count) for index, count in plan]
    where = watch.where()
    logits = learner_dict(
        call_learner("_forward(plan)", engine._forward, chunks, scenario=scenario),
        "what _forward returned",
        where,
        learner_tensor,
    )
    expected = sorted(f"f{index}" for index, _ in plan)
    if sorted(logits, key=repr) != expected:
        fail(
            where,
            f"logits for {expected} (one per planned sequence)",
            f"logits for {sorted(logits, key=repr)}",
            FORWARD_HINT,
        )
    for index, count in plan:
        end = cached[index] + count
        got = logits[f"f{index}"]
        if tuple(got.shape) != (VOCAB,):
            fail(
                f"{where}: the logits of 'f{index}'",
                f"a tensor of shape [{VOCAB}] (the vocabulary): the logits of the chunk's last token",
                f"shape {list(got.shape)}",
                FORWARD_HINT,
            )
        expect_from_scratch(
            model(),
            known[index][:end],
            got.reshape(1, VOCAB),
            scenario=f"{where}: the logits of 'f{index}'",
            hint=FORWARD_HINT,
        )
        cached[index] = seqs[index].num_cached = end  # as _advance would count it
