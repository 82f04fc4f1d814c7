"""The instructor's commands, from release to class report. Run with the course's Python:

    .venv/bin/python autograde/course.py release            # notebooks/ -> source/ -> release/
    .venv/bin/python autograde/course.py check-release      # no leaks; every test says "not implemented yet"
    .venv/bin/python autograde/course.py collect PATH...    # student folders or LMS zips -> submitted/
    .venv/bin/python autograde/course.py grade              # nbgrader autograde, assignment by assignment
    .venv/bin/python autograde/course.py feedback           # nbgrader generate_feedback (HTML per student)
    .venv/bin/python autograde/course.py report             # grades.csv, pass rates, histogram
    .venv/bin/python autograde/course.py publish NN_name    # after its deadline: the solution, for later notebooks
    .venv/bin/python autograde/course.py workspace          # the learner's workspace/ (what `make lab` opens)

Every command works on the course root (``--root``, default: this folder) and calls
nbgrader's own CLI there, with the Python that runs this script (the grading kernels use
it too, so ``paged_helpers`` must be installed in it). It only adds what nbgrader lacks:
one assignment per notebook, the release check, LMS zips, sharding a class across machines,
and the class report.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from paged_grading import collect, publish, release_check, report, workspace  # noqa: E402

NOTEBOOK_NAME = re.compile(r"\d\d_[a-z0-9_]+\.ipynb")


def course_notebooks(notebooks_dir: Path) -> list[str]:
    """Assignment names, in course order: one per notebooks/NN_name.ipynb."""
    return sorted(p.stem for p in notebooks_dir.glob("*.ipynb") if NOTEBOOK_NAME.fullmatch(p.name))


def ensure_config(root: Path) -> None:
    """A course root elsewhere (a test, a grading machine) reads this folder's configuration."""
    root.mkdir(parents=True, exist_ok=True)
    if root.resolve() != HERE and not (root / "nbgrader_config.py").exists():
        (root / "nbgrader_config.py").write_text(
            "c = get_config()  # noqa: F821\n"
            f"load_subconfig({str(HERE / 'nbgrader_config.py')!r})  # noqa: F821\n"
        )


def nbgrader(root: Path, *args: str, check: bool = True) -> int:
    command = [sys.executable, "-m", "nbgrader", *args]
    print("$", "nbgrader", *args, flush=True)
    # nbgrader runs `alembic` from PATH: put this Python's bin/ first, activated or not.
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    code = subprocess.run(command, cwd=root, env=env).returncode
    if check and code:
        raise SystemExit(f"nbgrader {args[0]} failed (exit {code})")
    return code


def _chosen(names: list[str], available: list[str]) -> list[str]:
    unknown = sorted(set(names) - set(available))
    if unknown:
        raise SystemExit(
            f"unknown assignment(s): {', '.join(unknown)}; the course has: {', '.join(available)}"
        )
    return names or available


def release_into(root: Path, notebooks: Path, assignments: list[str], one_call: bool = False) -> None:
    """notebooks/NN.ipynb -> root/source/NN/ -> nbgrader generate_assignment -> root/release/NN/.

    ``one_call``: a single nbgrader run releases everything under root/source/ (about 4x faster
    than one run per assignment; the learner's workspace uses it).
    """
    ensure_config(root)
    for assignment in assignments:
        source = root / "source" / assignment
        if source.exists():
            shutil.rmtree(source)
        source.mkdir(parents=True)
        shutil.copyfile(notebooks / f"{assignment}.ipynb", source / f"{assignment}.ipynb")
        if not one_call:
            nbgrader(root, "generate_assignment", assignment, "--force")
    if one_call:
        nbgrader(root, "generate_assignment", "*", "--force")


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
    assignments = _chosen(args.assignments, course_notebooks(args.notebooks))
    for assignment in assignments:
        path = publish.publish(args.notebooks / f"{assignment}.ipynb", args.into)
        print(f"published {assignment} -> {path}")
    print(publish.WHAT_PUBLISHING_MEANS)
    return 0


def cmd_check_release(args) -> int:
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
    for path in args.paths:
        if path.is_dir():
            result = collect.collect_folders(path, submitted, assignments)
        elif path.suffix == ".zip":
            result = collect.collect_zip(path, submitted, assignments, lms=args.lms)
        else:
            raise SystemExit(f"{path}: expected a folder of student folders or an LMS .zip export")
        students = sorted({student for student, _ in result.placed})
        print(f"{path}: {len(result.placed)} notebook(s) from {len(students)} student(s) -> {submitted}")
        for skipped in result.skipped:
            print(f"  skipped (not a course notebook): {skipped}")
    return 0


def _students(root: Path) -> list[str]:
    submitted = root / "submitted"
    return sorted(p.name for p in submitted.iterdir() if p.is_dir()) if submitted.exists() else []


def shard_of(students: list[str], shard: str | None) -> list[str]:
    """'2/4' -> the second quarter of the students, by sorted id (same split on every machine)."""
    if not shard:
        return students
    index, count = (int(x) for x in shard.split("/"))
    if not 1 <= index <= count:
        raise SystemExit(f"--shard {shard}: expected i/n with 1 <= i <= n")
    return [s for k, s in enumerate(sorted(students)) if k % count == index - 1]


def cmd_grade(args) -> int:
    released = sorted(p.name for p in (args.root / "source").iterdir() if p.is_dir())
    assignments = _chosen(args.assignments, released)
    everyone = _students(args.root)
    mine = [args.student] if args.student else shard_of(everyone, args.shard)
    if not mine:
        raise SystemExit(f"no submissions under {args.root / 'submitted'}; run `collect` first")
    selection = []
    if args.student:
        selection = [f"--student={args.student}"]
    elif len(mine) < len(everyone):
        others = sorted(set(everyone) - set(mine))
        selection = [f"--CourseDirectory.student_id_exclude={','.join(others)}"]
    if assignments == released:
        # One nbgrader process for the whole course (saves its start-up per notebook); it takes the
        # submissions in path order, submitted/<student>/<NN_name>: each student's notebooks in course order.
        code = nbgrader(args.root, "autograde", "*", "--force", *selection, check=False)
        failed = ["some assignments"] if code else []
    else:
        failed = []
        for assignment in assignments:  # in course order: later notebooks load earlier ones
            if nbgrader(args.root, "autograde", assignment, "--force", *selection, check=False):
                failed.append(assignment)
    if failed:
        print(
            f"nbgrader reported errors for: {', '.join(failed)} (see its log above); the others were graded"
        )
    return 1 if failed else 0


def cmd_feedback(args) -> int:
    graded = sorted({p.name for s in (args.root / "autograded").glob("*") for p in s.iterdir() if p.is_dir()})
    assignments = _chosen(args.assignments, graded)
    selection = [f"--student={args.student}"] if args.student else []
    for assignment in assignments:
        nbgrader(args.root, "generate_feedback", assignment, "--force", *selection)
    print(f"feedback HTML under {args.root / 'feedback'}")
    return 0


def cmd_report(args) -> int:
    out = args.root / "reports"
    out.mkdir(exist_ok=True)
    nbgrader(args.root, "export", f"--to={out / 'grades.csv'}")
    paths = report.write_report(f"sqlite:///{args.root / 'gradebook.db'}", out)
    rates = report.pass_rates(report.autograded_scores(f"sqlite:///{args.root / 'gradebook.db'}"))
    print(f"{'assignment':28} {'check':36} pass rate")
    for row in rates:
        print(f"{row['assignment']:28} {row['check']:36} {row['passed']}/{row['submissions']}")
    integrity = out / "integrity.log"
    if integrity.exists():
        print(f"integrity warnings (helper package modified during grading): see {integrity}")
    for path in [out / "grades.csv", *paths.values()]:
        print("wrote", path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, default=HERE, help="course root (default: autograde/)")
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks", help="instructor notebooks")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("release", help="copy notebooks into source/ and generate the student release")
    p.add_argument("assignments", nargs="*")
    p.set_defaults(run=cmd_release)

    p = sub.add_parser(
        "check-release", help="no solution text anywhere; every test fails 'not implemented yet'"
    )
    p.add_argument("assignments", nargs="*")
    p.add_argument("--skip-run", action="store_true", help="only look for leaks")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    p.set_defaults(run=cmd_check_release)

    p = sub.add_parser("collect", help="student folders or LMS zip exports -> submitted/")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("--lms", choices=["auto", *collect.LMS_PATTERNS], default="auto")
    p.set_defaults(run=cmd_collect)

    p = sub.add_parser("grade", help="nbgrader autograde every (or the named) assignment")
    p.add_argument("assignments", nargs="*")
    p.add_argument("--student")
    p.add_argument(
        "--shard", help="i/n: grade only the i-th of n equal slices of the class (one per machine)"
    )
    p.set_defaults(run=cmd_grade)

    p = sub.add_parser("feedback", help="nbgrader generate_feedback")
    p.add_argument("assignments", nargs="*")
    p.add_argument("--student")
    p.set_defaults(run=cmd_feedback)

    p = sub.add_parser("report", help="grades.csv, per-check pass rates and a score histogram in reports/")
    p.set_defaults(run=cmd_report)

    p = sub.add_parser(
        "publish", help="after its deadline: an assignment's solution, for later notebooks"
    )
    p.add_argument("assignments", nargs="+")
    p.add_argument(
        "--into", type=Path, default=None, help="folder of published solutions (default: ROOT/published)"
    )
    p.set_defaults(run=cmd_publish)

    p = sub.add_parser("workspace", help="the learner's notebooks (the student release) in workspace/; keeps edits")
    p.add_argument("--into", type=Path, default=REPO / "workspace", help="the learner's folder")
    p.add_argument(
        "--build", type=Path, default=REPO / ".workspace-build", help="nbgrader course root for the release"
    )
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
