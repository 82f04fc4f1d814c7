"""The line protocol under a ``Peer``: one message, one line of ``wire`` JSON, over two descriptors.

``Channel`` owns the bytes: it writes a message whole, reads until a line is complete, bounds every
wait by ``deadline`` and every line by ``wire.MAX_MESSAGE_BYTES``, and collects what the other end
reports with each message (``flags``: the learner's process reports its audit watch's findings).
What the lines say, requests and replies, is ``peer``'s.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable

from . import wire
from .exceptions_across import PeerGone, ProtocolBroken

__all__ = ["Channel", "MAX_FLAGS"]

# Distinct flags kept from the other end, in all: what reaches the integrity log stays bounded.
MAX_FLAGS = 50


class Channel:
    """Two descriptors and what was read past the last line.

    ``buffer`` holds bytes read beyond the last complete line: the grader's zygote hands it from one
    cell's peer to the next. ``deadline`` (monotonic seconds, or None) bounds every wait; ``broken``
    (the reason, once a request failed) makes every later request fail at once.
    """

    def __init__(self, *, read_fd: int, write_fd: int, pending_flags: Callable[[], list[str]] | None = None):
        self.read_fd, self.write_fd = read_fd, write_fd
        self.pending_flags = pending_flags or (lambda: [])
        self.flags: list[str] = []
        self.deadline: float | None = None
        self.buffer = b""
        self.broken = ""

    def _send(self, message: dict) -> None:
        """Write ``message`` as one line, with this end's pending flags."""
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
        """The next message (its flags taken out and kept), read before ``deadline``."""
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
        self._keep_flags(message.pop("flags", None))
        return message

    def _keep_flags(self, flags: object) -> None:
        if type(flags) is list:
            for flag in flags[:MAX_FLAGS]:
                if len(self.flags) < MAX_FLAGS and str(flag)[:500] not in self.flags:
                    self.flags.append(str(flag)[:500])
