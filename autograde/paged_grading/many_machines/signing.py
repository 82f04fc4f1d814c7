"""The worker key: jobs signed by the coordinator, results signed by a worker, HMAC-SHA256.

Who holds it: the coordinator makes it once (``KEY_FILE`` in the course root, mode 0600) and the
instructor copies it to each worker machine (``course.py worker --key PATH``), as one copies an SSH
key. It is not the course key (``clean_run.secret_seeds``: the hidden draws), which never leaves the
coordinator, and it never enters a sandbox: it lies in the course root or the worker's root, which
no sandbox mounts.

What it proves: the queue's database is shared by people and programs that are not the course
(a database administrator, another course on the same server, anyone who learns its password).
With the database alone one can insert a job row or a result row, but not sign one: a worker runs
only a job whose payload carries the coordinator's MAC, and the coordinator accepts only a result
whose MAC a holder of the key made. A worker holds the key too (HMAC is symmetric), so a worker
could sign a job: a worker is trusted with grades anyway (it grades), a database credential is not.

Invariant: a MAC covers every byte that is acted on (``parts``, length-prefixed so that no two
different lists of parts sign alike); nothing is decoded, decompressed or run before it is verified.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

KEY_FILE = ".worker_key"


class KeyProblem(SystemExit):
    """The worker key is missing or readable by others: say what to do and stop."""


def course_key_file(root: Path) -> Path:
    """The coordinator's worker key, made on first use (64 hex digits, mode 0600)."""
    path = root / KEY_FILE
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
    return path


def read_key(path: Path) -> bytes:
    """The key in ``path``; refused when missing, empty, or readable by group or others."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise KeyProblem(
            f"no worker key at {path}: copy the coordinator's (its course root's {KEY_FILE}, made by the first "
            "`course.py grade --queue ...`) to this machine, mode 0600, and pass --key PATH"
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise KeyProblem(f"{path} is not a regular file: put the worker key there as a plain file")
    if info.st_mode & 0o077:
        raise KeyProblem(f"{path} can be read by other users: `chmod 600 {path}`, then start again")
    key = path.read_text().strip().encode()
    if len(key) < 32:
        raise KeyProblem(f"{path} holds no key (under 32 characters): copy the coordinator's {KEY_FILE} again")
    return key


def sign(key: bytes, *parts: bytes) -> str:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    return mac.hexdigest()


def verify(key: bytes, mac: str, *parts: bytes) -> bool:
    return hmac.compare_digest(sign(key, *parts), str(mac))
