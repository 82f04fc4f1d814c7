"""What the kernel path's check says when a step's logits are wrong: which kernel call, and which mistake.

``diagnose`` recomputes each recorded call of the failing step (``model_calls.KernelCall``) with the
gather-then-attend reference on the inputs the kernel was given, finds the first call that answered
wrongly, and compares its answer with the mistakes that only show in a model (another layer's pool,
every row read to the batch's longest length or to the end of its padded table row, the new token
left out, the chunk's start ignored). If every call was right, the cache is at fault: ``CACHE_HINT``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...reference import paged_decode_reference, paged_prefill_reference
from ..reading.strict import strict_allclose, torch_unhooked
from ..speaking.failure import Hint, fail
from .attention_diagnosis import TOLERANCES
from .model_calls import KernelCall

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


def _decode_as(call: KernelCall, *, pools=None, lengths=None, tables=None) -> torch.Tensor:
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


def _prefill_as(call: KernelCall, *, pools=None, start=None) -> torch.Tensor:
    q, k_pool, v_pool, table, real_start, block_size = call.args
    k_pool, v_pool = pools if pools is not None else (k_pool, v_pool)
    return paged_prefill_reference(
        q, k_pool, v_pool, table, real_start if start is None else start, block_size, compute_dtype=torch.float64
    )


def _other_layers(call: KernelCall) -> list[tuple[int, tuple[torch.Tensor, torch.Tensor]]]:
    """Every other layer's pools at the time of the call (none when the call's own layer is unknown)."""
    if call.layer is None:
        return []
    return [(layer, pools) for layer, pools in enumerate(call.pools) if layer != call.layer]


def _decode_mistakes(call: KernelCall) -> list[tuple[str, Callable[[], torch.Tensor], Hint]]:
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


def _prefill_mistakes(call: KernelCall) -> list[tuple[str, Callable[[], torch.Tensor], Hint]]:
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


def diagnose(calls: list[KernelCall], scenario: str) -> Hint:
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
