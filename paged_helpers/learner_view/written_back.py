"""What a call did to the arguments it was sent, carried back, so in-place writes work across the wire.

Two kinds of argument change in place. A tensor's storage (a kernel's output, a buffer written in
place): the serving end sends back, under ``written``, the bytes of each storage of the request that
the call changed, and the asking end copies them into its own tensor. A list, dict, set or deque
sent as an argument (``wire.Encoder``'s ``boxes``): the serving end sends back, under
``rewritten``, the new contents of each box the call changed, and the asking end refills its own
container with them.

Serving: ``ArgumentsBefore`` (what they were) then ``add_changes`` (what changed, into the reply).
Asking: ``write_back`` and ``refill``, each refusing what this end never sent (``ProtocolBroken``).
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
from collections.abc import Callable
from typing import Any

import torch

from . import wire
from .exceptions_across import ProtocolBroken

__all__ = ["ArgumentsBefore", "refill", "write_back"]


class ArgumentsBefore:
    """A request's arguments as they were before the call: its storages' bytes, its boxes' contents.

    ``describe`` names an object of this end in a snapshot (``Handles.describe``): a box's contents
    are compared as text, tensors by storage only.
    """

    def __init__(self, storages: list[torch.Tensor], boxes: dict[int, Any], *, describe: Callable[[Any], dict]):
        self.storages, self.boxes, self.describe = storages, boxes, describe
        self.storage_bytes = [wire.storage_bytes(flat) for flat in storages]
        self.box_texts = {index: self._snapshot(box) for index, box in boxes.items()}

    def _snapshot(self, value: Any) -> str:
        return json.dumps(wire.Encoder(self.describe)(value), sort_keys=True, default=str)

    def add_changes(self, reply: dict, encoder: wire.Encoder) -> None:
        """Add to ``reply`` the storages the call wrote (``written``) and the boxes it changed
        (``rewritten``, encoded by the reply's ``encoder``, so their tensors join its storages)."""
        written = {}
        for index, flat in enumerate(self.storages):
            after = wire.storage_bytes(flat)
            if after != self.storage_bytes[index]:
                written[str(index)] = base64.b64encode(after).decode()
        if written:
            reply["written"] = written
        rewritten = {str(i): encoder(box) for i, box in self.boxes.items() if self._snapshot(box) != self.box_texts[i]}
        if rewritten:
            reply["rewritten"] = rewritten


def write_back(written: Any, *, tensors: list[torch.Tensor]) -> None:
    """Copy each storage a reply says the call wrote (``{"<index>": base64}``) into the tensor this
    end sent on that storage (``tensors``, by the request's storage index)."""
    if type(written) is not dict:
        raise ProtocolBroken("a malformed list of written storages")
    for key, data in written.items():
        index = int(key) if type(key) is str and key.isdigit() else -1
        if not 0 <= index < len(tensors) or type(data) is not str:
            raise ProtocolBroken("a written storage this side never sent")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolBroken("a written storage that is not base64") from None
        _copy_into(tensors[index], raw=raw)


def _copy_into(tensor: torch.Tensor, *, raw: bytes) -> None:
    with torch._C.DisableTorchFunction():
        storage = tensor.untyped_storage()
        if len(raw) != storage.nbytes():
            raise ProtocolBroken("a written storage changed its size")
        flat = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
        flat.copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(tensor.device) if raw else flat)


def refill(new_contents: dict[str, Any], *, boxed: list[Any]) -> None:
    """Give each container this end sent (``boxed``, by box number) the contents the callee left in
    its copy (``new_contents``, decoded, by box number as text)."""
    for key, contents in new_contents.items():
        index = int(key) if key.isdigit() else -1
        if not 0 <= index < len(boxed):
            raise ProtocolBroken("a rewritten argument this side never sent")
        try:
            _refill(boxed[index], contents)
        except TypeError as error:
            raise ProtocolBroken(str(error)) from None


def _refill(container: Any, contents: Any) -> None:
    if type(contents) is not type(container) and not (type(container) is collections.deque and type(contents) is list):
        raise TypeError("a rewritten argument of another type")
    if isinstance(container, dict):
        container.clear()
        container.update(contents)
    elif isinstance(container, list):
        container[:] = contents
    else:  # a set or a deque
        container.clear()
        container.update(contents) if isinstance(container, set) else container.extend(contents)
