"""What a check puts into a learner's objects: writes made as a stand-in for the model, and objects
of the course's own data classes handed to the learner's engine.

A check that plays the forward pass writes a token's keys straight into the learner's pool
(``cache.k_pool[layer][block, :, offset] = key``). Across the wire a read of ``cache.k_pool[layer]``
is a copy, so the write is named as a path instead and made where the pool lives:

    assign(cache, ("k_pool", layer, (block, slice(None), offset)), key)

The first step is an attribute, the others are indices; the same function makes the write on
either side (the learner's process runs it for the protocol's ``assign``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .remote import is_remote, remote_peer

__all__ = ["assign", "assign_here", "construct_here", "create_holding", "transfer"]


def assign_here(owner: Any, path: list | tuple, value: Any) -> None:
    attribute, *indices = path
    if not indices:
        setattr(owner, attribute, value)
        return
    target = getattr(owner, attribute)
    for index in indices[:-1]:
        target = target[index]
    target[indices[-1]] = value


def assign(owner: Any, path: tuple, value: Any) -> None:
    """``owner.<path[0]>[path[1]]...[path[-1]] = value``, made in the process ``owner`` lives in."""
    if is_remote(owner):
        remote_peer(owner).request("special", target=owner, name="assign", args=[list(path), value])
    else:
        assign_here(owner, path, value)


def construct_here(path: str, fields: dict) -> Any:
    """An instance of the package's data class ``module:Class`` made from its fields."""
    import importlib

    module, _, name = path.partition(":")
    if not module.startswith("paged_helpers.") or not name.isidentifier():
        raise ValueError(f"only the package's own data classes can be made here, not {path!r}")
    return getattr(importlib.import_module(module), name)(**fields)


def transfer(owner: Any, value: Any) -> Any:
    """``value`` (a dataclass of the package, such as a ``serving.Sequence``) where ``owner`` lives.

    In one process it is ``value`` itself. Across the wire the learner's process makes its own
    object from the same fields, and the check holds that one (a ``Remote``) from then on, so the
    learner's engine changes the very object the check reads afterwards.
    """
    if not is_remote(owner) or is_remote(value):
        return value
    kind = type(value)
    path = f"{kind.__module__}:{kind.__qualname__}"
    fields = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    return remote_peer(owner).request("special", target=owner, name="construct", args=[path, fields])


def create_holding(cache: Any, seq: str, blocks: list[int]) -> int:
    """Create ``seq`` in ``cache`` whose first logical blocks are ``blocks``, full and shared (one more
    reference each, owned by seq's table). Returns the tokens they hold: what seq skips in prefill."""
    cache.create(seq)
    for block in blocks:
        cache.allocator.share(block)
    cache.tables[seq].extend(blocks)
    held = len(blocks) * cache.block_size
    cache.lengths[seq] = held
    return held
