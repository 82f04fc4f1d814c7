"""How fast the course grades: one complete submission, and a class serial vs in parallel.

    .venv/bin/python autograde/benchmark_grading.py                    # the whole course
    .venv/bin/python autograde/benchmark_grading.py --class-size 4     # class of 4, --jobs 1 and 2
    .venv/bin/python autograde/benchmark_grading.py 02_block_allocator 03_paged_kv_cache --class-size 0
    .venv/bin/python autograde/benchmark_grading.py --class-size 0 --per-notebook   # where the time goes
    .venv/bin/python autograde/benchmark_grading.py 01_block_tables 02_block_allocator --class-size 3 --workers 1 2

Releases the course into a scratch course root (not timed) and submits the instructor
notebooks (every test passes) for each made-up student. Then, through ``course.py grade`` (what
an instructor runs):

1. one complete submission (all the named notebooks, one student): the target is
   ``TARGET_S`` seconds on a 2-core CPU, with full marks; graded with ``--jobs 1`` and, with a
   PostgreSQL gradebook, with ``--jobs J`` (its notebooks split between J workers), side by side;
2. with ``--class-size N`` (N > 0), the class of N students graded serially (``--jobs 1``) and
   with ``--jobs J`` workers, both into the same kind of gradebook, printed side by side as
   submissions per hour;
3. with ``--per-notebook``, each notebook of the submission graded alone (``--jobs 1``): its
   seconds and CPU seconds. Each includes what every ``course.py grade`` pays to start (about
   what the smallest notebook takes), so compare the notebooks with each other;
4. with ``--workers N [M ...]`` (and a class), the same class graded on N (then M) worker
   processes through the queue (``course.py grade --queue``, procrastinate on the throwaway
   PostgreSQL), beside the ``--jobs`` runs: each worker has its own folder, as if on its own machine
   (here they share the cores), and installs the course on its first job (counted). Printed with
   the coordinator's own time per job (building and signing the payload, accepting the result).

The parallel run needs a PostgreSQL gradebook: the benchmark starts a throwaway server
(``paged_grading.administration.throwaway_postgres``) and uses it for every run; without PostgreSQL it uses SQLite and
skips the parallel run, saying why. Grading kernels import a private copy of the installed
``paged_helpers``. Prints one line per run (wall-clock seconds, CPU seconds of every process the
run started, sandboxes included, and the load average before and after: others may share the
cores) and a JSON summary.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import course  # autograde/course.py, beside this script (run as a script, its folder is on sys.path)
from paged_grading.administration import class_report, throwaway_postgres
from paged_grading.sandbox.package_copies import PACKAGE, installed_package_dir

HERE = Path(__file__).resolve().parent

TARGET_S = 45.0


class Course:
    """A scratch course root graded through course.py, with the private package on PYTHONPATH."""

    def __init__(self, root: Path, site: Path, db_url: str | None) -> None:
        self.root = root
        self.env = {
            **os.environ,
            "PYTHONPATH": str(site),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        }
        root.mkdir(parents=True)
        lines = [
            "c = get_config()  # noqa: F821",
            f"load_subconfig({str(HERE / 'nbgrader_config.py')!r})  # noqa: F821",
        ]
        if db_url:
            lines.append(f"c.CourseDirectory.db_url = {db_url!r}")
        (root / "nbgrader_config.py").write_text("\n".join(lines) + "\n")
        self.db_url = db_url or f"sqlite:///{root / 'gradebook.db'}"
        self.cpu_s = 0.0

    def run(self, *args: str) -> float:
        """Run course.py; return its wall-clock seconds.

        Its CPU seconds (user + system of course.py, nbgrader, the kernels, the second opinions and
        the compilers) go to ``self.cpu_s``, the load averages before and after to ``self.load``:
        the CPU time is what the run costs whatever else the machine is doing, unlike the wall-clock
        time. It is read from a cgroup of its own (``cpu.stat``, cgroup v2) where the machine lets
        us make one; otherwise from the reaped children's rusage, with this process made their
        subreaper (sandboxed processes are not always reaped through their parents: a lower bound).
        """
        load_before = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        group = CpuCgroup()
        start = time.perf_counter()
        subreaper = _become_subreaper()
        with tempfile.TemporaryFile() as out:
            process = subprocess.Popen(
                [*group.enter_command(), sys.executable, str(HERE / "course.py"), "--root", str(self.root), *args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            returncode = _reap_all(process) if subreaper else process.wait()
            out.seek(0)
            output = out.read().decode(errors="replace")
        seconds = round(time.perf_counter() - start, 1)
        if returncode:
            group.remove()
            raise SystemExit(f"course.py {' '.join(args)} failed:\n{output[-6000:]}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        measured = group.cpu_seconds()
        group.remove()
        self.cpu_method = "cgroup" if measured is not None else "rusage (lower bound)"
        if measured is None:
            measured = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        self.cpu_s = round(measured, 1)
        self.load = (round(load_before, 2), round(os.getloadavg()[0], 2))
        return seconds

    def submit(self, notebooks: Path, student: str, assignments: list[str]) -> None:
        for assignment in assignments:
            folder = self.root / "submitted" / student / assignment
            folder.mkdir(parents=True)
            shutil.copyfile(notebooks / f"{assignment}.ipynb", folder / f"{assignment}.ipynb")

    def clear_grades(self) -> None:
        shutil.rmtree(self.root / "autograded", ignore_errors=True)

    def score(self) -> tuple[float, float]:
        rows = class_report.autograded_scores(self.db_url)
        return sum(r.score for r in rows), sum(r.max_score for r in rows)


class CpuCgroup:
    """A cgroup v2 of the run's own: ``cpu.stat`` counts every process in it, sandboxes included."""

    ROOTS = (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))

    def __init__(self) -> None:
        self.path: Path | None = None
        for root in self.ROOTS:
            if not (root / "cgroup.procs").exists() or not (root / "cgroup.controllers").exists():
                continue  # not a cgroup v2 hierarchy
            path = root / f"paged-benchmark-{os.getpid()}-{time.monotonic_ns()}"
            try:
                path.mkdir()
            except OSError:
                continue
            if (path / "cpu.stat").exists():
                self.path = path
                break
            path.rmdir()

    def enter_command(self) -> list[str]:
        if self.path is None:
            return []
        return ["/bin/sh", "-c", f'echo $$ > {self.path / "cgroup.procs"} && exec "$@"', "benchmark"]

    def cpu_seconds(self) -> float | None:
        if self.path is None:
            return None
        for _ in range(20):  # the last sandboxes end a moment after course.py
            if not (self.path / "cgroup.procs").read_text().split():
                break
            time.sleep(0.1)
        for line in (self.path / "cpu.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == "usage_usec":
                return int(value) / 1e6
        return None

    def remove(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.rmdir()
            self.path = None


def _become_subreaper() -> bool:
    """Orphaned descendants (the sandboxes' processes) are re-parented to this process (Linux)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap_all(process: subprocess.Popen) -> int:
    """Wait for ``process``, reaping every orphan re-parented here meanwhile (their CPU time is then
    counted), and for a moment after it, for the sandboxes that end with it."""
    code = None
    quiet_since = None
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if code is None else os.WNOHANG)
        except ChildProcessError:
            break
        if pid == process.pid:
            code = os.waitstatus_to_exitcode(status)
            process.returncode = code
        elif pid == 0:  # only live children left (a database server): give the last ones a moment
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.5:
                break
            time.sleep(0.05)
        else:
            quiet_since = None
    return code if code is not None else process.wait()


def private_package_copy(site: Path) -> Path:
    """The installed ``paged_helpers`` copied under ``site``, with the course's data where an
    installed package keeps it (from a clone, an editable install, that is the clone's ``data/``:
    without it every check that loads the tiny model fails and the benchmark times a 0)."""
    package = installed_package_dir()
    shutil.copytree(package, site / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    data = site / PACKAGE / "course_data" / "files"
    if not data.is_dir() and (package.parent / "data").is_dir():
        shutil.copytree(package.parent / "data", data)
    compileall.compile_dir(site / PACKAGE, quiet=1)  # as `pip install` does: the sandbox can't write them
    return site / PACKAGE


class Workers:
    """``course.py worker`` processes, each in a folder of its own, all in one CPU cgroup (their CPU time)."""

    def __init__(self, grading: Course, queue_url: str, count: int, scratch: Path) -> None:
        from paged_grading.many_machines import signing

        key = signing.course_key_file(grading.root)
        self.group = CpuCgroup()
        self.processes = []
        for k in range(count):
            root = scratch / f"worker-{count}-{k + 1}"
            root.mkdir()
            shutil.copyfile(key, root / signing.KEY_FILE)
            os.chmod(root / signing.KEY_FILE, 0o600)
            command = [sys.executable, str(HERE / "course.py"), "--root", str(root), "worker", "--queue", queue_url]
            with open(scratch / f"worker-{count}-{k + 1}.log", "w") as log:
                self.processes.append(
                    subprocess.Popen(
                        [*self.group.enter_command(), *command, "--name", f"w{k + 1}"],
                        env=grading.env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def stop(self) -> float | None:
        """Stop the workers (each finishes nothing: the run is over); their CPU seconds, if measured."""
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait(60)
        seconds = self.group.cpu_seconds()
        self.group.remove()
        return seconds


def per_hour(submissions: int, seconds: float) -> float:
    return round(3600 * submissions / seconds, 1)


def _one_submission(grading: Course, assignments: list[str], jobs: int, parallel_ok: bool, summary: dict) -> bool:
    """One complete submission, serially (--jobs 1) and, with a gradebook that takes concurrent writers,
    with its notebooks split between ``jobs`` workers (what `course.py grade --student S --jobs 2` does
    on a 2-core machine). True when it scores full marks within the target."""
    one_runs = {"jobs=1": ()}
    if parallel_ok and jobs > 1:
        one_runs[f"jobs={jobs}"] = ("--jobs", str(jobs))
    summary["one_submission"] = {}
    print(f"one complete submission ({len(assignments)} notebooks), target {TARGET_S:g} s:")
    print(f"  {'run':8} {'seconds':>8} {'CPU s':>8} {'load before/after':>18}  score")
    ok = True
    for name, extra in one_runs.items():
        grading.clear_grades()
        seconds = grading.run("grade", *assignments, "--student", "one", *extra)
        score, maximum = grading.score()
        summary["one_submission"][name] = {
            "seconds": seconds,
            "cpu_seconds": grading.cpu_s,
            "cpu_measured_by": grading.cpu_method,
            "load_average_before_after": grading.load,
            "autograded_score": f"{score:g}/{maximum:g}",
        }
        load = f"{grading.load[0]:.2f}/{grading.load[1]:.2f}"
        print(f"  {name:8} {seconds:8.1f} {grading.cpu_s:8.1f} {load:>18}  {score:g}/{maximum:g}")
        ok = ok and score == maximum
    print(f"  (CPU seconds measured by {grading.cpu_method})")
    best_name = min(one_runs, key=lambda n: summary["one_submission"][n]["seconds"])
    best = summary["one_submission"][best_name]["seconds"]
    verdict = "meets" if best <= TARGET_S else "misses"
    print(f"  best: {best:.1f} s ({best_name}) {verdict} the {TARGET_S:g} s target")
    summary["one_submission"]["best"] = {"run": best_name, "seconds": best, "meets_target": best <= TARGET_S}
    return ok and best <= TARGET_S


def _each_notebook_alone(grading: Course, assignments: list[str], summary: dict) -> None:
    summary["per_notebook"] = {}
    print("each notebook graded alone (--jobs 1):")
    print(f"  {'notebook':28} {'seconds':>8} {'CPU s':>8}  score")
    for assignment in assignments:
        grading.clear_grades()
        seconds = grading.run("grade", assignment, "--student", "one")
        rows = [r for r in class_report.autograded_scores(grading.db_url) if r.assignment == assignment]
        score, maximum = sum(r.score for r in rows), sum(r.max_score for r in rows)
        summary["per_notebook"][assignment] = {"seconds": seconds, "cpu_seconds": grading.cpu_s}
        print(f"  {assignment:28} {seconds:8.1f} {grading.cpu_s:8.1f}  {score:g}/{maximum:g}")


@dataclass
class ClassRun:
    seconds: float
    cpu_s: float
    load: tuple
    coordinator_per_job: dict | None = None  # on workers: send and accept seconds, and CPU s per job


def _on_workers(grading: Course, assignments: list[str], server, counts: list[int], scratch: Path) -> dict:
    """The class graded on ``count`` workers of a queue, for each count."""
    runs = {}
    queue_url = server.create_database("grading_queue")
    for count in counts:
        grading.clear_grades()
        workers = Workers(grading, queue_url, count, scratch)
        try:
            took = grading.run("grade", *assignments, "--queue", queue_url, "--no-progress")
        finally:
            workers_cpu = workers.stop()
        run = json.loads((grading.root / "reports" / "workers-run.json").read_text())
        per_job = {**run["coordinator_s_per_job"], "coordinator_cpu_s": round(grading.cpu_s / max(1, run["tries"]), 2)}
        runs[f"workers={count}"] = ClassRun(took, grading.cpu_s + (workers_cpu or 0.0), grading.load, per_job)
    return runs


def _print_class(runs: dict[str, ClassRun], count: int) -> None:
    on_workers = any(run.coordinator_per_job for run in runs.values())
    print(f"class of {count} complete submissions:")
    header = f"  {'run':9} {'seconds':>8} {'CPU s':>8} {'load before/after':>18} {'submissions/hour':>17}"
    print(header + ("  coordinator per job (send + accept s; its CPU s)" if on_workers else ""))
    for name, run in runs.items():
        shown = f"{run.load[0]:.2f}/{run.load[1]:.2f}"
        line = f"  {name:9} {run.seconds:8.1f} {run.cpu_s:8.1f} {shown:>18} {per_hour(count, run.seconds):17.1f}"
        if run.coordinator_per_job:
            job = run.coordinator_per_job
            line += f"  {job['send']:.3f} + {job['accept']:.3f} s; {job['coordinator_cpu_s']:.2f} CPU s"
        print(line)
    if on_workers:
        print("  (workers: CPU s are the coordinator's and the workers'; each worker installs the course once)")


def _class(grading: Course, args, assignments: list[str], server, why_not: str, scratch: Path, summary: dict) -> bool:
    """The class (``--class-size`` students and "one") graded serially, with ``--jobs``, and on workers."""
    students = [f"student{k:02d}" for k in range(args.class_size)]
    for student in students:
        grading.submit(args.notebooks, student, assignments)
    grading.clear_grades()
    took = grading.run("grade", *assignments)
    runs = {"jobs=1": ClassRun(took, grading.cpu_s, grading.load)}
    if server is None:
        print(f"parallel run skipped: {why_not}")
    else:
        grading.clear_grades()
        took = grading.run("grade", *assignments, "--jobs", str(args.jobs))
        runs[f"jobs={args.jobs}"] = ClassRun(took, grading.cpu_s, grading.load)
    if args.workers and server is None:
        print(f"runs on workers skipped: {why_not}")
    elif args.workers:
        runs.update(_on_workers(grading, assignments, server, args.workers, scratch))
    count = len(students) + 1  # "one" is graded again with the class
    _print_class(runs, count)
    summary["class"] = {
        name: {
            "seconds": run.seconds,
            "cpu_seconds": run.cpu_s,
            "load_average_before_after": run.load,
            "submissions_per_hour": per_hour(count, run.seconds),
            "submissions": count,
            **({"coordinator_per_job": run.coordinator_per_job} if run.coordinator_per_job else {}),
        }
        for name, run in runs.items()
    }
    score, maximum = grading.score()
    summary["class_score"] = f"{score:g}/{maximum:g}"
    return score == maximum


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--notebooks", type=Path, default=course.REPO / "notebooks")
    parser.add_argument("--class-size", type=int, default=4, help="students in the class run (0: skip it)")
    parser.add_argument("--jobs", type=int, default=2, help="workers of the parallel class run")
    parser.add_argument("--per-notebook", action="store_true", help="also grade each notebook alone")
    parser.add_argument(
        "--workers", type=int, nargs="*", default=[], help="also grade the class on this many workers (each count)"
    )
    args = parser.parse_args(argv)
    assignments = args.assignments or course.course_notebooks(args.notebooks)
    # nbgrader's Gradebook (read for the scores) runs `alembic` from PATH.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

    summary: dict = {"assignments": len(assignments), "cpu_count": os.cpu_count(), "target_s": TARGET_S}
    why_not = throwaway_postgres.unavailable_reason()
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="grading-benchmark-") as scratch:
        server = None if why_not else stack.enter_context(throwaway_postgres.ThrowawayPostgres())
        scratch = Path(scratch)
        site = scratch / "site"
        private_package_copy(site)
        grading = Course(scratch / "course", site, server.url if server else None)
        summary["gradebook"] = "postgresql" if server else "sqlite"
        grading.run("release", *assignments)
        grading.submit(args.notebooks, "one", assignments)
        ok = _one_submission(grading, assignments, args.jobs, server is not None, summary)
        if args.per_notebook:
            _each_notebook_alone(grading, assignments, summary)
        if args.class_size > 0:
            ok = _class(grading, args, assignments, server, why_not, scratch, summary) and ok
    summary["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(summary, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
