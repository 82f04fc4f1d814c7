"""Plain values as bytes, the only thing that crosses between a check and the learner's process.

One message is one line of JSON. Every value in it is one of:

* ``null``, a boolean, an int, a float (NaN and infinities allowed) or a string: itself;
* a JSON list: a Python list;
* a JSON object, always with exactly one key that says what it is:

  ===================  ========================================================================
  ``{"tuple": [..]}``  a tuple
  ``{"dict": [[k, v], ..]}``  a dict (keys are values too: ints, strings, tuples)
  ``{"set": [..]}``    a set (a frozenset comes back as a set); likewise ``deque``, ``odict``
                       (an OrderedDict), ``range`` ([start, stop, step]), ``ndarray`` (as a tensor);
                       a defaultdict is read as a dict, a numpy scalar as an int or a float;
                       ``slice`` ([start, stop, step]) and ``ellipsis``, for indices
  ``{"tensor": {...}}``  a torch.Tensor: ``storage`` (an index into the message's ``storages``),
                       ``dtype``, ``offset``, ``size``, ``stride``: so views of one tensor stay views
                       of one storage, and a kernel's writes into a view reach the whole buffer
  ``{"dtype": "float32"}``, ``{"device": "cpu"}``  torch's dtypes and devices
  ``{"mine": n, ...}``  an object of the sender's (``type``, ``callable``, ``is_class``), which
                       the receiver holds as a ``Remote``
  ``{"yours": n}``     an object of the receiver's, given back (the receiver's own object again)
  ===================  ========================================================================

Storages travel beside the value, once per message: ``{"bytes": base64, "device": "cpu"}``.

Nothing is ever unpickled or evaluated. ``decode`` checks every part of what it reads (its kind,
its size, a view inside its storage, the depth of nesting) and raises ``Malformed`` otherwise: the
other side of the wire may be hostile, so a bad message is a failed scenario, never a crash of the
checking process or a value it did not choose to accept.
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["MAX_MESSAGE_BYTES", "Malformed", "Encoder", "decode", "dumps", "loads", "storage_bytes"]

MAX_MESSAGE_BYTES = 256 << 20  # a pool of the course's largest scenario is a few MiB
MAX_DEPTH = 64
MAX_ITEMS = 1 << 20

DTYPES: dict[str, torch.dtype] = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
        torch.int16, torch.int8, torch.uint8, torch.bool,
    )
}  # fmt: skip
PLAIN = (type(None), bool, int, float, str)
_NUMPY_SCALARS = {
    **{name: int for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")},
    **{name: float for name in ("float16", "float32", "float64")},
    "bool_": bool,
}


class Malformed(ValueError):
    """A message that is not what the protocol allows: the scenario fails with this message."""


def storage_bytes(tensor: torch.Tensor) -> bytes:
    """The bytes of the whole storage under ``tensor`` (every view of it shares them)."""
    with torch._C.DisableTorchFunction():
        storage = tensor.untyped_storage()
        raw = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
        return raw.cpu().numpy().tobytes()


class Encoder:
    """Turns one message's values into plain data, collecting the storages of its tensors.

    ``other(value)`` is asked about anything that is not plain (an object of this side): it returns
    the dict that names it (``{"mine": ..}`` or ``{"yours": ..}``).
    """

    def __init__(self, other: Callable[[Any], dict], boxes: bool = False):
        self.other = other
        # With ``boxes`` (a request's arguments), every list, dict, set or deque is numbered: the
        # callee may change it in place, and the new contents come back (``Peer``'s ``rewritten``).
        self.boxes = boxes
        self.boxed: list[Any] = []
        self.storages: list[dict] = []
        self.tensors: list[torch.Tensor] = []  # the first tensor seen on each storage, by index
        self._index: dict[int, int] = {}  # storage data pointer -> index

    def storage_of(self, tensor: torch.Tensor) -> int:
        key = tensor.untyped_storage().data_ptr() if tensor.untyped_storage().nbytes() else -id(tensor)
        if key not in self._index:
            self._index[key] = len(self.storages)
            data = base64.b64encode(storage_bytes(tensor)).decode()
            self.storages.append({"bytes": data, "device": tensor.device.type})
            self.tensors.append(tensor)
        return self._index[key]

    def __call__(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise Malformed("a value nested too deeply to send")
        kind = type(value)
        if self.boxes and kind in (list, dict, set, collections.deque):
            self.boxed.append(value)
            number = len(self.boxed) - 1
            self.boxes = False  # what is inside is sent with the box, and comes back with it
            try:
                return {"box": number, "of": self(value, depth + 1)}
            finally:
                self.boxes = True
        if kind in PLAIN:
            return value
        if kind is list:
            return [self(item, depth + 1) for item in value]
        if kind is tuple:
            return {"tuple": [self(item, depth + 1) for item in value]}
        if kind is dict:
            return {"dict": [[self(k, depth + 1), self(v, depth + 1)] for k, v in value.items()]}
        if kind in (set, frozenset):
            return {"set": [self(item, depth + 1) for item in value]}
        if kind is collections.deque:
            return {"deque": [self(item, depth + 1) for item in value]}
        if kind is collections.OrderedDict:
            return {"odict": [[self(k, depth + 1), self(v, depth + 1)] for k, v in value.items()]}
        if kind is collections.defaultdict:  # read as a dict: the factory stays with its owner
            return {"dict": [[self(k, depth + 1), self(v, depth + 1)] for k, v in value.items()]}
        if kind is slice:
            return {"slice": [self(value.start, depth + 1), self(value.stop, depth + 1), self(value.step, depth + 1)]}
        if value is Ellipsis:
            return {"ellipsis": None}
        if kind is range:
            return {"range": [value.start, value.stop, value.step]}
        if kind.__module__ == "numpy" and kind.__name__ in _NUMPY_SCALARS:
            return _NUMPY_SCALARS[kind.__name__](value)
        if kind.__module__ == "numpy" and kind.__name__ == "ndarray" and value.dtype.kind in "biuf":
            return {"ndarray": self(torch.from_numpy(value.copy()))["tensor"]}
        if kind is torch.Tensor or kind is torch.nn.Parameter:
            with torch._C.DisableTorchFunction():
                return {
                    "tensor": {
                        "storage": self.storage_of(value),
                        "dtype": str(value.dtype).removeprefix("torch."),
                        "offset": value.storage_offset(),
                        "size": list(value.shape),
                        "stride": list(value.stride()),
                        "grad": value.requires_grad,
                    }
                }
        if kind is torch.dtype:
            return {"dtype": str(value).removeprefix("torch.")}
        if kind is torch.device:
            return {"device": str(value)}
        return self.other(value)


def _int(value: Any, what: str, low: int = 0) -> int:
    if type(value) is not int or value < low:
        raise Malformed(f"{what} is not an integer >= {low}: {str(value)[:40]}")
    return value


def _storages(raw: Any, place: Callable[[torch.Tensor, str], torch.Tensor]) -> list[torch.Tensor]:
    """Each storage as a flat uint8 tensor (on the device ``place`` puts it on)."""
    if type(raw) is not list or len(raw) > MAX_ITEMS:
        raise Malformed("the storages are not a list")
    out = []
    for entry in raw:
        if type(entry) is not dict or type(entry.get("bytes")) is not str or entry.get("device") not in ("cpu", "cuda"):
            raise Malformed("a storage is not {bytes, device}")
        try:
            data = base64.b64decode(entry["bytes"], validate=True)
        except (binascii.Error, ValueError) as error:
            raise Malformed(f"a storage's bytes are not base64: {error}") from None
        flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        out.append(place(flat, entry["device"]))
    return out


def _tensor(spec: Any, storages: list[torch.Tensor]) -> torch.Tensor:
    if type(spec) is not dict or set(spec) - {"storage", "dtype", "offset", "size", "stride", "grad"}:
        raise Malformed("a tensor is not {storage, dtype, offset, size, stride}")
    index = _int(spec.get("storage"), "a tensor's storage")
    if index >= len(storages):
        raise Malformed("a tensor names a storage the message does not carry")
    dtype = DTYPES.get(spec.get("dtype")) if type(spec.get("dtype")) is str else None
    if dtype is None:
        raise Malformed(f"a tensor's dtype is not one the course uses: {str(spec.get('dtype'))[:40]}")
    size, stride = spec.get("size"), spec.get("stride")
    if type(size) is not list or type(stride) is not list or len(size) != len(stride) or len(size) > 8:
        raise Malformed("a tensor's size and stride are not two lists of one length")
    size = [_int(s, "a tensor's size") for s in size]
    stride = [_int(s, "a tensor's stride") for s in stride]
    offset = _int(spec.get("offset"), "a tensor's offset")
    flat = storages[index]
    itemsize = torch.empty(0, dtype=dtype).element_size()
    elements = flat.numel() // itemsize
    if math.prod(size) and offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) >= elements:
        raise Malformed("a tensor's view reaches past the end of its storage")
    with torch._C.DisableTorchFunction():
        tensor = torch.empty(0, dtype=dtype, device=flat.device).set_(flat.untyped_storage(), offset, size, stride)
        if spec.get("grad") is True and dtype.is_floating_point:
            tensor.requires_grad_(True)
    return tensor


def decode(
    value: Any, storages: list[torch.Tensor], other: Callable[[dict], Any], depth: int = 0, boxes: dict | None = None
) -> Any:
    """The Python value of one encoded value (``other`` makes an object of a ``mine``/``yours`` dict;
    ``boxes``, when given, collects the boxed containers of a request by number)."""
    if depth > MAX_DEPTH:
        raise Malformed("a value nested too deeply")
    kind = type(value)
    if kind in PLAIN:
        return value
    if kind is list:
        if len(value) > MAX_ITEMS:
            raise Malformed("a list too long")
        return [decode(item, storages, other, depth + 1, boxes) for item in value]
    if kind is dict and ("mine" in value or "yours" in value):
        return other(value)
    if kind is not dict or len(value) != 1 and "box" not in value:
        raise Malformed(f"not a value of the protocol: {str(value)[:60]}")
    (tag, body), *_ = value.items()
    if tag == "box" and boxes is not None and type(body) is int and set(value) == {"box", "of"}:
        if body in boxes:
            raise Malformed("a box sent twice")
        boxes[body] = decode(value["of"], storages, other, depth + 1)  # nothing inside a box is boxed
        return boxes[body]
    found = _tagged(tag, body, lambda item: decode(item, storages, other, depth + 1, boxes), storages)
    if found is _NOT_A_VALUE:
        raise Malformed(f"not a value of the protocol: {str(value)[:60]}")
    return found


_NOT_A_VALUE = object()  # what ``_tagged`` answers for a tag it does not know, or a body of the wrong shape


def _tagged(tag: str, body: Any, inner: Callable[[Any], Any], storages: list[torch.Tensor]) -> Any:
    """The value of ``{tag: body}`` (``inner`` decodes a part of ``body``, one level deeper)."""
    if tag == "tuple" and type(body) is list:
        return tuple(inner(item) for item in body)
    if tag == "set" and type(body) is list:
        items = [inner(item) for item in body]
        try:
            return set(items)
        except TypeError:
            raise Malformed("a set of values that cannot be in a set") from None
    if tag == "dict" and type(body) is list:
        out = {}
        for pair in body:
            if type(pair) is not list or len(pair) != 2:
                raise Malformed("a dict entry is not a [key, value] pair")
            key = inner(pair[0])
            try:
                out[key] = inner(pair[1])
            except TypeError:
                raise Malformed("a dict key that cannot be a key") from None
        return out
    if tag == "deque" and type(body) is list:
        return collections.deque(inner(item) for item in body)
    if tag == "odict" and type(body) is list:
        return collections.OrderedDict(inner({"dict": body}))  # its pairs one level deeper, as a dict's
    if tag == "range" and type(body) is list and len(body) == 3 and all(type(n) is int for n in body) and body[2]:
        return range(*body)
    if tag == "slice" and type(body) is list and len(body) == 3 and all(type(n) in (int, type(None)) for n in body):
        return slice(*body)
    if tag == "ellipsis" and body is None:
        return Ellipsis
    if tag == "tensor":
        return _tensor(body, storages)
    if tag == "ndarray":
        return _tensor(body, storages).numpy()
    if tag == "dtype" and type(body) is str and body in DTYPES:
        return DTYPES[body]
    if tag == "device" and type(body) is str and body.split(":")[0] in ("cpu", "cuda") and len(body) < 16:
        return torch.device(body)
    return _NOT_A_VALUE


def dumps(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def loads(line: bytes) -> dict:
    if len(line) > MAX_MESSAGE_BYTES:
        raise Malformed("a message larger than the protocol allows")
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise Malformed(f"a message that is not JSON: {str(error)[:80]}") from None
    if type(message) is not dict:
        raise Malformed("a message that is not a JSON object")
    return message


def read_storages(message: dict, place: Callable[[torch.Tensor, str], torch.Tensor]) -> list[torch.Tensor]:
    return _storages(message.get("storages", []), place)
