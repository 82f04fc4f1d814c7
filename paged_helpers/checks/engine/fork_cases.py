"""The fork stage's cases: ``_fork_samples`` making a request's samples, ``_finish`` reporting them.

Fork         a request of n samples whose prompt was just prefilled: n - 1 samples returned, appended
             to running, each its own Sequence with its own seed, sharing the prompt's blocks
FinishOrder  the samples of one request finishing one per step, out of index order: reported once,
             by sample index
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ...serving import Sequence, sample_seed
from ..reading.calls import call_learner
from ..reading.ledger import ceil_div
from ..reading.strict import learner_list
from ..speaking.failure import fail
from ..speaking.hidden import redraw_until
from . import engine_reads
from .diagnosis import finish_order_bug
from .hand_built import BLOCK_SIZE, decoding, engine_for, place, token_range


@dataclass(frozen=True)
class Fork:
    """_fork_samples on a request of ``n`` samples whose ``prompt``-token prompt was just prefilled,
    behind ``others`` decoding sequences of other requests."""

    n: int
    seed: int
    prompt: int
    max_new: int
    temperature: float
    others: int

    @classmethod
    def draw(cls, rng: random.Random) -> Fork:
        """A request of 6 samples behind 2 other sequences (fixed, not drawn: the most a fork ever had)."""
        return cls(6, rng.getrandbits(31), rng.randint(2, 24), rng.randint(1, 8), rng.choice((0.5, 1.0)), 2)

    def run(self, classes) -> None:
        n, seed, length = self.n, self.seed, self.prompt
        scenario = f"forking a request with n={n}, seed {seed}, whose {length}-token prompt was just prefilled"
        engine, cache, _ = engine_for(*classes, ceil_div(length, BLOCK_SIZE) + 2 * self.others + 4, scenario)
        others = [place(engine, decoding(f"other{i}", 5, 1, start=60 + 10 * i), 5) for i in range(self.others)]
        parent = Sequence(
            "r", "r", token_range(1, length), self.max_new, n=n, seed=sample_seed(seed, 0), temperature=self.temperature
        )
        engine.request_seeds["r"] = seed
        engine.finished_samples["r"] = {}
        parent = place(engine, parent, length)
        table = engine_reads.tables(cache, scenario)["r"]
        children = call_learner("_fork_samples(parent)", engine._fork_samples, parent, scenario=scenario)
        if children is not None:
            children = learner_list(children, "what _fork_samples returned", scenario, engine_reads.as_is)
        children = children or []
        running = engine_reads.queue(engine, "running", scenario)
        if len(children) != n - 1 or not engine_reads.same(running, [*others, parent, *children]):
            fail(
                f"{scenario}: running after the fork",
                f"{n - 1} new samples returned and appended to running: "
                f"{engine_reads.names(others) + ['r']} + the samples",
                f"returned {len(children)}; running {[getattr(seq, 'seq_id', seq) for seq in running]}",
                "create the samples 1..n-1, append them to self.running (they are the newest) and return them: "
                "_advance draws a first token for each sample _fork_samples returns",
            )
        for index, child in enumerate(children, start=1):
            self.expect_sample(scenario, cache, parent, children, index, child, table)
        pool = engine_reads.pool_refs(cache, scenario)
        refs = [pool[block] for block in table]
        forked = engine_reads.fields(parent, ["forked"], scenario)["forked"]
        if refs != [n] * len(table) or forked is not True:  # "(missing)" is no fork
            fail(
                f"{scenario}: the prompt's blocks after the fork",
                f"reference count {n} on each of {table} (parent + {n - 1} samples), parent.forked True",
                f"counts {refs}, parent.forked {forked}",
                "fork each sample once through cache.fork, and mark the parent forked so it is not forked again",
            )

    def expect_sample(self, scenario, cache, parent, children, index, child, table) -> None:
        expected = dict(
            request_id="r",
            prompt=token_range(1, self.prompt),
            max_new_tokens=self.max_new,
            n=self.n,
            sample_index=index,
            seed=sample_seed(self.seed, index),
            temperature=self.temperature,
            output=[],
            num_cached=self.prompt,
            forked=True,
        )
        got = engine_reads.fields(child, expected, scenario)
        if got != expected:
            wrong = [name for name in expected if got[name] != expected[name]]
            fail(
                f"{scenario}: sample {index}",
                expected,
                got,
                f"wrong: {wrong}. Sample i is a new Sequence of the same request with sample_index=i, its own "
                "seed sample_seed(self.request_seeds[request_id], i), the parent's num_cached and forked=True",
            )
        others = ["r", *[engine_reads.seq_id(c, scenario) for c in children if c is not child]]
        sid = engine_reads.seq_id(child, scenario)
        if child.output is parent.output or sid in others:
            fail(
                f"{scenario}: sample {index}",
                "a sequence of its own: a distinct seq_id and its own output list",
                f"seq_id {sid!r}, output shared with the parent: {child.output is parent.output}",
                "build a new Sequence (copy.copy(parent) shares the output list, so every sample would append "
                "to the same tokens), with a seq_id such as f'{request_id}/{i}'",
            )
        tables, lengths = engine_reads.tables(cache, scenario), engine_reads.lengths(cache, scenario)
        if tables.get(sid) != table or lengths.get(sid) != self.prompt:
            fail(
                f"{scenario}: sample {index} in the cache",
                f"a fork of 'r': table {table}, length {self.prompt}",
                f"table {tables.get(sid)}, length {lengths.get(sid)}",
                "cache.fork(parent.seq_id, child.seq_id) shares the prompt's blocks: no copy, no recomputation",
            )


@dataclass(frozen=True)
class FinishOrder:
    """_finish on the ``n`` samples of one request, finishing one per step in ``order``.

    In the notebook's engine a request's samples usually finish together, in index order, so served
    workloads cannot tell a report in finishing order from one by index: here they finish apart.
    """

    n: int
    order: tuple[int, ...]
    max_new: int

    @classmethod
    def draw(cls, rng: random.Random) -> FinishOrder:
        """6 samples (fixed, not drawn: the most a request ever had), finishing in a drawn order other than
        by index."""
        n = 6
        order = list(range(n))

        def shuffled() -> tuple[int, ...]:
            rng.shuffle(order)
            return tuple(order)

        return cls(n, redraw_until(shuffled, lambda drawn: list(drawn) != sorted(drawn)), rng.randint(1, 4))

    def run(self, classes) -> None:
        n, max_new, order = self.n, self.max_new, self.order
        scenario = (
            f"a request with n={n} whose samples finish in {n} steps, in the order {list(order)} "
            "(_finish called once per sample, with that step's `finished` dict)"
        )
        engine, _, _ = engine_for(*classes, 16 + n, scenario)
        prompt = token_range(1, 6)
        what = f"add_request('s', prompt, {max_new}, n={n}, seed=5, temperature=1.0)"
        call_learner(what, engine.add_request, "s", prompt, max_new, n, 5, 1.0, scenario=scenario)
        waiting = engine_reads.queue(engine, "waiting", scenario)
        parent = waiting[0]
        engine.waiting.remove(parent)
        parent = place(engine, parent, len(prompt))
        children = call_learner("_fork_samples(parent)", engine._fork_samples, parent, scenario=scenario)
        samples = [parent, *learner_list(children, "what _fork_samples returned", scenario, engine_reads.as_is)]
        outputs = [[200 + 10 * index + step for step in range(max_new)] for index in range(n)]
        for sample, tokens in zip(samples, outputs, strict=True):
            sample.output = list(tokens)  # as if decoded: max_new_tokens each, so each sample is finished
        reported = []
        for index in order:
            finished: dict = {}
            call_learner(
                f"_finish(sample {index}, finished)", engine._finish, samples[index], finished, scenario=scenario
            )
            reported.append(engine_reads.step_outputs(finished, scenario))
        expected = [{}] * (n - 1) + [{"s": outputs}]
        if reported != expected:
            fail(
                f"{scenario}: what _finish reported",
                f"nothing until the last sample finishes, then {{'s': {outputs}}}: the outputs of samples "
                f"0 .. {n - 1}, in that order",
                f"step by step: {reported}{finish_order_bug(reported, outputs, order)}",
                "a request's result lists its samples by sample_index (0 .. n - 1), whatever order they finished "
                "in: keep each output under its index (finished_samples[request_id][seq.sample_index]) and build "
                "the list from indices 0 .. n - 1 once all n are in",
            )
