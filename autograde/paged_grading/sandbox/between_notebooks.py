"""What a long-lived process inside a student's sandbox does between two of that student's notebooks.

Two such processes exist, each in a sandbox of its own: the second opinion's learner zygote
(``learner_host.py``) and the kernel zygote (``kernel_zygote.py``). Each imports torch
once per student and forks a child per cell or per notebook; before the next notebook's
children start, everything the last ones left is gone, as if the notebook had a sandbox of its
own: their processes, the sandbox's ``/tmp`` (HOME and caches live there), ``/dev/shm`` and
System V IPC objects. Only inside a sandbox: these functions empty the process's own namespaces.

Imported by scripts that run in the sandbox (from this folder, by file name): standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal


def non_dumpable() -> None:
    """Children may not read this process's memory or file descriptors through /proc (nor ptrace it)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def kill_everything_else() -> None:
    """Kill every process of the sandbox's pid namespace but this one and its ancestors there."""
    keep = {os.getpid(), 1, os.getppid()}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in keep:
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)


def empty_tmp() -> None:
    """Empty the sandbox's own /tmp and /dev/shm, and remove System V IPC objects.

    Only what lies on the sandbox's own file systems goes: a folder the grader bound in under
    /tmp (the sandbox's private folder with its sockets, the pristine copies of the package, a
    student's folders when the course lives under /tmp) is on another device, and is never
    entered; the folders on the way to it stay.
    """
    for folder in ("/tmp", "/dev/shm"):
        with contextlib.suppress(OSError):
            _clear(folder, os.stat(folder).st_dev)
    os.makedirs(os.environ.get("HOME", "/tmp/home"), exist_ok=True)
    _remove_sysv_ipc()


def _clear(folder: str, device: int) -> None:
    """Remove what is inside ``folder`` on ``device``, without crossing into another file system."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.stat(follow_symlinks=False).st_dev != device:
                continue  # bound in by the grader: not the sandbox's
            if entry.is_dir(follow_symlinks=False):
                _clear(entry.path, device)
                os.rmdir(entry.path)  # refused while a bound folder lies below: it stays
            else:
                os.unlink(entry.path)
        except OSError:
            continue


def _remove_sysv_ipc() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None)
    except (OSError, AttributeError):
        return
    ipc_rmid = 0
    for kind, control in (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl")):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                rows = table.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 1 and fields[1].isdigit():
                if kind == "sem":
                    getattr(libc, control)(int(fields[1]), 0, ipc_rmid)
                else:
                    getattr(libc, control)(int(fields[1]), ipc_rmid, None)
