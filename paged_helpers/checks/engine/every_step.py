"""The rules the watch applies to a whole step() and to every write of its forward pass.

``expect_step`` runs after each watched step(): it called the notebook's phases, computed exactly the
chunks ``_reserve`` kept, finished every sample at its max_new_tokens, and left each sample its own
output list. ``verify_write`` runs on every write to layer 0 of the cache: the positions continue each
sequence, in blocks reserved beforehand and owned alone; it records the writes in the scenario's
``watch.Watch`` (``writes``, ``step_writes``, ``worked_on``). Each rule fails inside ``blame.blamed``,
naming the stages that could break it.
"""

from __future__ import annotations

from ..reading.strict import learner_int, learner_int_list, learner_key, learner_list, learner_tensor, torch_unhooked
from ..speaking.failure import fail
from . import engine_reads
from .blame import ADMISSION, ADVANCE, FORK, FORWARD, RESERVE, blamed
from .diagnosis import preempted_earlier, span


def expect_step(engine, watch) -> None:
    """After a step: it ran the notebook's phases, computed what it kept, and samples own their outputs."""
    if watch.phases != ["_admit", "_plan", "_reserve"]:
        _whole_engine_fails(
            f"{watch.where()}: the phases of step()",
            "step() calls self._admit(), self._plan(), self._reserve(plan), in that order, once each",
            f"called {watch.phases}",
            "keep the notebook's step(): admit, plan, reserve, forward, advance",
        )
    planned = {engine_reads.seq_id(seq, watch.where()): count for seq, count in watch.kept}
    computed = dict(watch.step_writes)
    if computed != planned:
        with blamed(FORWARD):
            fail(
                f"{watch.where()}: the forward pass",
                f"exactly the chunks _reserve kept: {planned}",
                f"tokens computed per sequence: {computed}",
                "_forward runs every kept (seq, count) chunk once, and nothing else",
            )
    running = engine_reads.queue(engine, "running", watch.where())
    done = [engine_reads.seq_id(seq, watch.where()) for seq in running if engine_reads.finished(seq, watch.where())]
    if done:
        with blamed(ADVANCE, FORK):
            fail(
                f"{watch.where()}: after the step, {done} still running",
                "every sample that reached its max_new_tokens finished: freed and out of `running`",
                f"{done} in `running` with all their output tokens",
                "in _advance, after appending a token: if sample.is_finished, self._finish(sample, finished), "
                "which frees the sample and removes it from `running`",
            )
    outputs: dict[int, str] = {}
    for seq in running:
        sid = engine_reads.seq_id(seq, watch.where())
        other = outputs.setdefault(id(seq.output), sid)
        if other != sid:
            with blamed(FORK):
                fail(
                    f"{watch.where()}: samples {other!r} and {sid!r}",
                    "each sample with its own output list",
                    "one list object shared by both: a token appended to one appears in the other",
                    "a fork is a new Sequence whose output starts as a copy of the parent's (list(...)); "
                    "copy.copy(seq) copies the object but shares its lists",
                )


def _whole_engine_fails(scenario: str, expected, got, hint: str) -> None:
    """``fail``, for a rule of step() itself or of _forward: methods no stage check runs."""
    with blamed():
        fail(scenario, expected, got, hint)


def verify_write(cache, positions, watch) -> None:
    """Positions continue each sequence; their blocks exist and belong to it alone."""
    where = watch.where()
    batch = learner_list(cache.batch, "cache.batch", where, learner_key)
    positions = learner_tensor(positions, "the positions given to the model", where)
    with torch_unhooked():
        rows = (positions.expand(len(batch), -1) if positions.ndim == 1 else positions).tolist()
    if len(rows) != len(batch):
        with blamed(FORWARD):
            fail(
                f"{where}: a forward pass of {len(rows)} row(s)",
                f"one row per sequence set_batch named: {batch}",
                f"{len(rows)} row(s) of positions for {len(batch)} sequence(s)",
                "before each model call, cache.set_batch(the seq_ids of exactly that call's rows, in row order): "
                "one call per group of chunks of equal length",
            )
    size = learner_int(cache.block_size, "cache.block_size", where)
    tables, lengths, refs = (
        engine_reads.tables(cache, where),
        engine_reads.lengths(cache, where),
        engine_reads.pool_refs(cache, where),
    )
    for row, seq in enumerate(batch):
        written = learner_int_list(rows[row], f"the positions of {seq!r}", where)
        _expect_positions(watch, seq, written, lengths[seq])
        _expect_own_blocks(watch, seq, written, tables[seq], refs, size)
        watch.step_writes[seq] += len(written)
        watch.worked_on.add(seq)


def _expect_positions(watch, seq, written: list[int], cached: int) -> None:
    """A write continues its sequence: positions ``cached``, ``cached`` + 1, ... (the cache holds ``cached``)."""
    expected = list(range(cached, cached + len(written)))
    if written != expected:
        resumed = preempted_earlier(watch.readmitted[seq])
        # _forward's positions come from num_cached, which _admit, _advance, _preempt and _fork_samples set
        # (a sample starts at its parent's).
        with blamed(FORWARD, ADMISSION, ADVANCE, RESERVE, FORK):
            fail(
                f"{watch.where()}: a forward pass wrote sequence {seq!r} at positions {span(written)}",
                f"positions {span(expected)}: the cache holds {cached} token(s) of {seq!r}, so its next "
                f"chunk starts at position {cached}",
                f"positions {span(written)}",
                "a chunk of `count` tokens starting at num_cached runs at positions num_cached, num_cached "
                f"+ 1, ..., num_cached + count - 1 (the model places and masks tokens by position).{resumed}",
            )


def _expect_own_blocks(watch, seq, written: list[int], table: list[int], refs: list[int], size: int) -> None:
    """A write lands in blocks of ``seq``'s table, reserved before the forward pass and held by it alone;
    each position written is counted in ``watch.writes``."""
    if (written[-1] // size) >= len(table):
        with blamed(RESERVE, FORWARD):  # a chunk not reserved, or one _forward ran longer than planned
            fail(
                f"{watch.where()}: a forward pass wrote sequence {seq!r} up to position {written[-1]}",
                f"at least {written[-1] // size + 1} block(s) in its table, reserved before the forward pass",
                f"{len(table)} block(s) (room for {len(table) * size} tokens)",
                "call cache.reserve(seq_id, count) for every planned chunk before running the model: "
                "writes happen inside the forward pass, where running out of blocks can no longer be "
                "handled",
            )
    for position in written:
        block = table[position // size]
        if refs[block] > 1:
            with blamed(RESERVE, FORK):
                fail(
                    f"{watch.where()}: a forward pass wrote sequence {seq!r} at position {position} into block {block}",
                    "a block this sequence owns alone (reserve copies a shared block before a write)",
                    f"block {block} with reference count {refs[block]}",
                    "reserve every planned chunk before the forward pass; after a fork, reserve is what "
                    "copies the shared last block (copy-on-write)",
                )
        watch.writes[(seq, position)] += 1
