"""The instructor's commands, from release to class report. Run with the course's Python:

    .venv/bin/python autograde/course.py release            # notebooks/ -> source/ -> release/
    .venv/bin/python autograde/course.py check-release      # no leaks; every test says "not implemented yet"
    .venv/bin/python autograde/course.py collect PATH...    # student folders or LMS zips -> submitted/
    .venv/bin/python autograde/course.py grade              # nbgrader autograde, assignment by assignment
    .venv/bin/python autograde/course.py grade --queue URL  # the same on many machines: a job per student
    .venv/bin/python autograde/course.py --root DIR worker --queue URL   # on each grading machine
    .venv/bin/python autograde/course.py status             # where each student's grading on workers stands
    .venv/bin/python autograde/course.py feedback           # nbgrader generate_feedback (HTML per student)
    .venv/bin/python autograde/course.py report             # grades.csv, pass rates, histogram
    .venv/bin/python autograde/course.py publish NN_name    # after its deadline: the solution, for later notebooks
    .venv/bin/python autograde/course.py workspace          # the learner's workspace/ (what `make lab` opens)

Every command works on the course root (``--root``, default: this folder) and calls
nbgrader's own CLI there, with the Python that runs this script (the grading kernels use
it too, so ``paged_helpers`` must be installed in it). It only adds what nbgrader lacks:
one assignment per notebook, the release check, LMS zips, sharding a class across machines,
grading on many machines through a queue (``paged_grading.many_machines``), and the class report.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TextIO

# The light modules; those that import nbgrader or nbformat (seconds) are imported by the commands
# that use them, so that every other command starts at once.
from paged_grading import integrity
from paged_grading.administration import collect, course_files, feedback_files, gradebook, workspace
from paged_grading.clean_run.secret_seeds import ensure_course_key
from paged_grading.sandbox import bubblewrap

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


NOTEBOOK_NAME = re.compile(r"\d\d_[a-z0-9_]+\.ipynb")


def course_notebooks(notebooks_dir: Path) -> list[str]:
    """Assignment names, in course order: one per notebooks/NN_name.ipynb."""
    return sorted(p.stem for p in notebooks_dir.glob("*.ipynb") if NOTEBOOK_NAME.fullmatch(p.name))


def ensure_config(root: Path) -> None:
    """A course root elsewhere (a test, a grading machine) reads this folder's configuration."""
    root.mkdir(parents=True, exist_ok=True)
    if root.resolve() != HERE and not (root / "nbgrader_config.py").exists():
        (root / "nbgrader_config.py").write_text(
            f"c = get_config()  # noqa: F821\nload_subconfig({str(HERE / 'nbgrader_config.py')!r})  # noqa: F821\n"
        )


def nbgrader(
    root: Path, *args: str, check: bool = True, log: TextIO | None = None, files: course_files.CourseFiles | None = None
) -> int:
    """Run nbgrader's CLI in ``root``; its output goes to ``log`` when given (parallel workers).

    ``files``: the course's configuration and gradebook are checked before and after the run
    (``course_files``): nbgrader never starts on a changed configuration or a broken gradebook.
    """
    if files is not None:
        files.check()
    command = [sys.executable, "-m", "nbgrader", *args]
    print("$", "nbgrader", *args, flush=True, file=log or sys.stdout)
    # nbgrader runs `alembic` from PATH: put this Python's bin/ first, activated or not.
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    code = subprocess.run(command, cwd=root, env=env, stdout=log, stderr=log).returncode
    if files is not None:
        files.check()
    if check and code:
        raise SystemExit(f"nbgrader {args[0]} failed (exit {code})")
    return code


def _chosen(names: list[str], available: list[str]) -> list[str]:
    unknown = sorted(set(names) - set(available))
    if unknown:
        raise SystemExit(f"unknown assignment(s): {', '.join(unknown)}; the course has: {', '.join(available)}")
    return names or available


def release_into(
    root: Path, notebooks: Path, assignments: list[str], one_call: bool = False, log: TextIO | None = None
) -> None:
    """notebooks/NN.ipynb -> root/source/NN/ -> nbgrader generate_assignment -> root/release/NN/.

    ``one_call``: a single nbgrader run releases everything under root/source/ (about 4x faster
    than one run per assignment; the learner's workspace and grading workers use it). ``log``:
    where nbgrader's output goes (default: this process's).
    """
    ensure_config(root)
    for assignment in assignments:
        source = root / "source" / assignment
        if source.exists():
            shutil.rmtree(source)
        source.mkdir(parents=True)
        shutil.copyfile(notebooks / f"{assignment}.ipynb", source / f"{assignment}.ipynb")
        if not one_call:
            nbgrader(root, "generate_assignment", assignment, "--force", log=log)
    if one_call:
        nbgrader(root, "generate_assignment", "*", "--force", log=log)


def cmd_release(args) -> int:
    assignments = _chosen(args.assignments, course_notebooks(args.notebooks))
    release_into(args.root, args.notebooks, assignments)
    print(f"released {len(assignments)} assignment(s) into {args.root / 'release'}")
    return 0


def cmd_workspace(args) -> int:
    """The learner's notebooks: the student release, put where the learner's edits are safe."""
    names = course_notebooks(args.notebooks)
    build = args.build.resolve()
    sources = {name: args.notebooks / f"{name}.ipynb" for name in names}
    released = {name: build / "release" / name / f"{name}.ipynb" for name in names}
    if workspace.stale_sources(build, sources, released):
        print("releasing the course's notebooks with nbgrader (solutions and hidden tests removed)...")
        release_into(build, args.notebooks, names, one_call=True)
        workspace.record_release(build, sources)
    for line in workspace.describe(args.into, workspace.sync(args.into, sources, released)):
        print(line)
    return 0


def cmd_publish(args) -> int:
    """An assignment's solution, for the later notebooks that build on it (after its deadline)."""
    from paged_grading.administration import publish

    assignments = _chosen(args.assignments, course_notebooks(args.notebooks))
    for assignment in assignments:
        path = publish.publish(args.notebooks / f"{assignment}.ipynb", args.into)
        print(f"published {assignment} -> {path}")
    print(publish.WHAT_PUBLISHING_MEANS)
    return 0


def cmd_check_release(args) -> int:
    from paged_grading.administration import release_check

    released = sorted(p.name for p in (args.root / "release").iterdir() if p.is_dir())
    assignments = _chosen(args.assignments, released)
    problems = 0
    for assignment in assignments:
        leaks = release_check.find_leaks(
            args.notebooks / f"{assignment}.ipynb", args.root / "release" / assignment / f"{assignment}.ipynb"
        )
        for leak in leaks:
            print(f"LEAK {assignment}: {leak.secret!r} in {leak.where}")
        problems += len(leaks)
    if not args.skip_run:
        for run in release_check.run_release(args.root / "release", assignments, timeout=args.timeout):
            for verdict in run.verdicts:
                mark = "ok  " if verdict.ok else "FAIL"
                print(f"{mark} {run.assignment}/{verdict.grade_id}: {verdict.message}")
            problems += sum(not v.ok for v in run.verdicts) + (0 if run.verdicts else 1)
    print("release check:", "clean" if problems == 0 else f"{problems} problem(s)")
    return 1 if problems else 0


def cmd_collect(args) -> int:
    assignments = set(course_notebooks(args.notebooks))
    submitted = args.root / "submitted"
    roster = collect.Roster()  # one roster for every path: ids stay distinct across them
    lines = []
    for path in args.paths:
        if path.is_dir():
            result = collect.collect_folders(path, submitted, assignments, roster)
        elif path.suffix == ".zip":
            result = collect.collect_zip(path, submitted, assignments, lms=args.lms, roster=roster)
        else:
            raise SystemExit(f"{path}: expected a folder of student folders or an LMS .zip export")
        students = sorted({student for student, _ in result.placed})
        lines.append(f"{path}: {len(result.placed)} notebook(s) from {len(students)} student(s) -> {submitted}")
        lines += [f"  skipped (not a course notebook): {skipped}" for skipped in result.skipped]
        lines += [f"  REFUSED (a link or special file, never read): {refused}" for refused in result.refused]
        lines += [f"  several copies: {choice.describe()}" for choice in result.choices]
    lines += [f"  student id {sid!r} for {raw!r}" for raw, sid in sorted(roster.renamed().items())]
    if any("several copies" in line for line in lines):
        lines.append(f"  rule for several copies of one notebook: {collect.CHOICE_RULE}")
    print("\n".join(lines))
    log = args.root / "reports" / "collect.log"
    log.parent.mkdir(exist_ok=True)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    print(f"(also written to {log})")
    return 0


def _students(root: Path) -> list[str]:
    submitted = root / "submitted"
    return sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.exists() else []


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text}")
    return value


def shard_of(students: list[str], shard: str | None) -> list[str]:
    """'2/4' -> the second quarter of the students, by sorted id (same split on every machine)."""
    if not shard:
        return students
    index, count = (int(x) for x in shard.split("/"))
    if not 1 <= index <= count:
        raise SystemExit(f"--shard {shard}: expected i/n with 1 <= i <= n")
    return [s for k, s in enumerate(sorted(students)) if k % count == index - 1]


# Relative grading time of the heavier notebooks (measured: the Triton notebooks run their kernels
# in the CPU interpreter and compile them for a GPU, twice with the second opinion); others 1.
# Only used to split one student's notebooks between workers (``--jobs`` above the class size).
GRADING_WEIGHT = {
    "06_triton_warmup": 2.0,
    "07_paged_decode_kernel": 5.0,
    "08_continuous_batching": 1.5,
    "09_paged_prefill_kernel": 4.5,
}


def split_assignments(assignments: list[str], parts: int) -> list[list[str]]:
    """``parts`` groups of about equal grading time (longest first onto the lightest group)."""
    groups: list[list[str]] = [[] for _ in range(max(1, min(parts, len(assignments))))]
    load = [0.0] * len(groups)
    for assignment in sorted(assignments, key=lambda a: -GRADING_WEIGHT.get(a, 1.0)):
        lightest = load.index(min(load))
        groups[lightest].append(assignment)
        load[lightest] += GRADING_WEIGHT.get(assignment, 1.0)
    return [sorted(group) for group in groups if group]


def assignment_globs(group: list[str], existing: list[str]) -> list[str]:
    """nbgrader assignment ids (globs) that together match exactly ``group`` among ``existing``.

    One nbgrader process per glob: ``[01][0139]_*`` grades 01, 03, 09 and 10 in one start-up
    (about two seconds each). Where no such glob exists, each assignment by name.
    """
    if all(len(a) > 2 and a[:2].isdigit() and a[2] == "_" for a in group):
        firsts = "".join(sorted({a[0] for a in group}))
        seconds = "".join(sorted({a[1] for a in group}))
        pattern = f"[{firsts}][{seconds}]_*"
        if {a for a in existing if fnmatch.fnmatchcase(a, pattern)} == set(group):
            return [pattern]
    return sorted(group)


def _grade_one_student(
    root: Path,
    files: course_files.CourseFiles,
    student: str,
    assignments: list[str],
    whole_course: bool,
    part: str = "",
) -> tuple[str, int, float]:
    """Autograde one student (or ``part`` of its notebooks) in its own nbgrader process; its log goes
    to reports/grading-logs/."""
    logs = root / "reports" / "grading-logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    code = 0
    submitted = [a for a in assignments if (root / "submitted" / student / a).is_dir()]
    if whole_course:
        ids = ["*"]
    elif part:
        existing = sorted({*_released(root), *(p.name for p in (root / "submitted" / student).iterdir() if p.is_dir())})
        ids = assignment_globs(submitted, existing) if submitted else []
    else:
        ids = submitted
    with open(logs / f"{student}{part}.log", "w", encoding="utf-8") as log:
        for assignment in ids:
            code |= nbgrader(
                root, "autograde", assignment, "--force", f"--student={student}", check=False, log=log, files=files
            )
    return student + part, code, time.perf_counter() - start


def _grade_in_parallel(
    args, files: course_files.CourseFiles, students: list[str], assignments: list[str], whole_course: bool
) -> list[str]:
    """``--jobs N``: N nbgrader processes at a time, one student each, into one server gradebook."""
    url = gradebook.db_url(args.root)
    if not gradebook.allows_concurrent_writers(url):
        raise SystemExit(
            f"--jobs {args.jobs} needs a gradebook that takes concurrent writers, "
            f"and {gradebook.shown(url)} is SQLite. "
            'Set c.CourseDirectory.db_url = "postgresql://USER@HOST/DB" in nbgrader_config.py '
            "(see autograde/README.md), or grade with --jobs 1."
        )
    print(f"grading {len(students)} student(s) with {args.jobs} workers into {gradebook.shown(url)}", flush=True)
    # Fewer students than workers (one submission, a resubmission): each student's notebooks are
    # split between workers; the notebooks read each other's submissions, never their grades, so
    # they need no order. A class is split by student (one nbgrader start-up per student).
    parts = args.jobs // len(students) if len(students) < args.jobs else 1
    units = [(s, assignments, whole_course, "") for s in students]
    if parts > 1:
        units = [
            (s, group, False, f"-part{k + 1}")
            for s in students
            for k, group in enumerate(split_assignments(assignments, parts))
        ]
    second_opinion_key(args.root)  # made once, before the workers (each would make its own)
    failed = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = [pool.submit(_grade_one_student, args.root, files, *unit) for unit in units]
        for run in as_completed(runs):
            student, code, seconds = run.result()
            print(f"  {student}: {'ok' if code == 0 else 'nbgrader reported errors'} ({seconds:.1f} s)", flush=True)
            if code:
                failed.append(student)
    return sorted(failed)


def second_opinion_key(root: Path) -> None:
    """The course's key for the second opinion's secret seeds (see clean_run.secret_seeds)."""
    ensure_course_key(root)


def ungraded(root: Path, students: list[str], assignments: list[str]) -> list[tuple[str, str]]:
    """(student, assignment) submitted but with no autograded notebook: nbgrader gave up on it."""
    return [
        (student, assignment)
        for student in students
        for assignment in assignments
        if (root / "submitted" / student / assignment / f"{assignment}.ipynb").exists()
        and not (root / "autograded" / student / assignment / f"{assignment}.ipynb").exists()
    ]


def _report_ungraded(root: Path, missing: list[tuple[str, str]], reasons: dict | None = None) -> None:
    """reports/ungraded.csv and a NOT GRADED line each; ``reasons`` (grading on workers) say why. None (the
    report): the reasons the last grading gave, for the submissions still not graded."""
    path = root / "reports" / "ungraded.csv"
    path.parent.mkdir(exist_ok=True)
    known = {}
    if reasons is None and path.exists():
        with open(path, newline="", encoding="utf-8") as handle:
            known = {(r["student_id"], r["assignment"]): r.get("reason") or "" for r in csv.DictReader(handle)}
    reasons = reasons if reasons is not None else known
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "assignment", "reason"])
        writer.writerows((s, a, reasons.get((s, a), "")) for s, a in missing)
    if missing:
        print(f"NOT GRADED ({len(missing)}): nbgrader could not grade these submissions; they are listed in {path}")
        for student, assignment in missing:
            why = reasons.get((student, assignment)) or "see reports/grading-logs/ or the log above"
            print(f"  NOT GRADED {student}/{assignment}: {why}")


def _released(root: Path) -> list[str]:
    source = root / "source"
    return sorted(p.name for p in source.iterdir() if p.is_dir()) if source.exists() else []


def _course_files(root: Path) -> course_files.CourseFiles:
    """The configuration, loaded and checked before any nbgrader step (see course_files)."""
    return course_files.CourseFiles.of(root, HERE)


def remove_links_from_submissions(root: Path) -> None:
    """Remove every link and special file under ``submitted/``, without following it, and log it.

    nbgrader's autograde copies every other file of ``submitted/<student>/<assignment>/`` into
    ``autograded/`` with ``shutil.copy``, outside any sandbox, and reads the notebook there, both
    following links: a link to the course key, a solution or another student's notebook would
    arrive in ``autograded/`` as a regular file, which no later check can tell apart, and
    generate_feedback would hand it to the student. ``collect`` never writes one; a folder copied
    into ``submitted/`` by other means (``cp -a``, ``rsync -a``) can bring one.
    """
    for problem in feedback_files.remove_odd_entries(root / "submitted"):
        integrity.log(problem.ids, "leftover", problem.text, root=root)
        print(f"removed before grading: {problem.text}")


def _course_id(root: Path) -> str:
    return str(course_files.load_config(root).CourseDirectory.course_id)


def _grade_on_workers(args, files: course_files.CourseFiles, students: list[str], assignments: list[str]) -> dict:
    """``grade --queue URL``: one job per student through the queue; this process writes every grade."""
    from paged_grading.many_machines import coordinator, signing

    work = {s: [a for a in assignments if (args.root / "submitted" / s / a).is_dir()] for s in students}
    work = {s: names for s, names in work.items() if names}
    url = gradebook.db_url(args.root)
    key = signing.course_key_file(args.root)
    print(
        f"grading {len(work)} student(s) on the workers of {args.queue} (a job per student; a worker silent for "
        f"{args.lease:g} s loses its job; at most {args.tries} tries each), into {gradebook.shown(url)}.\n"
        f"Start workers on any machine with the course installed (once each, with a copy of {key}, mode 0600):\n"
        f"  .venv/bin/python autograde/course.py --root /path/to/worker-folder worker --queue {args.queue} --key KEY",
        flush=True,
    )
    files.check()
    reasons = coordinator.Coordinator(
        args.root,
        args.queue,
        work,
        course_id=_course_id(args.root),
        db_url=url,
        config=HERE / "nbgrader_config.py",
        lease=args.lease,
        tries=args.tries,
        poll=args.poll,
        show_bar=not args.no_progress,
    ).run()
    files.check()
    return reasons


def cmd_worker(args) -> int:
    """``worker``: grade students from the queue in this machine's own folder (see many_machines.worker)."""
    from paged_grading.many_machines import worker

    if args.root == HERE:
        raise SystemExit("a worker needs a folder of its own, emptied between jobs: course.py --root DIR worker ...")
    for name in ONE_THREAD_EACH:
        os.environ.setdefault(name, "1")
    return worker.run(
        args.root,
        queue_url=args.queue,
        course_id=_course_id(args.root),
        key_path=args.key,
        name=args.name,
        course_script=Path(__file__).resolve(),
        config=HERE / "nbgrader_config.py",
        heartbeat=args.heartbeat,
        job_timeout=args.job_timeout,
        release=_release_on_worker,
    )


def _release_on_worker(root: Path, notebooks: Path, names: list[str]) -> None:
    """A worker's copy of the coordinator's course, released as here (nbgrader's output to a log of its own)."""
    with open(root / ".install.log", "w", encoding="utf-8") as log:
        release_into(root, notebooks, names, one_call=True, log=log)


def cmd_status(args) -> int:
    """``status``: the last grading on workers, per student (and the queue's live counts with --queue)."""
    from paged_grading.many_machines import grading_status, queue_db

    for line in grading_status.status_lines(args.root):
        print(line)
    if args.queue:
        for line in queue_db.live_lines(args.queue, _course_id(args.root)):
            print(line)
    return 0


# Grading runs side by side as processes: each notebook's kernel beside its clean run, and --jobs
# workers. Math libraries' own thread pools on top of that oversubscribe the cores, and their
# threads spin while they wait: on 2 cores, one submission with --jobs 2 took 119 CPU s and 62.9 s
# with the default threads, 73.6 CPU s and 42.4 s with one thread each (--jobs 1: 66 and 68 CPU s,
# no gain from the threads either). The course's tensors are small; an instructor may still set these.
ONE_THREAD_EACH = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cmd_grade(args) -> int:
    for name in ONE_THREAD_EACH:
        os.environ.setdefault(name, "1")  # before any process of the grade starts: they inherit it
    if args.queue and (args.jobs > 1 or args.no_sandbox_UNSAFE):
        raise SystemExit("--queue sends the grading to workers: --jobs and --no-sandbox-UNSAFE are for one machine")
    if not args.queue:  # the coordinator runs no student code; every worker checks its own sandbox
        bubblewrap.configure(unsafe=args.no_sandbox_UNSAFE)
    files = _course_files(args.root)
    remove_links_from_submissions(args.root)
    released = _released(args.root)
    assignments = _chosen(args.assignments, released)
    everyone = _students(args.root)
    mine = [args.student] if args.student else shard_of(everyone, args.shard)
    if not mine:
        raise SystemExit(f"no submissions under {args.root / 'submitted'}; run `collect` first")
    whole_course = assignments == released
    reasons = None
    if args.queue:
        reasons = _grade_on_workers(args, files, mine, assignments)
        failed = []
    elif args.jobs > 1:
        failed = _grade_in_parallel(args, files, mine, assignments, whole_course)
    else:
        selection = []
        if args.student:
            selection = [f"--student={args.student}"]
        elif len(mine) < len(everyone):
            others = sorted(set(everyone) - set(mine))
            selection = [f"--CourseDirectory.student_id_exclude={','.join(others)}"]
        if whole_course:
            # One nbgrader process for the whole course (saves its start-up per notebook); it takes the
            # submissions in path order, submitted/<student>/<NN_name>: each student's notebooks in course order.
            code = nbgrader(args.root, "autograde", "*", "--force", *selection, check=False, files=files)
            failed = ["some assignments"] if code else []
        else:
            failed = []
            for assignment in assignments:  # in course order: later notebooks load earlier ones
                if nbgrader(args.root, "autograde", assignment, "--force", *selection, check=False, files=files):
                    failed.append(assignment)
    missing = ungraded(args.root, mine, assignments)
    _report_ungraded(args.root, missing, reasons or {})  # this grading's reasons (report keeps them)
    if failed:
        print(f"nbgrader reported errors for: {', '.join(failed)} (see its log above); the others were graded")
    return 1 if failed or missing else 0


def cmd_feedback(args) -> int:
    files = _course_files(args.root)
    graded = sorted({p.name for s in (args.root / "autograded").glob("*") for p in s.iterdir() if p.is_dir()})
    assignments = _chosen(args.assignments, graded)
    selection = [f"--student={args.student}"] if args.student else []
    # nbgrader's generate_feedback copies every file of autograded/<student>/<assignment>/ with
    # shutil.copy, which follows links: none may be there when it runs, nor in feedback/ after.
    for folder in ("autograded", "feedback"):
        for problem in feedback_files.remove_odd_entries(args.root / folder):
            integrity.log(problem.ids, "leftover", problem.text, root=args.root)
            print(f"removed before feedback: {problem.text}")
    # One student (a grading worker's case): their notebooks in one nbgrader start where one glob names
    # exactly them (about 2 s saved per notebook); nbgrader goes on past an assignment that fails.
    ids = assignment_globs(assignments, sorted({*graded, *_released(args.root)})) if args.student else assignments
    failed = []
    for assignment in ids:
        # nbgrader keeps going past a notebook it cannot convert and exits 1 at the end of the
        # assignment: one broken notebook must not stop the feedback of the other assignments.
        if nbgrader(args.root, "generate_feedback", assignment, "--force", *selection, check=False, files=files):
            failed.append(assignment)
    for problem in feedback_files.remove_odd_entries(args.root / "feedback"):
        integrity.log(problem.ids, "leftover", problem.text, root=args.root)
        print(f"removed from feedback: {problem.text}")
    for problem in feedback_files.enforce_limits(args.root / "feedback"):
        print(f"feedback limit: {problem}")
    missing = [
        (student.name, assignment.name)
        for student in sorted((args.root / "autograded").glob("*"))
        for assignment in sorted(student.iterdir())
        if assignment.name in assignments
        and (not args.student or student.name == args.student)
        and not (args.root / "feedback" / student.name / assignment.name / f"{assignment.name}.html").exists()
    ]
    for student, assignment in missing:
        print(f"NO FEEDBACK for {student}/{assignment}: nbgrader could not convert it (see its log above)")
    print(f"feedback HTML under {args.root / 'feedback'}")
    if failed:
        print(f"nbgrader reported errors in: {', '.join(failed)}; every other notebook got its feedback")
    return 1 if failed or missing else 0


def cmd_report(args) -> int:
    from paged_grading.administration import class_report

    out = args.root / "reports"
    out.mkdir(exist_ok=True)
    files = _course_files(args.root)
    url = gradebook.db_url(args.root)
    nbgrader(args.root, "export", f"--to={out / 'grades.csv'}", files=files)
    students, assignments = _students(args.root), _released(args.root)
    missing = ungraded(args.root, students, assignments)
    _report_ungraded(args.root, missing)
    status = {
        (student, assignment): class_report.GRADED
        for student in students
        for assignment in assignments
        if (args.root / "autograded" / student / assignment / f"{assignment}.ipynb").exists()
    }
    class_report.add_status(out / "grades.csv", {**status, **{key: class_report.NOT_GRADED for key in missing}})
    paths = class_report.write_report(url, out)
    rates = class_report.pass_rates(class_report.autograded_scores(url))
    for line in class_report.pass_rate_lines(rates):
        print(line)
    findings = integrity.summary(args.root / integrity.LOG)
    if findings:
        print(f"integrity findings ({args.root / integrity.LOG}), by kind:")
        for line in findings:
            print(f"  {line}")
    for path in [out / "grades.csv", *paths.values()]:
        print("wrote", path)
    return 0


def _add_grade(sub) -> None:
    """``course.py grade``: on this machine (``--jobs``), or on the workers of a queue (``--queue``)."""
    p = sub.add_parser("grade", help="nbgrader autograde every (or the named) assignment")
    p.add_argument("assignments", nargs="*")
    p.add_argument("--student")
    p.add_argument("--shard", help="i/n: grade only the i-th of n equal slices of the class (one per machine)")
    p.add_argument(
        bubblewrap.UNSAFE_FLAG,
        action="store_true",
        help="run student code WITHOUT the bubblewrap sandbox (only for code you trust)",
    )
    p.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        help="students graded at once, one nbgrader process each (needs a PostgreSQL gradebook; default 1). "
        "Each worker keeps about two cores busy (a kernel and its second opinion): use about half the cores",
    )
    p.add_argument(
        "--queue",
        metavar="URL",
        help="grade on the workers of this queue (postgresql://USER@HOST/DB; procrastinate): a job per student, "
        "every grade written here. Start workers with `course.py --root DIR worker --queue URL`",
    )
    p.add_argument("--lease", type=float, default=60.0, help="with --queue: seconds without a worker's heartbeat "
                   "before its job is given to another worker (default 60; workers beat every 10 s)")  # fmt: skip
    p.add_argument("--tries", type=_positive, default=3, help="with --queue: tries per student before NOT GRADED")
    p.add_argument("--poll", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--no-progress", action="store_true", help="with --queue: no progress bar (logs, CI)")
    p.set_defaults(run=cmd_grade)


def _add_worker(sub) -> None:
    """``course.py worker``: grade students from a queue, on this machine."""
    p = sub.add_parser("worker", help="grade students from a queue, one at a time, in this folder (--root DIR)")
    p.add_argument("--queue", metavar="URL", required=True, help="the coordinator's queue (postgresql://USER@HOST/DB)")
    p.add_argument("--key", type=Path, help="the coordinator's worker key (default: ROOT/.worker_key), mode 0600")
    p.add_argument("--name", help="this worker's name in the coordinator's report (default: host-pid)")
    p.add_argument("--heartbeat", type=float, default=10.0, help="seconds between heartbeats (default 10)")
    p.add_argument(
        "--job-timeout", type=float, default=7200.0, help="seconds before a student's grading is stopped (default 7200)"
    )
    p.set_defaults(run=cmd_worker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=HERE, help="course root (default: autograde/)")
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks", help="instructor notebooks")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="copy notebooks into source/ and generate the student release")
    p.add_argument("assignments", nargs="*")
    p.set_defaults(run=cmd_release)

    p = sub.add_parser("check-release", help="no solution text anywhere; every test fails 'not implemented yet'")
    p.add_argument("assignments", nargs="*")
    p.add_argument("--skip-run", action="store_true", help="only look for leaks")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    p.set_defaults(run=cmd_check_release)

    p = sub.add_parser("collect", help="student folders or LMS zip exports -> submitted/")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--lms", choices=["auto", *collect.LMS_PATTERNS], default="auto")
    p.set_defaults(run=cmd_collect)

    _add_grade(sub)
    _add_worker(sub)

    p = sub.add_parser("status", help="where each student's grading on workers stands (reports/grading-status.csv)")
    p.add_argument("--queue", metavar="URL", help="also the queue's live counts and its workers")
    p.set_defaults(run=cmd_status)

    p = sub.add_parser("feedback", help="nbgrader generate_feedback")
    p.add_argument("assignments", nargs="*")
    p.add_argument("--student")
    p.set_defaults(run=cmd_feedback)

    p = sub.add_parser("report", help="grades.csv, per-check pass rates and a score histogram in reports/")
    p.set_defaults(run=cmd_report)

    p = sub.add_parser("publish", help="after its deadline: an assignment's solution, for later notebooks")
    p.add_argument("assignments", nargs="+")
    p.add_argument("--into", type=Path, default=None, help="folder of published solutions (default: ROOT/published)")
    p.set_defaults(run=cmd_publish)

    p = sub.add_parser("workspace", help="the learner's notebooks (the student release) in workspace/; keeps edits")
    p.add_argument("--into", type=Path, default=REPO / "workspace", help="the learner's folder")
    p.add_argument("--build", type=Path, default=REPO / ".workspace-build", help="nbgrader course root for the release")
    p.set_defaults(run=cmd_workspace)

    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    if getattr(args, "into", "unset") is None:
        args.into = args.root / "published"
    args.notebooks = args.notebooks.resolve()
    ensure_config(args.root)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
