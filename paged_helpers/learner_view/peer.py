"""One end of the wire between the checking process and the learner's process: the conversation.

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

``Peer`` holds the request loop and the serving loop; the rest is beside it, one concept a module:
the lines (``channel``), the handles on the other end's objects and of this end's lent ones
(``handles``), the operations an end answers (``operations``), the arguments a call changed
(``written_back``), exceptions as data (``exceptions_across``), the answers kept (``answers_kept``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import wire
from .answers_held import Known
from .answers_kept import keep_copy, keep_prefetched
from .channel import Channel
from .crossing import MAX_COPY_VALUES, MUTABLE_CONTAINERS, ByReference, ByValue, small_plain
from .exceptions_across import LearnerError, PeerGone, ProtocolBroken, RaisedHere, describe_error, rebuild_error
from .handles import Handles
from .operations import LENT_SPECIALS, SPECIALS, perform
from .written_back import ArgumentsBefore, refill, write_back

__all__ = ["LENT_SPECIALS", "SPECIALS", "LearnerError", "Peer", "PeerGone", "ProtocolBroken", "describe_error"]
__all__ += ["rebuild_error"]

# The fields of a request that name values (decoded before it is served).
REQUEST_VALUES = ("target", "name", "args", "kwargs", "value")


class Peer(Channel):
    """One end: its lines (``Channel``), its handles (``handles``), and the conversation over them.

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
        super().__init__(read_fd=read_fd, write_fd=write_fd, pending_flags=pending_flags)
        self.serves, self.namespace = serves, namespace or {}
        self.handles = Handles(peer=self, make_proxy=make_proxy)
        # Exceptions this end raised while serving, by number: one that comes back through the other
        # end's code (a hook's CheckFailed through the learner's engine) is raised again as itself.
        self.raised = RaisedHere()
        self.next_id = 0
        # What the other end said since this end last sent a message (``known``): still true, since the
        # other end runs code only when sent one. Replaced by every message out (``_send``).
        self.known = Known()

    # -- values across ---------------------------------------------------------------------------

    def encode(self, values: dict, boxes: bool = False) -> tuple[dict, wire.Encoder]:
        """``values`` encoded; with ``boxes`` (a request), each argument that is a container is boxed."""
        encoder = wire.Encoder(self.handles.describe, boxes=boxes)
        plain_encoder = wire.Encoder(self.handles.describe)
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

    @staticmethod
    def _place(flat: torch.Tensor, device: str) -> torch.Tensor:
        from ..device import DEVICE

        return flat.to(DEVICE) if device == "cuda" and DEVICE.type == "cuda" else flat

    def decode_message(
        self, message: dict, keys: tuple[str, ...], boxes: dict | None = None
    ) -> tuple[dict, list[torch.Tensor]]:
        storages = wire.read_storages(message, self._place)
        values = {key: wire.decode(message.get(key), storages, self.handles.resolve, boxes=boxes) for key in keys}
        return values, storages

    def _decoded(self, message: dict, keys: tuple[str, ...]) -> dict:
        """An answer's values (``decode_message``); a malformed one breaks the protocol."""
        try:
            values, _ = self.decode_message(message, keys)
        except wire.Malformed as error:
            raise ProtocolBroken(str(error)) from None
        return values

    def _send(self, message: dict) -> None:
        self.known = Known()  # the other end may run code from now on
        super()._send(message)

    # -- asking ---------------------------------------------------------------------------------

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
        """The value of a reply to this end's request, after the arguments the call changed are
        changed here too; or the exception it names, raised."""
        write_back(message.get("written", {}), tensors=encoder.tensors)
        rewritten = message.get("rewritten", {})
        if type(rewritten) is not dict:
            raise ProtocolBroken("a malformed list of rewritten arguments")
        new_contents = self._decoded({"storages": message.get("storages", []), **rewritten}, tuple(rewritten))
        refill(new_contents, boxed=encoder.boxed)
        if "error" in message:
            if type(message["error"]) is not dict:
                raise ProtocolBroken("a malformed error")
            raise self.raised.rebuild(message["error"])
        values = self._decoded(message, ("value", "copy") if "copy" in message else ("value",))
        if "copy" in message:
            keep_copy(values["value"], values["copy"], known=self.known, handles=self.handles)
        return values["value"]

    def prefetch(self, objects: list, names: list[str], follow: list[str], limit: int) -> None:
        """Ask the other end for ``names`` of ``objects`` (and of what ``follow`` leads to) in one
        request, and keep the answers as this moment's (``learner_view.prefetch``)."""
        asked = (tuple(self.handles.theirs(obj) for obj in objects), tuple(names), tuple(follow), limit)
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
        keep_prefetched(records, known=self.known, handles=self.handles)

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
            fields, storages = self.decode_message(message, REQUEST_VALUES, boxes)
        except wire.Malformed as error:
            self._send({"reply": number, "error": describe_error(ValueError(f"a malformed request: {error}"))})
            return
        before = ArgumentsBefore(storages, boxes, describe=self.handles.describe)
        encoder = wire.Encoder(self.handles.describe)
        reply = self._reply(number, str(message.get("op")), fields, encoder)
        before.add_changes(reply, encoder)
        reply["storages"] = encoder.storages
        self._send(reply)

    def _reply(self, number: Any, op: str, fields: dict, encoder: wire.Encoder) -> dict:
        """The reply to request ``number``: the value the operation gave, or the exception it raised."""
        try:
            value = self._perform(op, fields)
            if isinstance(value, ByValue):
                value = value.value
            elif type(value) in MUTABLE_CONTAINERS and (op == "getattr" or fields["name"] == "getitem"):
                value = ByReference(value)
            reply = {"reply": number, "value": encoder(value)}
            if isinstance(value, ByReference) and self.serves == "all":
                self._add_copy(reply, value.value, encoder)
        except BaseException as error:  # noqa: BLE001 - the other end gets it as data
            if isinstance(error, (KeyboardInterrupt, SystemExit)) and self.serves == "calls":
                raise
            reply = {"reply": number, "error": self.raised.describe(error)}
        return reply

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
        return perform(op, fields, serves=self.serves, namespace=self.namespace)
