"""What the instructor sees: a tqdm bar while grading, and ``reports/grading-status.csv`` for ``course.py status``.

The bar counts students (done or NOT GRADED, of all), and says how many are queued (no worker has
started their current try), running (a worker has), done, NOT GRADED, and how many tries failed
so far (lost workers, refused results, infrastructure errors: each one retried, never scored); tqdm
estimates the time left from the rate so far. The status file has one row per student, written by
the coordinator alone whenever a row changes (a whole new file each time, renamed into place, so a
reader never sees half of one): ``course.py status`` prints it, during grading or after.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import sys
from collections import Counter
from pathlib import Path

STATUS_CSV = Path("reports") / "grading-status.csv"
FIELDS = ["student", "state", "tries", "worker", "seconds", "reason", "updated"]
QUEUED, RUNNING, DONE, NOT_GRADED = "queued", "running", "graded", "NOT GRADED"


RUN_SUMMARY = Path("reports") / "workers-run.json"


class Board:
    """One row per student, the bar, and the status file: the coordinator's view of the class."""

    def __init__(self, root: Path, students: list[str], show_bar: bool = True) -> None:
        self.path = root / STATUS_CSV
        now = _now()
        self.rows = {s: {"student": s, "state": QUEUED, "tries": 0, "worker": "", "seconds": "", "reason": "",
                         "updated": now} for s in students}  # fmt: skip
        self.failed_tries = 0
        self.dirty = True
        self.postfix = ""
        self.bar = None
        if show_bar:
            from tqdm import tqdm

            self.bar = tqdm(
                total=len(students), unit="student", desc="grading", file=sys.stderr, dynamic_ncols=True, mininterval=1
            )
        self.flush()

    def set(self, student: str, **fields) -> None:
        row = self.rows[student]
        before = row["state"]
        row.update(fields, updated=_now())
        self.dirty = True
        if self.bar is not None and before not in (DONE, NOT_GRADED) and row["state"] in (DONE, NOT_GRADED):
            self.bar.update(1)

    def say(self, line: str) -> None:
        """A line for the instructor, above the bar."""
        if self.bar is not None:
            self.bar.write(line, file=sys.stdout)
        else:
            print(line, flush=True)

    def counts(self) -> Counter:
        return Counter(row["state"] for row in self.rows.values())

    def flush(self) -> None:
        if self.bar is not None:
            counts = self.counts()
            postfix = (
                f"queued {counts[QUEUED]}, running {counts[RUNNING]}, done {counts[DONE]}, "
                f"NOT GRADED {counts[NOT_GRADED]}, failed tries {self.failed_tries}"
            )
            if postfix != self.postfix:
                self.bar.set_postfix_str(postfix, refresh=False)
                self.postfix = postfix
            self.bar.refresh()  # the elapsed time and the estimate move on
        if not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        with open(partial, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, FIELDS)
            writer.writeheader()
            writer.writerows(self.rows[s] for s in sorted(self.rows))
        os.replace(partial, self.path)
        self.dirty = False

    def close(self) -> None:
        self.flush()
        if self.bar is not None:
            self.bar.close()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def status_lines(root: Path) -> list[str]:
    """``course.py status``: the last grading on workers, per student, and the counts."""
    path = root / STATUS_CSV
    if not path.is_file():
        return [f"no grading on workers recorded in {root} ({STATUS_CSV} is written by `course.py grade --queue ...`)"]
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    width = max([len("student"), *(len(r["student"]) for r in rows)])
    lines = [f"{'student':{width}}  {'state':10}  tries  {'worker':16}  seconds  reason"]
    for row in rows:
        lines.append(
            f"{row['student']:{width}}  {row['state']:10}  {row['tries']:>5}  {row['worker'][:16]:16}  "
            f"{row['seconds']:>7}  {row['reason']}"
        )
    counts = Counter(row["state"] for row in rows)
    lines.append(", ".join(f"{n} {state}" for state, n in sorted(counts.items())) + f" (from {path})")
    return lines


def write_run_summary(root: Path, board: Board, tries: int, timing: dict, seconds: float) -> None:
    """``reports/workers-run.json`` (who graded how many, tries, the coordinator's time per job) and one line."""
    workers: dict[str, int] = {}
    for row in board.rows.values():
        if row["state"] == DONE and row["worker"]:
            workers[row["worker"]] = workers.get(row["worker"], 0) + 1
    sent, accepted = max(1, timing["sent"]), max(1, timing["accepted"])
    summary = {
        "students": len(board.rows),
        "graded": sum(1 for r in board.rows.values() if r["state"] == DONE),
        "not_graded": sum(1 for r in board.rows.values() if r["state"] == NOT_GRADED),
        "tries": tries,
        "failed_tries": board.failed_tries,
        "seconds": round(seconds, 1),
        "coordinator_s_per_job": {
            "send": round(timing["send_s"] / sent, 4),
            "accept": round(timing["accept_s"] / accepted, 4),
        },
        "graded_by": workers,
    }
    path = root / RUN_SUMMARY
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(summary, indent=1) + "\n")
    per_job = summary["coordinator_s_per_job"]
    print(
        f"on workers: {summary['graded']} of {summary['students']} student(s) graded in {seconds:.1f} s, "
        f"{summary['tries']} tries ({summary['failed_tries']} failed and retried); by worker: "
        + (", ".join(f"{w} {n}" for w, n in sorted(workers.items())) or "none")
        + f"; the coordinator spent {per_job['send']:.3f} s sending and {per_job['accept']:.3f} s accepting "
        "per job",
        flush=True,
    )
