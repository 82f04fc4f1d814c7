"""A bubblewrap sandbox around every piece of student code the grader runs.

What a sandboxed process (the grading kernel of one student's notebook, or the learner's process
of a second-opinion run, see ``clean_run``) can see and do:

* the file system is empty except for, read-only: the system (``/usr``, ``/etc``), the Python
  runtime and virtual environment, the installed ``paged_helpers`` package folder (only that
  folder, never the repository around an editable install; for the learner's process of the
  clean run, the package's learner view in its place: no checks or references), the grader's
  pristine copies of the package (``package_copies``), the student's own ``submitted/<student>/`` folder,
  and ``published/`` when the course has one (released solutions of earlier notebooks). At the path of the
  student's ``autograded/<student>/`` lies a scratch folder of the grader's (``Sandbox.scratch``),
  never the real one: the kernel works in ``<scratch>/<assignment>/``, which starts with copies of
  the regular files the student submitted beside the notebook, and everything written there is
  discarded with the sandbox. The real ``autograded/`` (where nbgrader keeps the notebook being
  graded, hidden tests restored, and writes the graded one), ``source/``, ``release/``,
  ``feedback/``, the gradebook, the course key, ``nbgrader_config.py``, ``notebooks/`` and the
  other students are not there at all, so nothing the sandbox writes is ever a file the grader
  reads or writes through. Writable: the scratch (for kernels), a small ``/tmp`` and the folder
  of the kernel's connection sockets;
* no network (a new network namespace: only an unconfigured loopback); the kernel talks to the
  grader over Unix sockets (ZeroMQ ``ipc`` transport) in the bound socket folder;
* its own user namespace (no capabilities outside) and pid namespace, ``--die-with-parent``:
  when the grader stops the sandbox, every process started inside it is gone;
* only the grader's environment variables that configure Python, the locale, Jupyter, torch,
  Triton or CUDA (``kept_environment``): none whose name says it holds a credential. The grader's
  environment is the instructor's (on a JupyterHub, ``JUPYTERHUB_API_TOKEN``; a database
  password), and a cell that prints ``os.environ`` prints into the student's feedback;
* rlimits (``prlimit``): address space, CPU seconds, file size, open files; processes are
  capped by a ``pids`` cgroup when the machine offers a writable one, else by RLIMIT_NPROC
  (which Linux does not apply to root: then there is no process cap, and the grader logs it);
* a fair share of the machine: every sandbox of one student (and the student's checker) is in
  one cgroup of the student's, with the same CPU weight as every other student's, a memory cap
  and a process cap (``StudentLimits``, ``student_leaf``; cgroup v2 or v1, found at run time).

The grading kernels in these sandboxes (the kernel manager nbgrader's executor uses, and the
student's kernel zygote) are in ``grading_kernels``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import logging
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path

from .package_copies import installed_package_dir

LOG = logging.getLogger(__name__)
BWRAP = "bwrap"
UNSAFE_FLAG = "--no-sandbox-UNSAFE"
# Set by course.py for `grade --no-sandbox-UNSAFE`: the grading kernels then run unconfined.
UNSAFE_ENV = "PAGED_GRADING_NO_SANDBOX_UNSAFE"
PRIVATE_PREFIX = "paged-sandbox-"
CGROUP_PREFIX = "paged-grading-"
# Leftovers named before owners were recorded are removed only when this old (and empty).
UNOWNED_MAX_AGE_S = 6 * 3600


@dataclass(frozen=True)
class Limits:
    """Per-sandbox resource limits. Memory is address space: torch reserves more than it uses."""

    address_space_bytes: int = 16 << 30
    cpu_seconds: int = 3600
    file_bytes: int = 256 << 20
    open_files: int = 1024
    processes: int = 512
    tmp_bytes: int = 512 << 20


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or does not work here; grading refuses to run unconfined by itself."""


def configure(unsafe: bool) -> None:
    """For ``course.py grade``: check that bubblewrap works, or record the unsafe choice for nbgrader."""
    if unsafe:
        print(f"WARNING {UNSAFE_FLAG}: student code runs unconfined, as this user, with the course in reach.")
        os.environ[UNSAFE_ENV] = "1"
    else:
        os.environ.pop(UNSAFE_ENV, None)
        require_bwrap()
        note = fair_share_note()
        if note:
            print(note, flush=True)


def sandbox_disabled() -> bool:
    return os.environ.get(UNSAFE_ENV) == "1"


@functools.cache
def require_bwrap() -> str:
    path = shutil.which(BWRAP)
    works = (
        path is not None
        and not subprocess.run(
            [path, "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "true"], capture_output=True
        ).returncode
    )
    if not works:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is missing or cannot create namespaces here: `apt-get install bubblewrap`. "
            "Grading runs every "
            f"submission in a sandbox; to grade without one (trusted code only) pass {UNSAFE_FLAG}."
        )
    return path


def python_runtime_dirs() -> list[Path]:
    """The interpreter, its standard library and the virtual environment (read-only in the sandbox)."""
    dirs = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(sys.exec_prefix).resolve()}
    return sorted(dirs)


def course_data_dirs() -> list[Path]:
    """The package's data folder (checkpoint, vocabulary, traces), as the package itself finds it.

    ``paged_helpers.data_files`` is loaded on its own from its file (it needs only pathlib), so
    the grader does not import torch to learn where the data is.
    """
    module_file = installed_package_dir() / "data_files.py"
    if not module_file.is_file():
        return []
    spec = importlib.util.spec_from_file_location("_paged_course_data_probe", module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        return [module.data_dir().resolve()]
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class Submission:
    """Where one student's notebook is graded: ``<root>/autograded/<student>/<assignment>``."""

    root: Path
    student: str
    assignment: str

    @classmethod
    def from_working_dir(cls, cwd: str | Path) -> Submission:
        cwd = Path(cwd).resolve()
        if cwd.parent.parent.name != "autograded":
            raise SandboxUnavailable(f"not an autograde folder (autograded/<student>/<assignment>): {cwd}")
        return cls(cwd.parent.parent.parent, cwd.parent.name, cwd.name)

    @property
    def student_folder(self) -> Path:
        """The real ``autograded/<student>/`` (outside); inside a sandbox, the scratch is here."""
        return self.root / "autograded" / self.student

    @property
    def scratch(self) -> Path:
        """The notebook's working folder, as a sandboxed process sees it (the grader's is the same path)."""
        return self.student_folder / self.assignment


# The grader's environment variables a sandboxed process keeps (by name, or by one of these
# prefixes): what configures Python, the locale, Jupyter, torch, Triton, CUDA and this course.
KEPT_VARIABLES = {
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM", "USER", "LOGNAME", "SHELL", "LD_LIBRARY_PATH",
    "VIRTUAL_ENV", "CONDA_PREFIX", "NO_COLOR", "FORCE_COLOR", "COLUMNS", "MPLBACKEND",
}  # fmt: skip
KEPT_PREFIXES = (
    "LC_", "PYTHON", "PAGED_", "PH_", "NBGRADER_", "TRITON_", "CUDA_", "NVIDIA_", "TORCH", "JUPYTER_", "JPY_",
    "OMP_", "MKL_", "OPENBLAS_", "KMP_", "NUMEXPR_", "MPL", "XDG_",
)  # fmt: skip
# (OPENBLAS_CORETYPE is set on processors where older OpenBLAS builds compute wrong results or crash.)
# Never kept, whatever the prefix: names that say they hold a credential (JPY_API_TOKEN, ...).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSW", "KEY", "CREDENTIAL", "AUTH", "COOKIE")


def kept_environment(name: str) -> bool:
    """Whether a sandboxed process keeps the grader's environment variable ``name``."""
    upper = name.upper()
    if any(word in upper for word in SECRET_WORDS):
        return False
    return upper in KEPT_VARIABLES or upper.startswith(KEPT_PREFIXES)


def _environment_args() -> list[str]:
    """``--unsetenv`` for each variable of the grader's environment a sandboxed process may not see.

    Unset by name rather than cleared (``--clearenv``): what jupyter_client adds for one kernel
    (``JPY_PARENT_PID``, ...) after this command line was made still reaches it.
    """
    args = []
    for name in sorted(os.environ):
        if not kept_environment(name):
            args += ["--unsetenv", name]
    return args


def _ro(path: Path) -> list[str]:
    return ["--ro-bind", str(path), str(path)] if path.exists() else []


def _system_args(limits: Limits) -> list[str]:
    """The start of every sandbox's command line: no network or other namespace shared, no
    capability, the system read-only (``/usr``, ``/etc`` and the library links), a small ``/tmp``."""
    args = [
        require_bwrap(),
        "--unshare-all",  # network, pid, ipc, uts, cgroup namespaces
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--cap-drop", "ALL",
        "--proc", "/proc",
        "--dev", "/dev",
        "--ro-bind", "/usr", "/usr",
        "--ro-bind", "/etc", "/etc",
    ]  # fmt: skip
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        link = Path("/") / name
        if link.is_symlink():
            args += ["--symlink", os.readlink(link), str(link)]
        elif link.is_dir():
            args += ["--ro-bind", str(link), str(link)]
    return [*args, "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp", "--dir", "/tmp/home"]


def bwrap_args(
    submission: Submission,
    scratch: Path,
    writable: list[Path] = (),
    readable: list[Path] = (),
    limits: Limits = Limits(),
    scratch_writable: bool = True,
    package: Path | None = None,
) -> list[str]:
    """The bubblewrap command line (without the command to run) for one student's code.

    ``scratch`` (a folder of the grader's) is mounted where the student's ``autograded/<student>/``
    would be; the real one is not mounted at all. ``package`` (a folder of the grader's), when
    given, is mounted where the package is installed instead of the package itself: the learner's
    view of it (``package_view``), without checks or references.
    """
    args = _system_args(limits)
    for path in python_runtime_dirs():
        args += _ro(path)
    args += ["--ro-bind", str(package), str(installed_package_dir())] if package else _ro(installed_package_dir())
    for path in [*course_data_dirs(), *readable]:
        args += _ro(path)
    for path in (submission.root / "submitted" / submission.student, submission.root / "published"):
        args += _ro(path)
    for path in writable:
        args += ["--bind", str(path), str(path)]
    # Last, so that no bind above can cover it: the scratch where autograded/<student>/ would be.
    args += ["--bind" if scratch_writable else "--ro-bind", str(scratch), str(submission.student_folder)]
    args += _environment_args()
    args += [
        "--setenv", "HOME", "/tmp/home",
        "--setenv", "IPYTHONDIR", "/tmp/home/.ipython",
        "--setenv", "MPLCONFIGDIR", "/tmp/home/.matplotlib",
        "--setenv", "JUPYTER_RUNTIME_DIR", "/tmp/home/runtime",
        "--setenv", "TRITON_CACHE_DIR", "/tmp/home/.triton",
        # One compute thread per process: the kernel's run and the clean run already share the
        # cores, and torch's OpenMP threads spin when oversubscribed (a 0.4 s check took 5 s).
        "--setenv", "OMP_NUM_THREADS", "1",
        "--setenv", "MKL_NUM_THREADS", "1",
        "--chdir", str(submission.scratch),
        "--remount-ro", "/",  # the sandbox's own root: no writes outside the binds and /tmp
    ]  # fmt: skip
    return args


def kernel_process_prefix() -> list[str]:
    """The bubblewrap command line for the checker's kernel process (``paged_helpers.running.
    kernel_process``): it runs a learner's validated Triton module on inputs it is sent, so it sees
    no course file at all (no submission, gradebook, key or source), only the system, the
    interpreter and the package; no network; an empty, read-only root but for its own /tmp."""
    args = [*_system_args(Limits()), "--new-session"]
    for path in [*python_runtime_dirs(), installed_package_dir()]:
        args += _ro(path)
    args += _environment_args()
    args += [
        "--setenv", "HOME", "/tmp/home",
        "--setenv", "TRITON_CACHE_DIR", "/tmp/home/.triton",
        "--setenv", "OMP_NUM_THREADS", "1",
        "--chdir", "/tmp",
        "--remount-ro", "/",
        "--",
    ]  # fmt: skip
    return args


# What of the student's submitted folder is copied into the kernel's scratch (nbgrader would have
# copied all of it into the real autograded folder): regular files only, never a notebook.
SCRATCH_COPY_MAX_FILES = 64
SCRATCH_COPY_MAX_BYTES = 8 << 20


def copy_submitted_files(source: Path, into: Path) -> None:
    """Regular files of ``source`` (recursively, links never followed) into ``into``, capped."""
    copied = 0
    for folder, dirs, files in os.walk(source, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(folder) / name
            if name.endswith(".ipynb") or copied >= SCRATCH_COPY_MAX_FILES:
                continue
            try:
                info = path.lstat()
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or info.st_size > SCRATCH_COPY_MAX_BYTES:
                continue
            target = into / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                target.write_bytes(handle.read(SCRATCH_COPY_MAX_BYTES + 1)[:SCRATCH_COPY_MAX_BYTES])
            copied += 1


def odd_entries(folder: Path) -> list[tuple[Path, str]]:
    """Links and special files under ``folder`` with a description from their metadata alone.

    Nothing is opened or followed: a link is described by its target's name (``readlink``).
    """
    found = []
    for parent, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted([*dirs, *files]):
            path = Path(parent) / name
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue
            where = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(mode):
                try:
                    target = os.readlink(path)
                except OSError:
                    target = "?"
                found.append((path, f"a symbolic link {where} -> {target}"))
            elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
                found.append((path, f"{kind} {where}"))
    return found


def prlimit_args(limits: Limits, with_nproc: bool) -> list[str]:
    args = [
        shutil.which("prlimit") or "prlimit",
        f"--as={limits.address_space_bytes}",
        f"--cpu={limits.cpu_seconds}",
        f"--fsize={limits.file_bytes}",
        f"--nofile={limits.open_files}",
        "--core=0",
    ]
    if with_nproc:
        args.append(f"--nproc={limits.processes}")
    return args + ["--"]


def owner_tag() -> str:
    """``<pid>.<start time>`` of this process: who made a sandbox folder or cgroup (see ``sweep``)."""
    return f"{os.getpid()}.{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat); "" if gone."""
    stat = _read(Path(f"/proc/{pid}/stat"))
    if not stat:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


_OWNED = re.compile(r"^(?P<pid>\d+)\.(?P<start>\d*)-")


def _owner_alive(name: str, prefix: str) -> bool | None:
    """Whether the process that made ``prefix + name`` still runs; None for an unowned (old) name."""
    match = _OWNED.match(name.removeprefix(prefix))
    if match is None:
        return None
    pid, start = int(match["pid"]), match["start"]
    return _start_time(pid) == start and start != ""


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except OSError:
        return False


def sweep() -> list[Path]:
    """Remove what sandboxes of dead graders left behind: private folders and cgroups.

    A grader killed by a timeout, an OOM kill or ^C (or a kernel manager that died with its
    kernel) never runs ``Sandbox.close``. Each folder and student cgroup is named after the process
    that made it (pid and start time), so the next sandbox removes those whose maker is gone
    (killing what still runs in a cgroup); others' live sandboxes are never touched. Cgroups are
    looked for where this process makes them (``hierarchies``) and where pids cgroups were made
    before. Returns what was removed.
    """
    removed = []
    for folder in Path(tempfile.gettempdir()).glob(f"{PRIVATE_PREFIX}*"):
        alive = _owner_alive(folder.name, PRIVATE_PREFIX)
        if alive is False or (alive is None and _older_than(folder, UNOWNED_MAX_AGE_S)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    for base in dict.fromkeys([*(h.base for h in hierarchies()), *LEGACY_CGROUP_ROOTS]):
        for group in base.glob(f"{CGROUP_PREFIX}*") if base.is_dir() else ():
            alive = _owner_alive(group.name, CGROUP_PREFIX)
            if alive is False or (alive is None and _older_than(group, UNOWNED_MAX_AGE_S)):
                remove_cgroup(group, kill=alive is False)
                if not group.exists():
                    removed.append(group)
    return removed


# --- A fair share of the machine: one cgroup per student -----------------------------------------
#
# Every process the grader runs for one student (the kernel zygote's sandbox and its kernels, a
# kernel in a sandbox of its own, the learner's process's sandbox, and the student's checker with
# the kernel processes it starts in ``kernel_process_prefix``'s sandbox) is in one cgroup of the
# student's, each sandbox in a leaf of its own under it. The student's group has the same CPU
# weight as every other student's, a memory cap and a process cap (``StudentLimits``); each leaf
# caps its own processes (``Limits.processes``). So a student who forks 500 spinning processes
# gets the CPU of one student, not of 500 processes, and starves nobody else; within their group,
# their own checker and learner's process still get a leaf's share beside the spinners.
# Both cgroup v2 and the v1 hierarchies (cpu, memory, pids mounted apart) are supported, found at
# run time (``hierarchies``); where none can be made the grader says so once (``fair_share_note``).

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
    # Every sandbox of the student at its own cap (``Limits.processes``), and some room.
    processes: int = 4 * Limits.processes


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
            enabled = set(_read(base / "cgroup.subtree_control").split()) & set(CONTROLLERS) - taken
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
    return tuple(find_hierarchies(_read(Path("/proc/self/mountinfo")), _read(Path("/proc/self/cgroup"))))


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


def student_leaf(submission: Submission, processes: int = Limits.processes) -> Cgroup:
    """A new leaf, capped at ``processes``, of the cgroup of ``submission``'s student (made if needed).

    One group per student and grader process: with ``--jobs`` above the class size, the notebooks of
    one student graded by two workers are in two groups (there is no other student to share with).
    """
    if sandbox_disabled():
        return Cgroup([])
    key = (str(submission.root), submission.student)
    with _STUDENTS_LOCK:
        group = _STUDENTS.get(key)
        if group is None:
            group = _STUDENTS[key] = StudentCgroup(key)
        return group.leaf(processes)


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
            for line in _read(path / "cgroup.procs").split():
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


@functools.cache
def _warn_once(message: str) -> None:
    LOG.warning(message)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


class Sandbox:
    """One sandbox's command prefix, its scratch folder and its clean-up (cgroup, private folder).

    ``scratch`` is the grader's folder that the sandbox sees at ``autograded/<student>/``:
    ``prepare(assignment)`` makes ``<scratch>/<assignment>/`` (with copies of the student's
    submitted files) before a notebook's process starts there; ``leftovers(assignment)`` lists
    the links and special files it holds, as data, for the integrity log. It is removed with the
    sandbox; the grader reads nothing else from it.
    """

    def __init__(
        self,
        submission: Submission,
        readable: list[Path] = (),
        limits: Limits = Limits(),
        scratch_writable: bool = True,
        writable: list[Path] = (),
        package: Path | None = None,
    ):
        self.submission = submission
        self.limits = limits
        swept = sweep()
        if swept:
            LOG.info("removed %d sandbox folder(s)/cgroup(s) left by graders that died", len(swept))
        self.private = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{owner_tag()}-"))
        # Not inside ``private`` (bound writable for the sockets): a read-only scratch stays read-only.
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{owner_tag()}-scratch-"))
        # A leaf of the student's cgroup: the student's fair share of CPU and memory, and a process cap.
        self.cgroup = student_leaf(submission, limits.processes)
        _OPEN.add(self)
        if not self.cgroup.caps_processes and os.geteuid() == 0:
            _warn_once("no writable pids cgroup and grading as root: the sandboxes have no process cap")
        try:
            self.prepare(submission.assignment)
            self.prefix = [
                *self.cgroup.enter_command(),
                *prlimit_args(limits, with_nproc=not self.cgroup.caps_processes),
                *bwrap_args(
                    submission,
                    self.scratch,
                    [self.private, *writable],
                    list(readable),
                    limits,
                    scratch_writable,
                    package,
                ),
                "--",
                # A shell between bubblewrap's pid 1 and the command: ipykernel shuts itself down
                # when its parent is pid 1 (it takes that for "the process that started me died").
                "/bin/sh", "-c", '"$@"; exit $?', "sandboxed",
            ]  # fmt: skip
        except BaseException:  # nothing is left behind by a sandbox that could not be set up
            self.close()
            raise

    def prepare(self, assignment: str) -> None:
        """The working folder of ``assignment`` in the scratch (made once; copies of submitted files)."""
        folder = self.scratch / assignment
        if folder.is_dir():
            return
        folder.mkdir(parents=True)
        copy_submitted_files(self.submission.root / "submitted" / self.submission.student / assignment, folder)

    def leftovers(self, assignment: str, most: int = 20) -> list[str]:
        folder = self.scratch / assignment
        found = odd_entries(folder) if folder.is_dir() and not folder.is_symlink() else []
        return [description for _, description in found[:most]]

    def close(self) -> None:
        self.cgroup.kill_all_and_remove()
        for folder in (self.private, self.scratch):  # rmtree removes links, never follows them
            shutil.rmtree(folder, ignore_errors=True)
        _OPEN.discard(self)


@functools.cache
def learner_package_view() -> Path:
    """The learner's view of the package (no checks, references or demos), made once per grader.

    Built from the installed package by ``paged_helpers.learner_view.package_view`` (loaded from
    its file: the grader need not import torch for it); removed at exit, or by ``sweep`` if the
    grader died.
    """
    module_file = installed_package_dir() / "learner_view" / "package_view.py"
    spec = importlib.util.spec_from_file_location("_paged_package_view", module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    folder = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{owner_tag()}-view-"))
    atexit.register(shutil.rmtree, folder, True)
    return module.build(folder / "paged_helpers")


# Sandboxes not closed yet: closed at exit, and on SIGTERM/SIGHUP (a grader stopped by a timeout).
_OPEN: weakref.WeakSet[Sandbox] = weakref.WeakSet()


def close_all() -> None:
    for box in list(_OPEN):
        try:
            box.close()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
    for group in list(_STUDENTS.values()):  # and the students' cgroups (a checker's leaf among them)
        with contextlib.suppress(Exception):
            group.remove()


def _close_all_and_die(signum, frame) -> None:
    close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(close_all)


def install_signal_cleanup() -> None:
    """Close every open sandbox when this process is told to stop (SIGTERM, SIGHUP); main thread only."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            try:
                signal.signal(signum, _close_all_and_die)
            except ValueError:  # not the main thread
                pass
