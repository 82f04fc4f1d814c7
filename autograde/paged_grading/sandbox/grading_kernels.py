"""Grading kernels in the student's sandbox: the kernel manager nbgrader's executor uses.

``SandboxedKernelManager`` is the jupyter_client kernel manager of ``FairExecute``
(``kernel_manager_class``); it finds the student from the kernel's working folder,
``<course>/autograded/<student>/<assignment>``. By default a kernel is forked by the student's
``KernelZygote`` (one sandbox per student, torch imported once, each notebook's kernel in its own
folder of the sandbox's scratch, emptied of processes and /tmp between notebooks:
``kernel_zygote.py``, ``zygote_client.py``); with
``use_zygote = False``, or where the zygote cannot start, each kernel gets a sandbox of its own.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool

from .. import integrity
from .bubblewrap import PRIVATE_PREFIX, Sandbox, Submission, install_signal_cleanup, owner_tag, sandbox_disabled
from .package_copies import snapshot_for_this_grading_run

LOG = logging.getLogger(__name__)


def pristine_copies() -> list[Path]:
    """The folder of the guard's verified copies of the package (this notebook's and later ones')."""
    return [snapshot_for_this_grading_run().copies_folder]


HERE = Path(__file__).resolve().parent
ZYGOTE = HERE / "kernel_zygote.py"
ZYGOTE_CLIENT = HERE / "zygote_client.py"
ZYGOTE_START_S = 120.0


class ZygoteUnavailable(RuntimeError):
    """The kernel zygote did not start; the kernel is started the plain way instead."""


class KernelZygote:
    """One student's sandbox with ``kernel_zygote.py`` in it: grading kernels forked, not started.

    The sandbox is the student's: their submitted folder, a scratch where their autograded folder
    would be (each notebook's kernel works in its own folder there, made when the notebook's turn
    comes; the real autograded folder is never mounted), the folder of the pristine package
    copies, no network, the limits. Between two
    kernels the zygote removes what the last one left (processes, /tmp, /dev/shm, IPC), so a
    kernel starts as in a sandbox of its own, without importing torch again. At most one runs per
    grader process: the student being graded.
    """

    def __init__(self, submission: Submission):
        self.student = (submission.root, submission.student)
        self.box = Sandbox(submission, readable=[HERE, *pristine_copies()])
        # The control socket lives outside the sandbox; the zygote inherits the listening end.
        self.control = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{owner_tag()}-"))
        self.socket = self.control / "zygote.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(self.socket))
            listener.listen(8)
            self.process = subprocess.Popen(
                [*self.box.prefix, sys.executable, str(ZYGOTE), str(listener.fileno())],
                cwd=submission.scratch,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(listener.fileno(),),
            )
        _ZYGOTES.append(self)
        if not self._ready():
            self.close()
            raise ZygoteUnavailable("the kernel zygote did not start")

    def _ready(self) -> bool:
        import select

        deadline = time.monotonic() + ZYGOTE_START_S
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.process.stdout], [], [], left)[0]:
                return False
            chunk = os.read(self.process.stdout.fileno(), 64)
            if not chunk:
                return False
            line += chunk
        return line.strip() == b"ready"

    def alive(self) -> bool:
        return self.process.poll() is None and self.socket.exists()

    def wait_clean(self, timeout: float = 30.0) -> None:
        """Return once the zygote removed what the last kernel left; close the zygote (its whole
        sandbox) if it does not answer: nothing of one notebook may meet the grader's next step."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(timeout)
                connection.connect(str(self.socket))
                connection.sendall(b'{"clean": true}\n')
                if connection.recv(64).strip() == b'{"clean": true}':
                    return
        except OSError:
            pass
        self.close()

    def kernel_command(self, cwd: str, kernel_arguments: list[str]) -> list[str]:
        """What jupyter_client starts as the kernel process: a stand-in for a forked kernel."""
        return [sys.executable, str(ZYGOTE_CLIENT), str(self.socket), cwd, *kernel_arguments]

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            _ZYGOTES.remove(self)
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        with contextlib.suppress(OSError):
            self.process.stdout.close()
        self.box.close()
        shutil.rmtree(self.control, ignore_errors=True)


_ZYGOTES: list[KernelZygote] = []  # at most one: the student being graded


def zygote_for(submission: Submission) -> KernelZygote:
    """The running zygote of this submission's student, or a new one (any other is closed)."""
    while _ZYGOTES:
        zygote = _ZYGOTES[-1]
        if zygote.student == (submission.root, submission.student) and zygote.alive():
            return zygote
        zygote.close()
    return KernelZygote(submission)


def close_zygotes() -> None:
    while _ZYGOTES:
        _ZYGOTES[-1].close()


atexit.register(close_zygotes)


def _log_leftovers(box: Sandbox, assignment: str | None = None) -> None:
    """Name in the integrity log the links and special files a kernel left in its scratch.

    They are never followed (the scratch is the grader's throwaway folder, and nothing of it is
    read back); the line tells the instructor that the submission tried.
    """
    assignment = assignment or box.submission.assignment
    found = box.leftovers(assignment)
    if found:
        ids = {"student": box.submission.student, "assignment": assignment, "notebook": assignment}
        integrity.log(ids, "leftover", f"the grading kernel left {'; '.join(found)} (discarded, never followed)")


class SandboxedKernelManager(AsyncKernelManager):
    """The kernel manager of nbgrader's executor: each grading kernel starts inside a sandbox.

    The kernel listens on Unix sockets in the sandbox's private folder (no network exists
    inside), and is interrupted by a control message (a signal would reach bubblewrap, not the
    kernel). By default the kernel is forked by the student's ``KernelZygote`` (torch already
    imported); with ``use_zygote = False``, or where the zygote cannot start, it is started in a
    sandbox of its own. With ``--no-sandbox-UNSAFE`` it is nbgrader's plain AsyncKernelManager.
    """

    use_zygote = Bool(
        True, help="Fork grading kernels from one sandboxed process per student that imported torch once."
    ).tag(config=True)

    sandbox: Sandbox | None = None
    zygote: KernelZygote | None = None

    async def _async_pre_start_kernel(self, **kwargs):
        if not sandbox_disabled() and self.sandbox is None and self.zygote is None:
            install_signal_cleanup()
            submission = Submission.from_working_dir(kwargs.get("cwd") or os.getcwd())
            self.transport = "ipc"
            if self.use_zygote and threading.current_thread() is threading.main_thread():
                try:
                    self.zygote = zygote_for(submission)
                except (ZygoteUnavailable, OSError) as error:
                    LOG.warning("starting the grading kernel without the zygote: %s", error)
            if self.zygote is not None:
                self.zygote.box.prepare(submission.assignment)
                private = self.zygote.box.private
                name = f"kernel-{uuid.uuid4().hex[:8]}"
                self.ip = str(private / name)
                self.connection_file = str(private / f"{name}.json")
                self._zygote_cwd = str(submission.scratch)
                self._zygote_assignment = submission.assignment
            else:
                self.sandbox = Sandbox(submission, readable=pristine_copies())
                self.ip = str(self.sandbox.private / "kernel")
                self.connection_file = str(self.sandbox.private / "connection.json")
        return await super()._async_pre_start_kernel(**kwargs)

    def format_kernel_cmd(self, extra_arguments=None):
        command = super().format_kernel_cmd(extra_arguments)
        if self.zygote is None and self.sandbox is None:
            return command
        self.kernel_spec.interrupt_mode = "message"
        if self.zygote is not None:
            # [python, -m, ipykernel_launcher, -f, CONNECTION, ...]: the zygote runs ipykernel itself
            launcher = command.index("ipykernel_launcher")
            return self.zygote.kernel_command(self._zygote_cwd, command[launcher + 1 :])
        return [*self.sandbox.prefix, *command]

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:  # a kernel that died can make the cleanup above raise: the sandbox goes anyway
            if self.sandbox is not None and not restart:
                _log_leftovers(self.sandbox)
                self.sandbox.close()
                self.sandbox = None
            if self.zygote is not None and not restart:
                self.zygote.wait_clean()  # the student's zygote lives on for their next notebook
                if self.zygote.alive():
                    _log_leftovers(self.zygote.box, self._zygote_assignment)
                self.zygote = None

    def __del__(self) -> None:
        # A manager dropped without a cleanup (its kernel died, nbclient gave up on it).
        box = getattr(self, "sandbox", None)
        if box is not None:
            box.close()
        parent = getattr(super(), "__del__", None)
        if parent is not None:
            parent()
