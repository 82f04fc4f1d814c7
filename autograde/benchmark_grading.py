"""How long nbgrader takes to autograde one complete submission of the course.

    .venv/bin/python autograde/benchmark_grading.py            # every notebook in notebooks/
    .venv/bin/python autograde/benchmark_grading.py 02_block_allocator 03_paged_kv_cache

Releases the course into a scratch course root (not timed), submits the instructor notebooks
as one student, then times ``nbgrader autograde`` for each assignment, in course order, with
this course's configuration (guard, fair execution). The grading kernels import a private
copy of the installed ``paged_helpers``. The target is under 90 s for the whole course on a
2-core CPU; prints one line per assignment and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import course  # noqa: E402
from paged_grading.guard import PACKAGE, installed_package_dir  # noqa: E402

TARGET_S = 90.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--notebooks", type=Path, default=course.REPO / "notebooks")
    parser.add_argument(
        "--per-assignment", action="store_true", help="one nbgrader run per notebook, timed separately"
    )
    args = parser.parse_args(argv)
    assignments = args.assignments or course.course_notebooks(args.notebooks)

    with tempfile.TemporaryDirectory(prefix="grading-benchmark-") as scratch:
        scratch = Path(scratch)
        site = scratch / "site"
        shutil.copytree(installed_package_dir(), site / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
        env = {
            **os.environ,
            "PYTHONPATH": str(site),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        }
        root = scratch / "course"
        course.ensure_config(root)

        def run(*command: str) -> None:
            done = subprocess.run(
                [sys.executable, "-m", "nbgrader", *command],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode:
                raise SystemExit(
                    f"nbgrader {' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
                )

        for assignment in assignments:
            (root / "source" / assignment).mkdir(parents=True)
            shutil.copyfile(
                args.notebooks / f"{assignment}.ipynb", root / "source" / assignment / f"{assignment}.ipynb"
            )
            run("generate_assignment", assignment, "--force")
            submitted = root / "submitted" / "benchmark" / assignment
            submitted.mkdir(parents=True)
            shutil.copyfile(args.notebooks / f"{assignment}.ipynb", submitted / f"{assignment}.ipynb")

        seconds = {}
        if args.per_assignment:
            for assignment in assignments:
                start = time.perf_counter()
                run("autograde", assignment, "--student=benchmark", "--force")
                seconds[assignment] = round(time.perf_counter() - start, 1)
                print(f"{assignment:30} {seconds[assignment]:6.1f} s", flush=True)
        else:  # what `course.py grade` does: one nbgrader process for the whole submission
            start = time.perf_counter()
            run("autograde", "*", "--student=benchmark", "--force")
            seconds["all"] = round(time.perf_counter() - start, 1)

        sys.path.insert(0, str(HERE))
        from paged_grading.report import autograded_scores

        rows = autograded_scores(f"sqlite:///{root / 'gradebook.db'}")
        score = sum(r.score for r in rows)
        maximum = sum(r.max_score for r in rows)

    total_s = round(sum(seconds.values()), 1)
    summary = {
        "assignments": len(assignments),
        "seconds": seconds,
        "load_average_1min": round(os.getloadavg()[0], 2),
        "total_s": total_s,
        "target_s": TARGET_S,
        "autograded_score": f"{score:g}/{maximum:g}",
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(summary, indent=1))
    return 0 if total_s < TARGET_S and score == maximum else 1


if __name__ == "__main__":
    raise SystemExit(main())
