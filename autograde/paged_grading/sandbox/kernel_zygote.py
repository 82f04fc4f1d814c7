"""A forking server of grading kernels: runs INSIDE one student's sandbox (see ``grading_kernels.KernelZygote``).

    python kernel_zygote.py FD      (FD: a listening Unix socket the grader made; prints "ready")

Every notebook is graded in a fresh kernel, and most of a fresh kernel's start-up is importing
torch (about 1.5 s of a core, once per notebook). This process imports what every grading kernel
imports first (torch, numpy, ipykernel) once per student, runs no student code, and forks a
kernel per request:

* the listening socket is the grader's, inherited: its file lies in a folder of the grader's that
  the sandbox does not contain, so no kernel can replace it, reach it, or answer in its place;
* a request is one JSON line on a new connection: ``{"cwd": the notebook's autograde folder,
  "argv": ipykernel's arguments (the connection file, ...)}``; the answer is ``{"pid": ...}``;
* as soon as a kernel ends, whatever it left is removed (``between_notebooks``): its processes,
  ``/tmp``, ``/dev/shm``, System V IPC; the grader waits for that (a ``{"clean": true}``
  request, answered once it is done) before it moves on to the next notebook. A kernel therefore
  starts as in a sandbox of its own (the student's sandbox: their folders, no network, limits);
* the connection is the kernel's lifeline: when the kernel ends, ``{"exit": code}`` is sent
  (a negative code is the signal that killed it) and the connection closed; when the grader
  closes the connection (it stopped or killed the kernel), the kernel is killed.

Not imported here: ``paged_helpers`` and triton (the notebook's first cell imports them, and
the package must decide Triton's mode before triton is imported). Standard library, torch,
numpy and ipykernel only; one kernel at a time.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys

import between_notebooks

POLL_S = 0.05


def _read_request(connection: socket.socket) -> dict | None:
    data = b""
    while b"\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return None
        data += chunk
    try:
        request = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        return None
    if not isinstance(request, dict) or not (request.get("clean") is True or isinstance(request.get("argv"), list)):
        return None
    return request


def _kernel(request: dict) -> None:
    """In the forked child: become the grading kernel. Never returns."""
    try:
        os.setsid()
        # The zygote's stdout is its pipe to the grader: a kernel writing there could fill it.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.chdir(request["cwd"])
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        sys.argv = ["ipykernel_launcher", *request["argv"]]
        from ipykernel import kernelapp

        kernelapp.launch_new_instance(argv=request["argv"])
    finally:
        os._exit(0)


def _serve_one(connection: socket.socket, listener: socket.socket) -> None:
    request = _read_request(connection)
    if request is None:
        return
    if request.get("clean"):  # asked once a kernel is let go: its leftovers were removed before this
        connection.sendall(b'{"clean": true}\n')
        return
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        connection.close()
        _kernel(request)
    try:
        _stand_by(connection, pid)
    finally:  # before the next request is read: the next notebook finds nothing of this one
        between_notebooks.kill_everything_else()
        between_notebooks.empty_tmp()


def _stand_by(connection: socket.socket, pid: int) -> None:
    """Until the kernel ends (its exit code is sent) or the grader closes the connection (killed)."""
    connection.sendall((json.dumps({"pid": pid}) + "\n").encode())
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            try:
                connection.sendall((json.dumps({"exit": code}) + "\n").encode())
            except OSError:
                pass
            return
        readable, _, _ = select.select([connection], [], [], POLL_S)
        if readable and not connection.recv(1):  # the grader let the kernel go
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return


def _import_what_every_kernel_imports() -> None:
    """Paid once per student here instead of once per notebook (torch alone is about 1.5 s)."""
    import ipykernel.ipkernel  # noqa: F401  (IPython, zmq and tornado come with it)
    import ipykernel.kernelapp  # noqa: F401
    import numpy  # noqa: F401
    import torch  # noqa: F401


def main(listener_fd: int) -> int:
    between_notebooks.non_dumpable()
    _import_what_every_kernel_imports()
    listener = socket.socket(fileno=listener_fd)
    print("ready", flush=True)
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                _serve_one(connection, listener)
            except OSError:  # the other end went away mid-answer: the kernel, if any, is gone too
                pass


if __name__ == "__main__":
    raise SystemExit(main(int(sys.argv[1])))
