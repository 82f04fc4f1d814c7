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
  and a process cap (``fair_share``: cgroup v2 or v1, found at run time).

The grading kernels in these sandboxes (the kernel manager nbgrader's executor uses, and the
student's kernel zygote) are in ``grading_kernels``.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path

from . import fair_share
from .fair_share import CGROUP_PREFIX, LEGACY_CGROUP_ROOTS, SANDBOX_PROCESSES, Cgroup, hierarchies, remove_cgroup
from .owners import older_than, owner_alive, owner_tag
from .package_copies import installed_package_dir

LOG = logging.getLogger(__name__)
BWRAP = "bwrap"
UNSAFE_FLAG = "--no-sandbox-UNSAFE"
# Set by course.py for `grade --no-sandbox-UNSAFE`: the grading kernels then run unconfined.
UNSAFE_ENV = "PAGED_GRADING_NO_SANDBOX_UNSAFE"
PRIVATE_PREFIX = "paged-sandbox-"
# Leftovers named before owners were recorded are removed only when this old (and empty).
UNOWNED_MAX_AGE_S = 6 * 3600


@dataclass(frozen=True)
class Limits:
    """Per-sandbox resource limits. Memory is address space: torch reserves more than it uses."""

    address_space_bytes: int = 16 << 30
    cpu_seconds: int = 3600
    file_bytes: int = 256 << 20
    open_files: int = 1024
    processes: int = SANDBOX_PROCESSES
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
        note = fair_share.fair_share_note()
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
        alive = owner_alive(folder.name, PRIVATE_PREFIX)
        if alive is False or (alive is None and older_than(folder, UNOWNED_MAX_AGE_S)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    for base in dict.fromkeys([*(h.base for h in hierarchies()), *LEGACY_CGROUP_ROOTS]):
        for group in base.glob(f"{CGROUP_PREFIX}*") if base.is_dir() else ():
            alive = owner_alive(group.name, CGROUP_PREFIX)
            if alive is False or (alive is None and older_than(group, UNOWNED_MAX_AGE_S)):
                remove_cgroup(group, kill=alive is False)
                if not group.exists():
                    removed.append(group)
    return removed


def student_leaf(submission: Submission, processes: int = Limits.processes) -> Cgroup:
    """A new leaf of ``submission``'s student's cgroup (``fair_share``); none when grading unsandboxed."""
    if sandbox_disabled():
        return Cgroup([])
    return fair_share.student_leaf((str(submission.root), submission.student), processes)


@functools.cache
def _warn_once(message: str) -> None:
    LOG.warning(message)


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
    fair_share.remove_all_students()  # and the students' cgroups (a checker's leaf among them)


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
