"""One end of the wire between the checking process and the learner's process.

The protocol is a conversation of requests and replies, in lines of ``wire`` JSON:

    {"id": 7, "op": "call", "target": <value>, "args": [..], "kwargs": <dict value>, "storages": [..]}
    {"reply": 7, "value": <value>, "written": {"0": base64, ..}, "storages": [..], "flags": [..]}
    {"reply": 7, "error": {"type": "ValueError", "message": "..", "traceback": "..", "chain": [..]}}

Either end may ask while it waits for an answer: the learner's engine calls the check's model,
which calls the learner's cache. ``written`` carries back the storages of the request's tensors
that the call changed (a kernel's output, a buffer written in place), so that in-place writes work
across the wire as in one process.

The two ends do not trust each other equally. The learner's end (``serves="all"``) answers every
operation on its objects. The checking end (``serves="calls"``) answers only calls of the objects
it handed over and reads of their public attributes, never a name that starts with ``_``: its
objects (a model, a sampler) are lent to the learner's code to be called, not to be explored.
"""

from __future__ import annotations

import base64
import binascii
import collections
import inspect
import json
import os
import select
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from . import wire
from .answers_held import Known
from .crossing import MAX_COPY_VALUES, MAX_VALUES, MUTABLE_CONTAINERS, VALUE_TYPES, ByReference, ByValue, small_plain

__all__ = ["Peer", "PeerGone", "ProtocolBroken", "LearnerError"]

SPECIALS = {
    "copy": lambda obj: ByValue(obj),
    "assign": lambda obj, path, value: _assign(obj, path, value),
    "subclass": lambda base, name, hooks: _subclass(base, name, hooks),
    "construct": lambda owner, path, fields: _construct(path, fields),
    "len": len,
    "getitem": lambda obj, key: obj[key],
    "setitem": lambda obj, key, value: obj.__setitem__(key, value),
    "delitem": lambda obj, key: obj.__delitem__(key),
    "contains": lambda obj, item: item in obj,
    "list": list,
    "bool": bool,
    "repr": repr,
    "str": str,
    "eq": lambda a, b: a == b,
    "hash": hash,
    "int": int,
    "index": lambda obj: obj.__index__(),
    "float": float,
    "prefetch": lambda obj, names, follow, limit, more: _read_here([obj, *more], names, follow, limit),
}
# Distinct flags kept from the other end, in all: what reaches the integrity log stays bounded.
MAX_FLAGS = 50
# What the checking end lends: calls, public reads, and the specials a caller of a model uses.
LENT_SPECIALS = {"len", "getitem", "contains", "list", "bool", "repr", "str"}


def _assign(owner: Any, path: Any, value: Any) -> None:
    from .access import assign_here

    if type(path) is not list or not path or type(path[0]) is not str:
        raise TypeError("an assignment's path must start with an attribute name")
    assign_here(owner, path, value)


def _refill(container: Any, contents: Any) -> None:
    """Give ``container`` (an argument this side sent) the contents the callee left in its copy."""
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


def _read_here(starts: list, names: Any, follow: Any, limit: Any) -> list:
    from .prefetch import read_here

    return read_here(starts, names, follow, limit)


def _construct(path: Any, fields: Any) -> Any:
    from .access import construct_here

    if type(path) is not str or type(fields) is not dict:
        raise TypeError("a construct needs a class path and a dict of fields")
    return construct_here(path, fields)


def _subclass(base: Any, name: Any, hooks: Any) -> type:
    from .subclass import subclass_here

    if not isinstance(base, type) or type(name) is not str or type(hooks) is not dict:
        raise TypeError("a subclass needs a class, a name and a dict of hooks")
    return subclass_here(base, name, hooks)


class PeerGone(BaseException):
    """The other end died, hung past the deadline, or broke the protocol.

    A BaseException, like KeyboardInterrupt: a check's `except Exception` around a learner's call must
    not turn a dead or lying process into an ordinary wrong answer; the checker ends the cell on it.
    """


class ProtocolBroken(PeerGone):
    """The other end sent what the protocol does not allow: a garbled, forged or out-of-turn message."""


class LearnerError(Exception):
    """An exception raised on the other end, rebuilt here by name (a subclass of the builtin of that
    name where there is one, so ``except ValueError`` and ``hasattr`` work as in one process)."""

    remote_type = ""
    remote_traceback = ""
    remote_chain: tuple[str, ...] = ()
    remote_origin: int | None = None  # the other end's number for it, when it raised it there


_ERROR_CLASSES: dict[str, type] = {}


def _builtin_exception(name: str) -> type | None:
    import builtins

    value = getattr(builtins, name, None)
    return value if isinstance(value, type) and issubclass(value, Exception) else None


def rebuild_error(error: dict) -> BaseException:
    name = error.get("type") if type(error.get("type")) is str else "Exception"
    name = name if name.isidentifier() and len(name) < 80 else "Exception"
    message = str(error.get("message", ""))[:4000]
    base = _builtin_exception(name)
    key = name
    if key not in _ERROR_CLASSES:
        bases = (LearnerError, base) if base is not None and base is not Exception else (LearnerError,)
        try:
            _ERROR_CLASSES[key] = type(name, bases, {})
        except TypeError:  # a builtin that cannot be a second base (layout conflict)
            _ERROR_CLASSES[key] = type(name, (LearnerError,), {})
    klass = _ERROR_CLASSES[key]
    try:
        exception = klass(message) if not issubclass(klass, KeyError) else klass(message)
    except Exception:  # noqa: BLE001 - an exception class that insists on other arguments
        exception = LearnerError(message)
    exception.remote_type = name
    exception.remote_traceback = str(error.get("traceback", ""))[:8000]
    chain = error.get("chain")
    exception.remote_chain = tuple(str(c)[:80] for c in chain[:10]) if type(chain) is list else ()
    origin = error.get("origin")
    exception.remote_origin = origin if type(origin) is int and error.get("origin_side") == "mine" else None
    return exception


def describe_error(error: BaseException) -> dict:
    chain, cause = [], error
    while cause is not None and len(chain) < 10:
        chain.append(type(cause).__name__)
        cause = cause.__cause__ or cause.__context__
    if isinstance(error, LearnerError):  # passed through from the other end: keep its own words
        return {
            "type": error.remote_type,
            "message": str(error),
            "traceback": error.remote_traceback,
            "chain": list(error.remote_chain) or chain,
        }
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:  # noqa: BLE001 - a learner's exception whose str() raises
        text = ""
    try:
        message = str(error)
    except Exception:  # noqa: BLE001
        message = "(an exception whose message could not be read)"
    return {"type": type(error).__name__, "message": message, "traceback": text[-8000:], "chain": chain}


class Peer:
    """One end: its read and write descriptors, its lent objects, the proxies of the other's.

    ``make_proxy(peer, description)`` builds the local stand-in of an object of the other end
    (``learner_view.remote.Remote``). ``namespace`` (the learner's end only) holds the names a
    ``global`` request may ask for. ``flags`` collects what the other end reported (the learner's
    process reports its audit watch's findings with every message); ``deadline`` (monotonic
    seconds, or None) bounds every wait.
    """

    def __init__(
        self,
        read_fd: int,
        write_fd: int,
        *,
        serves: str,
        make_proxy: Callable[[Peer, dict], Any],
        namespace: dict | None = None,
        pending_flags: Callable[[], list[str]] | None = None,
    ):
        assert serves in ("all", "calls")
        self.read_fd, self.write_fd, self.serves = read_fd, write_fd, serves
        self.make_proxy, self.namespace = make_proxy, namespace or {}
        self.pending_flags = pending_flags or (lambda: [])
        self.objects: dict[int, Any] = {}  # id -> an object of this end the other holds
        self.proxies: dict[int, Any] = {}  # id -> the stand-in of an object of the other end
        # Exceptions this end raised while serving, by number: one that comes back through the other
        # end's code (a hook's CheckFailed through the learner's engine) is raised again as itself.
        self.raised: dict[int, BaseException] = {}
        self._method_names: dict[type, list[str]] = {}
        self._ids: dict[int, int] = {}  # id(object) -> its id here
        self.flags: list[str] = []
        self.deadline: float | None = None
        self.buffer = b""
        self.next_id = 0
        self.broken = ""
        # What the other end said since this end last sent a message (``known``): still true, since the
        # other end runs code only when sent one. Replaced by every message out (``_send``).
        self.known = Known()

    # -- values across ---------------------------------------------------------------------------

    def lend(self, value: Any) -> dict:
        """The description of an object of this end, registered so the other end can name it."""
        key = id(value)
        if key not in self._ids:
            self._ids[key] = len(self.objects) + 1
            self.objects[self._ids[key]] = value
        try:
            type_name = type(value).__name__
        except Exception:  # noqa: BLE001
            type_name = "object"
        return {
            "mine": self._ids[key],
            "type": str(type_name)[:80],
            "callable": callable(value),
            "is_class": isinstance(value, type),
            # Not plain, yet an int, a list, a tensor...: a subclass, which may lie when compared.
            "value_like": isinstance(value, VALUE_TYPES) and type(value) not in MUTABLE_CONTAINERS,
            # An exact list, dict, set or deque, sent by reference (``MUTABLE_CONTAINERS``).
            "container": type(value) in MUTABLE_CONTAINERS,
            # The methods its class defines, so that ``obj.name(...)`` is one request, not two.
            "methods": self._methods(value),
        }

    def _methods(self, value: Any) -> list[str]:
        """Public names of plain functions in ``value``'s class (not shadowed by its own attributes)."""
        kind = type(value)
        if isinstance(value, type) or kind.__module__ == "builtins":
            return []
        if kind not in self._method_names:
            names = set()
            for klass in kind.__mro__[:-1]:
                names.update(n for n, v in vars(klass).items() if inspect.isfunction(v) and not n.startswith("__"))
            self._method_names[kind] = sorted(names)
        try:
            own = vars(value)
        except TypeError:
            own = {}
        return [name for name in self._method_names[kind] if name not in own]

    def _describe_other(self, value: Any) -> dict:
        from .remote import Remote, remote_peer, remote_ref

        if isinstance(value, Remote) and remote_peer(value) is self:
            return {"yours": remote_ref(value)}
        if isinstance(value, ByReference):
            return self.lend(value.value)
        return self.lend(value)

    def _resolve(self, description: dict) -> Any:
        if "yours" in description:
            key = description["yours"]
            if type(key) is not int or key not in self.objects:
                raise wire.Malformed("a message names an object this side never lent")
            return self.objects[key]
        if "mine" in description:
            key = description["mine"]
            if type(key) is not int:
                raise wire.Malformed("an object's id is not an int")
            if key not in self.proxies:  # one stand-in per object, so that ``is`` works as in one process
                self.proxies[key] = self.make_proxy(self, description)
            return self.proxies[key]
        raise wire.Malformed("an object description without an id")

    def encode(self, values: dict, boxes: bool = False) -> tuple[dict, wire.Encoder]:
        """``values`` encoded; with ``boxes`` (a request), each argument that is a container is boxed."""
        encoder = wire.Encoder(self._describe_other, boxes=boxes)
        plain_encoder = wire.Encoder(self._describe_other)
        plain_encoder.storages, plain_encoder.tensors, plain_encoder._index = (
            encoder.storages,
            encoder.tensors,
            encoder._index,
        )  # one set of storages for the message
        encoded = {}
        for key, value in values.items():
            if boxes and key == "args" and type(value) is list:
                encoded[key] = [encoder(item) for item in value]
            elif boxes and key == "kwargs" and type(value) is dict:
                encoded[key] = {"dict": [[name, encoder(item)] for name, item in value.items()]}
            elif boxes:
                encoded[key] = plain_encoder(value) if type(value) in MUTABLE_CONTAINERS else encoder(value)
            else:
                encoded[key] = encoder(value)
        return encoded, encoder

    def _place(self, flat: torch.Tensor, device: str) -> torch.Tensor:
        from ..device import DEVICE

        return flat.to(DEVICE) if device == "cuda" and DEVICE.type == "cuda" else flat

    def decode_message(
        self, message: dict, keys: tuple[str, ...], boxes: dict | None = None
    ) -> tuple[dict, list[torch.Tensor]]:
        storages = wire.read_storages(message, self._place)
        values = {key: wire.decode(message.get(key), storages, self._resolve, boxes=boxes) for key in keys}
        return values, storages

    def _snapshot(self, value: Any) -> str:
        """A box's contents as text, to tell whether a call changed them (tensors by storage only)."""
        return json.dumps(wire.Encoder(self._describe_other)(value), sort_keys=True, default=str)

    # -- the line protocol ----------------------------------------------------------------------

    def _send(self, message: dict) -> None:
        self.known = Known()  # the other end may run code from now on
        flags = self.pending_flags()
        if flags:
            message["flags"] = flags
        data = wire.dumps(message)
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.write_fd, view)
            except OSError as error:
                raise PeerGone(f"the other process is gone ({error.strerror})") from None
            view = view[written:]

    def _receive(self) -> dict:
        while b"\n" not in self.buffer:
            if len(self.buffer) > wire.MAX_MESSAGE_BYTES:
                raise ProtocolBroken("a message larger than the protocol allows")
            timeout = None if self.deadline is None else self.deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                raise PeerGone("no answer in time")
            ready, _, _ = select.select([self.read_fd], [], [], timeout)
            if not ready:
                raise PeerGone("no answer in time")
            chunk = os.read(self.read_fd, 1 << 20)
            if not chunk:
                raise PeerGone("the other process ended")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            message = wire.loads(line)
        except wire.Malformed as error:
            raise ProtocolBroken(str(error)) from None
        flags = message.pop("flags", None)
        if type(flags) is list:
            for flag in flags[:MAX_FLAGS]:
                if len(self.flags) < MAX_FLAGS and str(flag)[:500] not in self.flags:
                    self.flags.append(str(flag)[:500])
        return message

    def request(self, op: str, **fields: Any) -> Any:
        """Ask the other end; serve what it asks meanwhile; the answer's value (or its exception)."""
        if self.broken:
            raise PeerGone(self.broken)
        self.next_id += 1
        number = self.next_id
        encoded, encoder = self.encode(fields, boxes=True)
        self._send({"id": number, "op": op, **encoded, "storages": encoder.storages})
        try:
            while True:
                message = self._receive()
                if "op" in message:
                    self._serve_one(message)
                    continue
                if message.get("reply") != number:
                    raise ProtocolBroken("an answer out of turn")
                return self._answer(message, encoder)
        except PeerGone as error:
            self.broken = str(error)
            raise

    def _answer(self, message: dict, encoder: wire.Encoder) -> Any:
        written = message.get("written", {})
        if type(written) is not dict:
            raise ProtocolBroken("a malformed list of written storages")
        for key, data in written.items():
            index = int(key) if type(key) is str and key.isdigit() else -1
            if not 0 <= index < len(encoder.tensors) or type(data) is not str:
                raise ProtocolBroken("a written storage this side never sent")
            try:
                raw = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise ProtocolBroken("a written storage that is not base64") from None
            self._write_back(encoder.tensors[index], raw)
        rewritten = message.get("rewritten", {})
        if type(rewritten) is not dict:
            raise ProtocolBroken("a malformed list of rewritten arguments")
        try:
            new_contents, _ = self.decode_message(
                {"storages": message.get("storages", []), **rewritten}, tuple(rewritten)
            )
        except wire.Malformed as error:
            raise ProtocolBroken(str(error)) from None
        for key, contents in new_contents.items():
            index = int(key) if key.isdigit() else -1
            if not 0 <= index < len(encoder.boxed):
                raise ProtocolBroken("a rewritten argument this side never sent")
            try:
                _refill(encoder.boxed[index], contents)
            except TypeError as error:
                raise ProtocolBroken(str(error)) from None
        if "error" in message:
            error = message["error"]
            if type(error) is not dict:
                raise ProtocolBroken("a malformed error")
            origin = error.get("origin")
            if type(origin) is int and origin in self.raised and error.get("origin_side") == "yours":
                raise self.raised[origin]
            raise rebuild_error(error)
        try:
            values, _ = self.decode_message(message, ("value", "copy") if "copy" in message else ("value",))
        except wire.Malformed as error:
            raise ProtocolBroken(str(error)) from None
        if "copy" in message:
            self._learn_copy(values["value"], values["copy"])
        return values["value"]

    # -- what the other end said this moment (``known``) ------------------------------------------

    def _mine_here(self, value: Any) -> int | None:
        """The other end's id for ``value`` when it is the stand-in of one of its objects; else None."""
        from .remote import Remote, remote_peer, remote_ref

        return remote_ref(value) if isinstance(value, Remote) and remote_peer(value) is self else None

    def _learn_copy(self, container: Any, contents: Any) -> None:
        from .remote import remote_container

        ref = self._mine_here(container)
        if ref is not None and remote_container(container) and small_plain(contents, MAX_VALUES) >= 0:
            if type(contents) in (list, dict, set, collections.deque, collections.OrderedDict):
                self.known.copies[ref] = contents

    def prefetch(self, objects: list, names: list[str], follow: list[str], limit: int) -> None:
        """Ask the other end for ``names`` of ``objects`` (and of what ``follow`` leads to) in one
        request, and keep the answers as this moment's (``learner_view.prefetch``)."""
        from .remote import remote_container

        asked = (tuple(self._mine_here(obj) for obj in objects), tuple(names), tuple(follow), limit)
        if None in asked[0] or asked in self.known.prefetched or self.known.knows(asked[0], names):
            return  # read already, and nothing has run since
        try:
            records = self.request(
                "special", target=objects[0], name="prefetch", args=[names, follow, limit, objects[1:]]
            )
        except Exception:  # noqa: BLE001 - a reader that fails leaves every read to its own request
            return
        if type(records) is not list:
            return
        self.known.prefetched.add(asked)
        for record in records:
            if type(record) is not list or len(record) not in (4, 5) or type(record[1]) is not str:
                continue
            holder, name, kind, value = record[:4]
            where = self._mine_here(holder)
            if where is None or kind not in ("ref", "value") or small_plain(value, MAX_VALUES) < 0:
                continue
            if kind == "ref" and not (self._mine_here(value) is not None and remote_container(value)):
                continue  # a reference, but not to a list, dict, set or deque of the other end's
            if kind == "value" and type(value) in MUTABLE_CONTAINERS:
                continue  # a container comes by reference, as a getattr's answer brings it
            self.known.attributes.setdefault(where, {})[name] = value
            if kind == "ref" and len(record) == 5:
                self._learn_copy(value, record[4])

    @staticmethod
    def _write_back(tensor: torch.Tensor, raw: bytes) -> None:
        with torch._C.DisableTorchFunction():
            storage = tensor.untyped_storage()
            if len(raw) != storage.nbytes():
                raise ProtocolBroken("a written storage changed its size")
            flat = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
            flat.copy_(torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(tensor.device) if raw else flat)

    def _describe_raised(self, error: BaseException) -> dict:
        description = describe_error(error)
        if isinstance(error, LearnerError) and error.remote_origin is not None:
            description["origin"], description["origin_side"] = error.remote_origin, "yours"
        else:
            number = len(self.raised) + 1
            self.raised[number] = error
            description["origin"], description["origin_side"] = number, "mine"
        return description

    # -- serving --------------------------------------------------------------------------------

    def serve(self) -> None:
        """Answer requests until the other end says ``end`` (the learner's end's main loop)."""
        while True:
            message = self._receive()
            if message.get("op") == "end":
                self._send({"reply": message.get("id"), "value": None})
                return
            if "op" not in message:
                raise ProtocolBroken("an answer with no question")
            self._serve_one(message)

    def _serve_one(self, message: dict) -> None:
        number = message.get("id")
        boxes: dict[int, Any] = {}
        try:
            fields, storages = self.decode_message(message, ("target", "name", "args", "kwargs", "value"), boxes)
        except wire.Malformed as error:
            self._send({"reply": number, "error": describe_error(ValueError(f"a malformed request: {error}"))})
            return
        before = [wire.storage_bytes(flat) for flat in storages]
        boxed_before = {index: self._snapshot(box) for index, box in boxes.items()}
        encoder = wire.Encoder(self._describe_other)
        try:
            value = self._perform(str(message.get("op")), fields)
            if isinstance(value, ByValue):
                value = value.value
            elif type(value) in MUTABLE_CONTAINERS and (message.get("op") == "getattr" or fields["name"] == "getitem"):
                value = ByReference(value)
            reply = {"reply": number, "value": encoder(value)}
            if isinstance(value, ByReference) and self.serves == "all":
                self._add_copy(reply, value.value, encoder)
        except BaseException as error:  # noqa: BLE001 - the other end gets it as data
            if isinstance(error, (KeyboardInterrupt, SystemExit)) and self.serves == "calls":
                raise
            reply = {"reply": number, "error": self._describe_raised(error)}
        written = {}
        for index, flat in enumerate(storages):
            after = wire.storage_bytes(flat)
            if after != before[index]:
                written[str(index)] = base64.b64encode(after).decode()
        if written:
            reply["written"] = written
        rewritten = {str(i): encoder(box) for i, box in boxes.items() if self._snapshot(box) != boxed_before[i]}
        if rewritten:
            reply["rewritten"] = rewritten
        reply["storages"] = encoder.storages
        self._send(reply)

    def _add_copy(self, reply: dict, container: Any, encoder: wire.Encoder) -> None:
        """The contents of a container sent by reference, beside it, when they are small plain data:
        the other end reads them (``known``) instead of asking for a copy."""

        if small_plain(container, MAX_COPY_VALUES) < 0:
            return
        try:
            reply["copy"] = encoder(container)
        except wire.Malformed:  # nested too deeply: the other end asks, and hears why
            pass

    def _perform(self, op: str, fields: dict) -> Any:
        target, name = fields["target"], fields["name"]
        args = fields["args"] or []
        kwargs = fields["kwargs"] or {}
        if type(args) is not list or type(kwargs) is not dict or any(type(k) is not str for k in kwargs):
            raise TypeError("a request's args must be a list and its kwargs a dict of names")
        if self.serves == "calls":
            return self._perform_lent(op, target, name, args, kwargs)
        if op == "global":
            if type(name) is not str or name not in self.namespace:
                raise NameError(f"name {name!r} is not defined")
            return self.namespace[name]
        if op == "getattr":
            return getattr(target, name)
        if op == "setattr":
            setattr(target, name, fields["value"])
            return None
        if op == "call":
            return target(*args, **kwargs)
        if op == "method":
            return getattr(target, name)(*args, **kwargs)
        if op == "special" and name in SPECIALS:
            return SPECIALS[name](target, *args)
        if op == "signature":
            return _signature(target)
        if op == "run":
            from .launcher_runs import serve_run

            return serve_run(name, target, *args)
        raise ValueError(f"an operation the protocol does not have: {op[:40]}")

    def _perform_lent(self, op: str, target: Any, name: Any, args: list, kwargs: dict) -> Any:
        """An object this end lent may be called; only the names its class lists in ``lent_names``
        may be read or called by name (a model lends ``forward``, never ``load_state_dict``)."""
        if op in ("getattr", "method"):
            names = getattr(type(target), "lent_names", ())
            if type(name) is not str or name.startswith("_") or name not in names:
                raise PermissionError(f"the checking process does not lend {type(target).__name__}.{name}")
            return getattr(target, name) if op == "getattr" else getattr(target, name)(*args, **kwargs)
        if op == "call" and callable(target) and not isinstance(target, type):
            return target(*args, **kwargs)
        if op == "special" and name in LENT_SPECIALS:
            return SPECIALS[name](target, *args)
        raise PermissionError(f"the checking process does not answer {op!r} on what it lent")


def _signature(target: Any) -> list:
    """[[name, kind, has_default, default_or_None], ...] of a callable of this end."""
    parameters = []
    for parameter in inspect.signature(target).parameters.values():
        default = parameter.default
        plain = default is inspect.Parameter.empty or type(default) in wire.PLAIN
        parameters.append(
            [parameter.name, int(parameter.kind), default is not inspect.Parameter.empty, default if plain else None]
        )
    return parameters
