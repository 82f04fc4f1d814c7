"""A fair share of the machine: one cgroup per student.

Every process the grader runs for one student (the kernel zygote's sandbox and its kernels, a
kernel in a sandbox of its own, the learner's process's sandbox, and the student's checker with
the kernel processes it starts in ``kernel_process_prefix``'s sandbox) is in one cgroup of the
student's, each sandbox in a leaf of its own under it. The student's group has the same CPU
weight as every other student's, a memory cap and a process cap (``StudentLimits``); each leaf
caps its own processes (``SANDBOX_PROCESSES``). So a student who forks 500 spinning processes
gets the CPU of one student, not of 500 processes, and starves nobody else; within their group,
their own checker and learner's process still get a leaf's share beside the spinners.
Both cgroup v2 and the v1 hierarchies (cpu, memory, pids mounted apart) are supported, found at
run time (``hierarchies``); where none can be made the grader says so once (``fair_share_note``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .owners import owner_tag, read_or_empty

CGROUP_PREFIX = "paged-grading-"
# Each sandbox's own process cap (``bubblewrap.Limits.processes``): a student's group has room for several.
SANDBOX_PROCESSES = 512
CONTROLLERS = ("cpu", "memory", "pids")
# Where per-sandbox pids cgroups were made before student cgroups: still swept.
LEGACY_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


@dataclass(frozen=True)
class StudentLimits:
    """What one student's grading may take at once: all their sandboxes and their checker together."""

    # The same weight for every student (cgroup v2 ``cpu.weight`` 100; v1 ``cpu.shares`` 1024): busy
    # students split the cores evenly, whatever number of processes each runs. A weight caps
    # nothing: a student graded alone still gets every idle core.
    cpu_weight: int = 100
    # Four times an honest grading's peak: one complete submission (all 11 notebooks, one nbgrader
    # process: the kernel zygote and kernels, the learner's zygote and processes, the checker, its
    # kernel processes and GPU compiles, torch imported in four of them) peaked at 1512 MiB in its
    # student's group (``memory.max_usage_in_bytes``, page cache included; 1461 MiB resident), and
    # a notebook graded alone at under 1 GiB (2 cores, CPU only, 2026-12-05: benchmark_grading.py).
    # The margin is for a GPU grader (CUDA contexts hold host memory) and bigger machines' libraries.
    # At the cap the kernel first reclaims the group's page cache, then kills the group's largest
    # process (that student's alone), where the machine's OOM killer would pick any student's or the
    # grader's.
    memory_bytes: int = 6 << 30
    # Every sandbox of the student at its own cap (``SANDBOX_PROCESSES``), and some room.
    processes: int = 4 * SANDBOX_PROCESSES


@dataclass(frozen=True)
class Hierarchy:
    """One cgroup hierarchy the grader makes student groups in: where, which version, which controllers."""

    base: Path
    version: int
    controllers: frozenset

    def limit_files(self, limits: StudentLimits) -> dict[str, str]:
        """The files of a student's group in this hierarchy and what goes in them."""
        files = {}
        if "cpu" in self.controllers:
            if self.version == 2:
                files["cpu.weight"] = str(limits.cpu_weight)
            else:
                files["cpu.shares"] = str(limits.cpu_weight * 1024 // 100)
        if "memory" in self.controllers:
            files["memory.max" if self.version == 2 else "memory.limit_in_bytes"] = str(limits.memory_bytes)
        if "pids" in self.controllers:
            files["pids.max"] = str(limits.processes)
        return files


def find_hierarchies(mountinfo: str, own: str) -> list[Hierarchy]:
    """The hierarchies of ``CONTROLLERS`` this process may make cgroups in, from the text of
    ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` (``own``).

    A controller comes from cgroup v2 where it is enabled for children there, else from the cgroup
    v1 hierarchy it is mounted as. Groups are made under the grader's own cgroup, so that whatever
    holds the grader (its job's or container's limits) holds the students too, or else under the
    hierarchy's root (in v2 a cgroup with processes, such as the grader's, cannot give controllers
    to children; the root can).
    """
    own_paths: dict = {}
    for line in own.splitlines():
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        key = 2 if number == "0" and not controllers else frozenset(controllers.split(","))
        own_paths[key] = path
    v2, v1 = [], []
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        fields, rest = fields.split(), rest.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, point = fields[3], Path(fields[4])
        if rest[0] == "cgroup2":
            v2.append(_bases(point, root, own_paths.get(2)))
        elif rest[0] == "cgroup":
            controllers = set(rest[2].split(",")) & set(CONTROLLERS)
            own_path = next((p for k, p in own_paths.items() if k != 2 and controllers & k), None)
            if controllers:
                v1.append((_bases(point, root, own_path), controllers))
    found, taken = [], set()
    for bases in v2:
        for base in bases:
            enabled = set(read_or_empty(base / "cgroup.subtree_control").split()) & set(CONTROLLERS) - taken
            if enabled and os.access(base, os.W_OK):
                found.append(Hierarchy(base, 2, frozenset(enabled)))
                taken |= enabled
                break
    for bases, controllers in v1:
        controllers = controllers - taken
        for base in bases if controllers else ():
            if (base / "cgroup.procs").exists() and os.access(base, os.W_OK):
                found.append(Hierarchy(base, 1, frozenset(controllers)))
                taken |= controllers
                break
    return found


def _bases(point: Path, root: str, own: str | None) -> list[Path]:
    """Where to make groups in the hierarchy mounted at ``point`` (``root`` of it mounted there): the
    grader's own cgroup (``own``, a path from the hierarchy's root), then the mount's top."""
    bases = []
    if own is not None and (root == "/" or own == root or own.startswith(root + "/")):
        bases.append(point / own[len(root.rstrip("/")) :].lstrip("/"))
    return list(dict.fromkeys([*bases, point]))


@functools.cache
def hierarchies() -> tuple[Hierarchy, ...]:
    """This process's cgroup hierarchies (``find_hierarchies``), found once."""
    return tuple(
        find_hierarchies(read_or_empty(Path("/proc/self/mountinfo")), read_or_empty(Path("/proc/self/cgroup")))
    )


class Cgroup:
    """One sandbox's (or one checker's) leaf of its student's cgroup, in every hierarchy in use.

    ``path`` is None where there is none (no hierarchy, or grading without the sandbox).
    """

    def __init__(self, paths: list[Path], capped: bool = False, owner: StudentCgroup | None = None):
        self.paths, self.owner = paths, owner
        self.caps_processes = capped  # a pids.max holds the processes started in it

    @property
    def path(self) -> Path | None:
        return self.paths[0] if self.paths else None

    def enter_command(self) -> list[str]:
        """A shell prefix that moves itself into the cgroup, then execs the rest of the command."""
        if not self.paths:
            return []
        moves = " && ".join(f"echo $$ > {shlex.quote(str(path / 'cgroup.procs'))}" for path in self.paths)
        return ["/bin/sh", "-c", f'{moves} && exec "$@"', "sandbox"]

    def kill_all_and_remove(self) -> None:
        for path in self.paths:
            remove_cgroup(path)
        self.paths = []
        if self.owner is not None:
            self.owner.release(self)
            self.owner = None


class StudentCgroup:
    """One student's cgroup in each hierarchy in use, with ``StudentLimits``: made with the student's
    first leaf (``student_leaf``), removed with the last."""

    def __init__(self, key: tuple = (), limits: StudentLimits = StudentLimits()):
        self.key = key
        self.groups: list[tuple[Hierarchy, Path]] = []
        self.leaves: set[Cgroup] = set()
        name = f"{CGROUP_PREFIX}{owner_tag()}-{uuid.uuid4().hex[:12]}"
        for hierarchy in hierarchies():
            path = hierarchy.base / name
            try:
                path.mkdir()
                if hierarchy.version == 2:  # the leaves' pids.max, and the leaves' weights
                    enable = " ".join(f"+{c}" for c in sorted(hierarchy.controllers & {"cpu", "pids"}))
                    if enable:
                        (path / "cgroup.subtree_control").write_text(enable)
                for file, value in hierarchy.limit_files(limits).items():
                    (path / file).write_text(value)
            except OSError:
                remove_cgroup(path, kill=False)
                continue
            self.groups.append((hierarchy, path))

    @property
    def controllers(self) -> set[str]:
        return {c for hierarchy, _ in self.groups for c in hierarchy.controllers}

    def leaf(self, processes: int) -> Cgroup:
        paths, capped = [], False
        for hierarchy, group in self.groups:
            path = group / f"sandbox-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
                if "pids" in hierarchy.controllers:
                    (path / "pids.max").write_text(str(processes))
                    capped = True
            except OSError:
                remove_cgroup(path, kill=False)
                continue
            paths.append(path)
        leaf = Cgroup(paths, capped, self)
        self.leaves.add(leaf)
        return leaf

    def release(self, leaf: Cgroup) -> None:
        with _STUDENTS_LOCK:
            self.leaves.discard(leaf)
            if not self.leaves:
                self.remove()

    def remove(self) -> None:
        if _STUDENTS.get(self.key) is self:
            del _STUDENTS[self.key]
        for _, path in self.groups:
            remove_cgroup(path)
        self.groups = []


_STUDENTS: dict[tuple, StudentCgroup] = {}  # (course root, student) -> their group, while it has leaves
_STUDENTS_LOCK = threading.RLock()


def student_leaf(key: tuple, processes: int = SANDBOX_PROCESSES) -> Cgroup:
    """A new leaf, capped at ``processes``, of the cgroup of the student ``key`` names (made if needed).

    One group per student and grader process: with ``--jobs`` above the class size, the notebooks of
    one student graded by two workers are in two groups (there is no other student to share with).
    """
    with _STUDENTS_LOCK:
        group = _STUDENTS.get(key)
        if group is None:
            group = _STUDENTS[key] = StudentCgroup(key)
        return group.leaf(processes)


def remove_all_students() -> None:
    """Remove every student's cgroup this process made (a grader on its way out), killing what is in them."""
    for group in list(_STUDENTS.values()):
        with contextlib.suppress(Exception):
            group.remove()


def remove_cgroup(path: Path, kill: bool = True) -> None:
    """Kill what is left in the cgroup at ``path`` and below (unless ``kill`` is False), and remove it."""
    try:
        children = [child for child in path.iterdir() if child.is_dir()]
    except OSError:
        return
    for child in children:
        remove_cgroup(child, kill)
    if kill and (path / "cgroup.kill").exists():  # cgroup v2: every process below, at once
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")
    for _ in range(50):
        if kill:
            for line in read_or_empty(path / "cgroup.procs").split():
                try:
                    os.kill(int(line), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if not kill:
                return
            time.sleep(0.05)


def fair_share_gaps() -> list[str]:
    """The ``CONTROLLERS`` a student's cgroup cannot have here (tried: a group made and removed)."""
    probe = StudentCgroup(("probe",))
    try:
        have = probe.controllers
    finally:
        probe.remove()
    return [controller for controller in CONTROLLERS if controller not in have]


def fair_share_note() -> str | None:
    """One line for the instructor when students cannot each get a cgroup here; None when they can."""
    missing = fair_share_gaps()
    if not missing:
        return None
    instead = []
    if "cpu" in missing:
        instead.append(
            "no CPU share per student (only RLIMIT_CPU, 3600 CPU s per process): a student's many processes "
            "can slow a classmate's grading, so grades can depend on the load (a clean run left without a "
            "verdict is run again alone, then scored 0 with a note to regrade, never failed)"
        )
    if "memory" in missing:
        instead.append("no memory cap per student (only RLIMIT_AS, 16 GiB per process)")
    if "pids" in missing:
        instead.append("processes capped by RLIMIT_NPROC (which Linux does not apply to root)")
    return (
        f"NOTE fair share: no cgroup with {', '.join(missing)} can be made here (cgroup v2 with them enabled "
        f"in cgroup.subtree_control, or cgroup v1 hierarchies of them, writable by this user); instead: "
        f"{'; '.join(instead)}. See autograde/README.md, the sandbox."
    )
