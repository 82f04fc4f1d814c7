"""What the learner's ``update`` returns: the history a layer attends to, checked against what was written.

The reply is ``(keys, values, key_positions)``: keys and values ``[batch, kv_heads, span, head_dim]``
(one row per sequence of the batch, heads before positions), and the position of each returned key
(``[span]`` or ``[batch, span]``). Every position written so far for a row's sequence must be among
them, with the key and value the check wrote there (``written``, kept by ``kv_writes.BatchHarness``).
"""

from __future__ import annotations

import torch

from ..reading.strict import torch_unhooked
from ..speaking.failure import fail
from .diagnosis import HISTORY_LAYOUT, READ_THROUGH_OWN_TABLE, WHOLE_HISTORY

__all__ = ["expect_history_returned"]


def _close_plain(got: torch.Tensor, want: torch.Tensor) -> bool:
    with torch_unhooked():
        return bool(torch.allclose(got.float().cpu(), want.float().cpu(), atol=1e-6, rtol=0))


def expect_history_returned(
    reply, batch: list, layer: int, where: str, written: dict, kv_heads: int, head_dim: int
) -> None:
    """update's reply holds, for each row, every position written so far with the right key and value."""
    keys, values, key_positions = _expect_history_shapes(reply, batch, layer, where, kv_heads, head_dim)
    if key_positions.ndim == 1:
        key_positions = key_positions.expand(len(batch), -1)
    for row, seq in enumerate(batch):
        _expect_row(keys, values, key_positions, row, seq, layer, where, written[seq])


def _expect_history_shapes(reply, batch: list, layer: int, where: str, kv_heads: int, head_dim: int) -> tuple:
    """(keys, values, key_positions), each of the shape attention reads."""
    if not isinstance(reply, tuple) or len(reply) != 3:
        fail(
            f"{where}: what update returned (layer {layer})",
            "(keys, values, key_positions)",
            type(reply).__name__,
            "update returns the history to attend to: keys, values and their positions.",
        )
    keys, values, key_positions = reply
    for name, tensor in (("keys", keys), ("values", values)):
        shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        if (
            not isinstance(tensor, torch.Tensor)
            or tensor.ndim != 4
            or (tensor.shape[0], tensor.shape[1], tensor.shape[3]) != (len(batch), kv_heads, head_dim)
            or tensor.shape != keys.shape
        ):
            fail(
                f"{where}: the {name} update returned (layer {layer})",
                f"a tensor [batch={len(batch)}, kv_heads={kv_heads}, span, head_dim={head_dim}]",
                shape,
                HISTORY_LAYOUT,
            )
    span = keys.shape[2]
    if not isinstance(key_positions, torch.Tensor) or key_positions.shape not in ((span,), (len(batch), span)):
        fail(
            f"{where}: the key positions update returned (layer {layer})",
            f"a tensor [{span}] (or [{len(batch)}, {span}]): the position of each returned key",
            tuple(key_positions.shape) if isinstance(key_positions, torch.Tensor) else repr(key_positions),
            "return torch.arange(span): the history is positions 0..span-1 of every sequence.",
        )
    return keys, values, key_positions


def _expect_row(keys, values, key_positions, row: int, seq, layer: int, where: str, history: torch.Tensor) -> None:
    """Row ``row`` returns every position of ``history`` [2, layers, kv_heads, length, head_dim] as written."""
    span = keys.shape[2]
    returned = {int(p): j for j, p in enumerate(key_positions[row].tolist())}
    for p in range(history.shape[3]):
        if p not in returned:
            fail(
                f"{where}: the history returned for {seq!r} (row {row}, layer {layer})",
                f"a key for every position 0..{history.shape[3] - 1}",
                f"no key for position {p} (span {span})",
                WHOLE_HISTORY,
            )
        j = returned[p]
        for name, got, want in (
            ("key", keys[row, :, j], history[0, layer, :, p]),
            ("value", values[row, :, j], history[1, layer, :, p]),
        ):
            if not _close_plain(got, want):
                fail(
                    f"{where}: the {name} update returned for {seq!r} at position {p} (row {row}, layer {layer})",
                    "the one written there",
                    "a different vector",
                    READ_THROUGH_OWN_TABLE,
                )
