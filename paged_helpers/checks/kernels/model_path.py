"""Check for notebook 09's last section: the tiny Qwen3 runs on the learner's cache and kernels.

check_kernel_fork_logits(paged_prefill_attention, paged_decode_attention, PagedKVCache, seed=0)
    Notebook 04's milestone on the kernel path. The tiny Qwen3 runs with
    ``attention=model.PagedAttention(decode=paged_decode_attention, prefill=paged_prefill_attention)``
    on the learner's ``PagedKVCache`` (its ``paged`` method: the pools themselves, no gather). The
    story (``STORY``), in a pool of blocks of 8 whose free list a bystander scrambled first: a
    prompt is prefilled, forked; parent and child decode different tokens in one batch; the child
    prefills a chunk that starts mid-block and crosses into a new block; then one decode batch
    whose rows have different lengths and different table widths (the shorter row padded). Every
    step's logits must equal a
    from-scratch run of that sequence's tokens (``scratch.expect_from_scratch``: the course's one
    tolerance policy), and every block must be free at the end. ``hidden=True`` runs every one of
    ``HIDDEN_KINDS`` instead (a prompt of whole blocks; a fork of a fork; the story again), sized by
    ``seed``.

What the kernel checks of notebooks 07 and 09 cannot see, this one does: the kernels are called
by the model, once per layer, on that layer's pools, with the cache's padded table and lengths
that include the token just written. When the logits go wrong, the check recomputes each kernel
call of the step with the gather-then-attend reference on the inputs the kernel was given, finds
the first call that answered wrongly, and compares its answer with the mistakes that only show in
a model (another layer's pool, every row read to the batch's longest length or to the end of its
padded table row, the new token left out, the chunk's start ignored) to name the bug. If every
call was right, the cache's write or its ``paged`` view is at fault, and the message says so.

This check holds the model's logits; the kernels themselves are judged by the kernel checks of
notebooks 07 and 09, which launch them in a process of their own (a launcher that computes in
torch gets no kernel points there). In the lab the launchers run in this process (the model
calls them layer by layer); when grading, each call runs in a child of the learner's process.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ...checkpoint import tiny_qwen3
from ...device import DEVICE
from ...model import PagedAttention
from ...reference import paged_decode_reference, paged_prefill_reference
from ...workloads import fork_prompt
from ..reading.cache_reads import new_paged_cache
from ..reading.calls import call_learner
from ..reading.learner_code import is_remote, run_apart
from ..reading.model_run import ModelRun
from ..reading.strict import refuse_odd_value, strict_allclose, torch_unhooked
from ..registry import check
from ..speaking.failure import Hint, NotImplementedYet, fail
from ..story import Story
from .paged_attention import TIME_LIMIT_S, TOLERANCES

__all__ = ["check_kernel_fork_logits"]

BLOCK = 8
# The bystanders take every block, alternating, then one is freed: the story's tables are scrambled.
NUM_BLOCKS = 12
# Prompts whose last block is partly filled (the fork shares it), short enough for the interpreter.
PROMPTS = (5, 6)

OTHER_LAYER_HINT = Hint(
    "the model has one pool per layer and calls your kernel once per layer with that layer's k_pool and "
    "v_pool: read the pools passed in this call, never ones kept from an earlier call",
    "in the launcher, pass this call's k_pool and v_pool (and their strides) to the kernel; keep no pool in a "
    "global, a cache keyed by shape, or a default argument",
)
LENGTHS_HINT = Hint(
    "each row of a decode batch has its own length, and its table row is padded with block 0 past its last "
    "block: walk cdiv(lengths[seq], BLOCK) blocks of row seq and mask slots at or past lengths[seq]",
    "in the kernel: length = tl.load(lengths_ptr + seq); loop over range(0, tl.cdiv(length, BLOCK)); "
    "valid = i * BLOCK + slots < length",
)
NEW_TOKEN_HINT = Hint(
    "in the model, the cache writes the new token's key and value before attention runs, and lengths counts "
    "it: the new token attends to itself, positions 0 .. lengths[seq] - 1",
    "use lengths[seq] as the number of keys to read (not lengths[seq] - 1), and mask with i * BLOCK + slots < length",
)
START_HINT = Hint(
    "a chunk after cached tokens sits at positions start .. start + T - 1: it attends to the whole history "
    "and is masked by position in the sequence, not by row number in the chunk",
    "query positions are start + rows; walk blocks up to the one holding position start + T - 1, and mask "
    "with key_position <= start + row",
)
CACHE_HINT = Hint(
    "your kernels answered every call right on the pools they were given, so the pools themselves were wrong: "
    "the cache's write (called by update and by paged) or the view paged returns",
    "check_fork_logits (notebook 04) tests the same story on the gather path; paged must return "
    "PagedKV(self.k_pool[layer], self.v_pool[layer], self.table_tensor, self.block_size) after self.write",
)


@dataclass
class _Call:
    """One kernel call the model made: the inputs as the kernel got them, its answer, every layer's pools."""

    kind: str  # "decode" or "prefill"
    layer: int | None
    args: tuple
    out: torch.Tensor
    pools: list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class _Kernels:
    """The learner's two launchers as the model sees them: each call checked and recorded."""

    decode: Callable
    prefill: Callable
    cache: Any
    calls: list[_Call] = field(default_factory=list)
    scenario: str = ""

    def attention(self) -> PagedAttention:
        return PagedAttention(
            decode=lambda *args: self._call("decode", self.decode, args),
            prefill=lambda *args: self._call("prefill", self.prefill, args),
        )

    def _pools(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        with torch_unhooked():
            return [
                (k.detach().clone(), v.detach().clone())
                for k, v in zip(self.cache.k_pool, self.cache.v_pool, strict=True)
            ]

    def _layer(self, k_pool: torch.Tensor) -> int | None:
        """Which layer's pool the model handed over (the cache's own tensor, not a copy)."""
        with torch_unhooked():
            for layer, pool in enumerate(self.cache.k_pool):
                if isinstance(pool, torch.Tensor) and pool.data_ptr() == k_pool.data_ptr():
                    return layer
        return None

    def _call(self, kind: str, launcher: Callable, args: tuple) -> torch.Tensor:
        what = f"paged_{kind}_attention"
        with torch_unhooked():
            inputs = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
        pools = self._pools()
        if is_remote(launcher):  # graded: it runs in the learner's process, in a child of its own there
            out = _run_remote(what, launcher, args, self.scenario)
        else:
            with _reference_calls() as counted:
                out = call_learner(what, launcher, *args, scenario=self.scenario)
            if counted["calls"]:
                fail(
                    f"{self.scenario}: {what} in the model",
                    "attention computed by your Triton kernel, reading the pool in place",
                    "a call of the gather-then-attend reference (paged_helpers.reference)",
                    "the point of the kernel path is that nothing gathers: launch your kernel instead (when "
                    "graded, the reference is not there at all)",
                )
        if isinstance(out, torch.Tensor):
            with torch_unhooked():
                self.calls.append(_Call(kind, self._layer(args[1]), inputs, out.detach().clone(), pools))
        return out


def _run_remote(what: str, launcher: Any, args: tuple, scenario: str) -> Any:
    """One launcher call in the learner's process, in a child there (a crash becomes a message)."""
    outcome = run_apart(launcher, args, TIME_LIMIT_S)
    if outcome.not_implemented:
        raise NotImplementedYet(f"not implemented yet: {what} raised NotImplementedError.")
    if outcome.kind != "returned":
        why = f"{outcome.error_type}: {outcome.error_message}" if outcome.kind == "raised" else outcome.kind
        fail(
            f"{scenario}: {what} in the model",
            "a call that returns the attention output",
            why,
            "the lines of your launcher and kernel named in the message show where it happened",
        )
    return refuse_odd_value(outcome.value, f"what {what} returned", scenario)


class _reference_calls:  # noqa: N801 (a context manager used like a function)
    """Counts calls of the gather reference in this process (the lab's: when grading, the learner's
    process has no reference to call, so a launcher that calls it fails there the same way)."""

    def __enter__(self) -> dict[str, int]:
        from ...reference import attention

        self.counted, self._attention, self._gather = {"calls": 0}, attention, attention.gather_history
        counted, gather = self.counted, self._gather

        def counting_gather(*args, **kwargs):
            counted["calls"] += 1
            return gather(*args, **kwargs)

        attention.gather_history = counting_gather
        return self.counted

    def __exit__(self, *exc: object) -> None:
        self._attention.gather_history = self._gather


# -- naming the kernel's mistake from the calls of a failing step ------------------------------------


def _decode_as(call: _Call, *, pools=None, lengths=None, tables=None) -> torch.Tensor:
    q, k_pool, v_pool, block_tables, real_lengths, block_size = call.args
    k_pool, v_pool = pools if pools is not None else (k_pool, v_pool)
    return paged_decode_reference(
        q,
        k_pool,
        v_pool,
        block_tables if tables is None else tables,
        real_lengths if lengths is None else lengths,
        block_size,
        compute_dtype=torch.float64,
    )


def _prefill_as(call: _Call, *, pools=None, start=None) -> torch.Tensor:
    q, k_pool, v_pool, table, real_start, block_size = call.args
    k_pool, v_pool = pools if pools is not None else (k_pool, v_pool)
    return paged_prefill_reference(
        q, k_pool, v_pool, table, real_start if start is None else start, block_size, compute_dtype=torch.float64
    )


def _other_layers(call: _Call) -> list[tuple[int, tuple[torch.Tensor, torch.Tensor]]]:
    """Every other layer's pools at the time of the call (none when the call's own layer is unknown)."""
    if call.layer is None:
        return []
    return [(layer, pools) for layer, pools in enumerate(call.pools) if layer != call.layer]


def _decode_mistakes(call: _Call) -> list[tuple[str, Callable[[], torch.Tensor], Hint]]:
    """(what the kernel did, its answer recomputed, hint) for the mistakes only a model shows."""
    _, _, _, tables, lengths, block_size = call.args
    lengths = lengths.long()
    width = tables.shape[1] * block_size
    mistakes = [
        (
            f"it read layer {layer}'s pool in layer {call.layer}",
            lambda pools=pools: _decode_as(call, pools=pools),
            OTHER_LAYER_HINT,
        )
        for layer, pools in _other_layers(call)
    ]
    if bool((lengths != lengths.max()).any()):
        mistakes.append(
            (
                f"every row was read to the batch's longest length {int(lengths.max())} (lengths "
                f"{lengths.tolist()}), so shorter rows read their table's padding",
                lambda: _decode_as(call, lengths=torch.full_like(lengths, int(lengths.max()))),
                LENGTHS_HINT,
            )
        )
    if bool((lengths != width).any()):
        mistakes.append(
            (
                f"every row was read to the end of its padded table row ({tables.shape[1]} blocks = {width} "
                f"slots) instead of to its length (lengths {lengths.tolist()})",
                lambda: _decode_as(call, lengths=torch.full_like(lengths, width)),
                LENGTHS_HINT,
            )
        )
    if bool((lengths > 1).all()):
        mistakes.append(
            (
                f"each row stopped one token short (lengths - 1 = {(lengths - 1).tolist()}): the new token "
                "was left out",
                lambda: _decode_as(call, lengths=lengths - 1),
                NEW_TOKEN_HINT,
            )
        )
    return mistakes


def _prefill_mistakes(call: _Call) -> list[tuple[str, Callable[[], torch.Tensor], Hint]]:
    start = call.args[4]
    mistakes = [
        (
            f"it read layer {layer}'s pool in layer {call.layer}",
            lambda pools=pools: _prefill_as(call, pools=pools),
            OTHER_LAYER_HINT,
        )
        for layer, pools in _other_layers(call)
    ]
    if start:
        mistakes.append(
            (
                f"the chunk was treated as a fresh prompt at positions 0 .. {call.args[0].shape[0] - 1}, "
                f"ignoring start = {start} (the {start} cached tokens before it)",
                lambda: _prefill_as(call, start=0),
                START_HINT,
            )
        )
    return mistakes


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    atol, rtol = TOLERANCES[got.dtype]
    return strict_allclose(got, expected.to(got.dtype), atol=atol, rtol=rtol)


def _diagnose(calls: list[_Call], scenario: str) -> Hint:
    """Fail naming the first kernel call of the step that answered wrongly, and how; if every call was
    right, the hint for the logits' message blames the cache."""
    for index, call in enumerate(calls):
        expected = _decode_as(call) if call.kind == "decode" else _prefill_as(call)
        if _close(call.out, expected):
            continue
        what = f"paged_{call.kind}_attention"
        where = f"layer {call.layer}" if call.layer is not None else "a layer"
        if call.kind == "prefill":
            where += f", the chunk of {call.args[0].shape[0]} tokens from start = {call.args[4]}"
        else:
            where += f", lengths {call.args[4].tolist()}"
        mistakes = _decode_mistakes(call) if call.kind == "decode" else _prefill_mistakes(call)
        for did, recomputed, hint in mistakes:
            if _close(call.out, recomputed()):
                fail(
                    f"{scenario}: {what} in the model ({where})",
                    "attention over exactly the positions each row holds, in this layer's pool",
                    f"what attention gives when {did}",
                    hint,
                )
        with torch_unhooked():
            gap = float((call.out.double() - expected).abs().nan_to_num(nan=float("inf")).max())
        fail(
            f"{scenario}: {what} in the model ({where}, call {index + 1} of the step)",
            "the gather-then-attend reference on the same pool, table and lengths",
            f"largest difference {gap:.3g}",
            "your kernel passes its own check on the synthetic pools but not on the model's: the model's pools "
            "hold two layers, its table rows are padded with block 0, and every row has its own length",
        )
    return CACHE_HINT


# -- the story ----------------------------------------------------------------------------------------


class _KernelRun(ModelRun):
    """The learner's cache under the tiny Qwen3 (``reading.model_run``) with attention on the learner's
    kernels, whose every call ``kernels`` records for the messages."""

    def __init__(self, PagedKVCache: Any, decode: Callable, prefill: Callable, seed: int) -> None:  # noqa: N803
        model = tiny_qwen3(seed, device=DEVICE)
        config = model.config
        sizes = (config.num_hidden_layers, NUM_BLOCKS, BLOCK, config.num_key_value_heads, config.head_dim)
        cache = new_paged_cache(PagedKVCache, sizes, scenario="the kernel path's cache", device=DEVICE)
        super().__init__(model, cache, NUM_BLOCKS)
        self.kernels = _Kernels(decode, prefill, cache)
        self.seed = seed

    def scramble(self) -> None:
        """Two bystanders take turns for every block; freeing one leaves a free list of every other block."""
        scenario = "scrambling the free list before the story"
        for seq in ("bystander", "freed"):
            call_learner(f"create({seq!r})", self.cache.create, seq, scenario=scenario)
        for blocks in range(1, NUM_BLOCKS // 2 + 1):
            for seq in ("freed", "bystander"):
                tokens = blocks * BLOCK
                call_learner(f"reserve({seq!r}, {tokens})", self.cache.reserve, seq, tokens, scenario=scenario)
        call_learner("free('freed')", self.cache.free, "freed", scenario=scenario)

    def step(self, new_tokens: dict[str, list[int]], scenario: str) -> None:  # type: ignore[override]
        """One engine step on the kernel path: the model must reach the learner's kernel for this kind of
        step, and each row's logits must equal its from-scratch run."""
        for seq, new in new_tokens.items():
            self.reserve(seq, len(new), scenario)
        self.kernels.calls, self.kernels.scenario = [], scenario
        logits = self.run_model(new_tokens, scenario, attention=self.kernels.attention())  # [B, T, V]
        wanted = "decode" if len(next(iter(new_tokens.values()))) == 1 else "prefill"
        if wanted not in {call.kind for call in self.kernels.calls}:
            fail(
                scenario,
                f"the model to call your paged_{wanted}_attention in every layer",
                "no call reached it",
                "run the model with attention=ph.model.PagedAttention(decode=paged_decode_attention, "
                "prefill=paged_prefill_attention)",
            )
        calls = self.kernels.calls
        self.expect_rows(new_tokens, logits, scenario, hint=lambda: _diagnose(calls, scenario))

    def finish(self) -> None:
        self.free_all(
            "the logits were right but blocks leaked: after copy-on-write, release the shared block once",
            also=("bystander",),
        )


def _prefill_and_fork(run: _KernelRun, rng: random.Random) -> None:
    prompt = rng.choice(PROMPTS)
    scenario = f"the kernel path: prefill of a {prompt}-token prompt (blocks of {BLOCK}, scrambled tables)"
    run.create("parent", scenario)
    run.step({"parent": fork_prompt(prompt, run.vocab, run.seed)}, scenario)
    run.fork("parent", "child", f"the kernel path: fork('parent', 'child') at {prompt} tokens")


def _diverging_decode(run: _KernelRun, rng: random.Random) -> None:
    best = run.last["parent"].topk(2).indices.tolist()  # the parent's best token, the child's second best
    length = len(run.tokens["parent"])
    scenario = f"the kernel path: after the fork, one decode batch [parent, child] at {length} tokens"
    run.step({"parent": [best[0]], "child": [best[1]]}, scenario)


def _chunk_across_a_block(run: _KernelRun, rng: random.Random) -> None:
    start = len(run.tokens["child"])
    chunk = BLOCK - start % BLOCK + 1  # fills the child's last block and runs one token into a new one
    scenario = f"the kernel path: the child alone prefills a {chunk}-token chunk from position {start}"
    run.step({"child": [rng.randrange(run.vocab) for _ in range(chunk)]}, scenario)


def _uneven_decode(run: _KernelRun, rng: random.Random) -> None:
    lengths = {seq: len(run.tokens[seq]) + 1 for seq in ("parent", "child")}
    scenario = (
        f"the kernel path: one decode batch [parent, child] at lengths {lengths['parent']} and {lengths['child']} "
        "(the parent's table row padded)"
    )
    run.step({seq: [rng.randrange(run.vocab)] for seq in ("parent", "child")}, scenario)


# The milestone's story on the kernel path, in order: each step starts where the one before left off.
STORY = (_prefill_and_fork, _diverging_decode, _chunk_across_a_block, _uneven_decode)


# -- hidden scenarios: other stories on a fresh cache, sized by the grader's seed -------------------------


def _hidden_whole_blocks(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random) -> None:  # noqa: N803
    run = _KernelRun(PagedKVCache, decode, prefill, rng.randrange(1000))
    run.scramble()
    scenario = "a hidden scenario"
    run.create("parent", scenario)
    run.step({"parent": [rng.randrange(run.vocab) for _ in range(2 * BLOCK)]}, scenario)
    run.fork("parent", "child", scenario)
    run.step({"child": [rng.randrange(run.vocab) for _ in range(rng.choice((2, 3)))]}, scenario)
    run.step({seq: [rng.randrange(run.vocab)] for seq in ("parent", "child")}, scenario)
    run.finish()


def _hidden_fork_of_a_fork(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random) -> None:  # noqa: N803
    run = _KernelRun(PagedKVCache, decode, prefill, rng.randrange(1000))
    run.scramble()
    scenario = "a hidden scenario"
    run.create("a", scenario)
    run.step({"a": [rng.randrange(run.vocab) for _ in range(rng.choice((3, 5, 7)))]}, scenario)
    run.fork("a", "b", scenario)
    run.step({"b": [rng.randrange(run.vocab) for _ in range(2)]}, scenario)
    run.fork("b", "c", scenario)
    order = ["a", "b", "c"]
    rng.shuffle(order)
    run.step({seq: [rng.randrange(run.vocab)] for seq in order}, scenario)
    run.finish()


def _story(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random, seed: int) -> None:  # noqa: N803
    run = _KernelRun(PagedKVCache, decode, prefill, seed)
    run.scramble()
    for step in STORY:
        step(run, rng)
    run.finish()


def _hidden_story(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random) -> None:  # noqa: N803
    _story(PagedKVCache, decode, prefill, rng, rng.randrange(1000))


HIDDEN_KINDS = {
    "a prompt of whole blocks forked, the child's chunk starting on a block boundary": _hidden_whole_blocks,
    "a fork of a fork, then one decode batch of all three at different lengths": _hidden_fork_of_a_fork,
    "the visible story again, its tokens drawn from the grader's seed": _hidden_story,
}


@check(
    notebook="09_paged_prefill_kernel",
    builds="paged_prefill_attention",
    partners=(("07_paged_decode_kernel", "paged_decode_attention"), ("04_fork_and_copy_on_write", "PagedKVCache")),
)
def check_kernel_fork_logits(
    paged_prefill_attention: Callable,
    paged_decode_attention: Callable,
    PagedKVCache: Any,  # noqa: N803
    seed: int = 0,
    hidden: bool = False,
) -> str | None:
    """Notebook 04's fork milestone with attention on your kernels: every step equals a from-scratch run.

    ``hidden=True`` (the hidden tests) runs every one of ``HIDDEN_KINDS`` instead, sized by ``seed``.
    """
    story = Story(visible=(functools.partial(_visible_story, seed=seed),), hidden=HIDDEN_KINDS)
    return story.tell(PagedKVCache, paged_decode_attention, paged_prefill_attention, seed=seed, hidden=hidden)


def _visible_story(PagedKVCache: Any, decode: Callable, prefill: Callable, rng: random.Random, *, seed: int) -> None:  # noqa: N803
    _story(PagedKVCache, decode, prefill, rng, seed)
