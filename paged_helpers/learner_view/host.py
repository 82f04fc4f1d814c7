"""The learner's end of the wire: load a notebook's definitions, then answer the checking process.

    python -m paged_helpers.learner_view.host NOTEBOOK      (the protocol on stdin and stdout)

The process loads only the notebook's definitions (``notebook_loader``: imports, functions,
classes, constants), says ``{"loaded": ...}`` and serves requests (``peer``) until the checking
process says ``end``. What the learner's code prints goes to ``/dev/null``, never into the
protocol: file descriptors 0 and 1 are moved aside before any of it runs.

``serve_notebook`` is the part the grader's sandboxed host (``paged_grading/clean_run/learner_host.py``) shares:
it adds its audit watch (``pending_flags``) and the fork per cell around it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from ..notebook_loader import load_definitions
from .peer import Peer, describe_error
from .remote import Remote

__all__ = ["protocol_descriptors", "serve_notebook"]


def protocol_descriptors(*, standard: tuple[int, int]) -> tuple[int, int]:
    """The protocol's (read, write) descriptors, moved off ``standard`` (stdin and stdout, (0, 1)); 0, 1
    and 2 then lead to /dev/null. Keyword-only: nothing calls this by accident (the no-solutions test
    tries every package function of a learner's arity)."""
    read_fd, write_fd = os.dup(standard[0]), os.dup(standard[1])
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    return read_fd, write_fd


def serve_notebook(
    notebook: str,
    *,
    read_fd: int,
    write_fd: int,
    pending_flags: Callable[[], list[str]] | None = None,
    module_name: str = "learner_submission",
    around_load: Callable[[Any], list[str]] | None = None,
) -> None:
    """Load ``notebook``'s definitions and serve the checking process on (read_fd, write_fd).

    ``around_load(module)`` (optional) runs after loading and returns what the definitions changed
    that they should not have (the grader restores the import system and reports it).
    """
    peer = Peer(read_fd, write_fd, serves="all", make_proxy=Remote, pending_flags=pending_flags)
    try:
        module = load_definitions(notebook, module_name=module_name)
        changes = around_load(module) if around_load is not None else []
    except BaseException as error:  # noqa: BLE001 - the checking process hears it as data
        changes = around_load(None) if around_load is not None else []
        peer._send({"loaded": False, "error": describe_error(error), "changes": _listed(changes)})
        return
    peer.namespace = {name: value for name, value in vars(module).items() if not name.startswith("__")}
    peer._send({"loaded": True, "changes": _listed(changes)})
    peer.serve()


def _listed(changes: list) -> list[str]:
    return [str(change)[:300] for change in changes][:20]


def main(argv: list[str]) -> int:
    read_fd, write_fd = protocol_descriptors(standard=(0, 1))
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
    serve_notebook(argv[1], read_fd=read_fd, write_fd=write_fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
