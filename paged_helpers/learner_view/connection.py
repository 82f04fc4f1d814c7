"""The checking end's handle on one learner process: start it, take its names, end it.

    with LearnerProcess([sys.executable, "-m", "paged_helpers.learner_view.host", notebook]) as learner:
        check_block_allocator(learner.name("BlockAllocator"), seed=...)

``command`` is whatever starts a process that speaks the protocol on its stdin and stdout: the
host above, or the grader's sandboxed host. Everything it says is data to this side; a process
that dies, hangs past ``time_limit`` or breaks the protocol raises ``PeerGone``.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from typing import Any

from .peer import Peer, PeerGone, rebuild_error
from .remote import Remote

__all__ = ["LearnerProcess", "PeerGone", "stop_process"]


def stop_process(process: subprocess.Popen) -> None:
    """Kill ``process`` if it still runs, reap it, and close the pipes this side holds to it."""
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class LearnerProcess:
    def __init__(self, command: list[str], time_limit: float = 120.0, cwd: str | None = None, env=None):
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, env=env
        )
        self.peer = Peer(self.process.stdout.fileno(), self.process.stdin.fileno(), serves="calls", make_proxy=Remote)
        self.peer.deadline = time.monotonic() + time_limit
        self.changes: list[str] = []
        try:
            hello = self.peer._receive()
        except PeerGone:
            self.close()
            raise
        if hello.get("loaded") is not True:
            self.close()
            error = hello.get("error")
            raise rebuild_error(error) if type(error) is dict else PeerGone("the learner's process did not load")
        changes = hello.get("changes", [])
        self.changes = [str(change)[:300] for change in changes[:20]] if type(changes) is list else []

    def name(self, name: str) -> Any:
        """The learner's definition ``name`` (a ``Remote``, or a plain value)."""
        return self.peer.request("global", name=name)

    @property
    def flags(self) -> list[str]:
        return list(self.peer.flags)

    def close(self) -> None:
        if self.process.poll() is None and not self.peer.broken:
            try:
                self.peer.deadline = time.monotonic() + 5
                self.peer.request("end")
            except (Exception, PeerGone):  # noqa: BLE001 - ending is best effort; the kill below is not
                pass
        stop_process(self.process)

    def __enter__(self) -> LearnerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
