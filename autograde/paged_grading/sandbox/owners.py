"""Who made a sandbox's folder or a student's cgroup: the grader process, named by pid and start time.

Every private folder and cgroup the grader makes carries ``owner_tag()`` in its name, so that a
later grader can tell the leftovers of one that died (``bubblewrap.sweep``) from another grader's
live sandboxes (a pid alone could have been reused: its start time could not).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path


def owner_tag() -> str:
    """``<pid>.<start time>`` of this process: who made a sandbox folder or cgroup (see ``sweep``)."""
    return f"{os.getpid()}.{start_time(os.getpid())}"


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); "" if gone."""
    stat = read_or_empty(Path(f"/proc/{pid}/stat"))
    if not stat:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


_OWNED = re.compile(r"^(?P<pid>\d+)\.(?P<start>\d*)-")


def owner_alive(name: str, prefix: str) -> bool | None:
    """Whether the process that made ``prefix + name`` still runs; None for an unowned (old) name."""
    match = _OWNED.match(name.removeprefix(prefix))
    if match is None:
        return None
    pid, start = int(match["pid"]), match["start"]
    return start_time(pid) == start and start != ""


def older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False


def read_or_empty(path: Path) -> str:
    """The text of a /proc or /sys file; "" when it is not there (a process gone, a controller absent)."""
    try:
        return path.read_text()
    except OSError:
        return ""
