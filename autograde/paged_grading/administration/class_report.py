"""The class report, read from nbgrader's gradebook (its Gradebook API, never the SQL).

Files written into ``reports/``:
  grades.csv           nbgrader's own ``nbgrader export`` (one row per student and assignment;
                       written by course.py), plus a ``status`` column: "graded", "not submitted",
                       or NOT_GRADED for a submission nbgrader gave up on (never a silent 0)
  checks.csv           one row per student and autograded test cell: score, max, passed
  pass_rates.csv       per test cell ("check"): submissions, passed, pass rate
  score_histogram.png  each student's autograded total, as a percentage of the maximum
Manually graded answer cells (markdown) are left to nbgrader's formgrader and not counted here.

The pass-rate table for the terminal is ``pass_rate_lines``: each line says what it counts
(submissions of that test cell that got full points, out of its assignment's graded
submissions). The integrity findings are summed up by kind by ``integrity.summary``.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry


@dataclass(frozen=True)
class CheckScore:
    student: str
    assignment: str
    check: str  # the test cell's grade_id
    score: float
    max_score: float

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


def autograded_scores(db_url: str) -> list[CheckScore]:
    rows = []
    with Gradebook(db_url) as gradebook:
        students = [s.id for s in gradebook.students]
        for assignment in gradebook.assignments:
            for student in students:
                try:
                    submission = gradebook.find_submission(assignment.name, student)
                except MissingEntry:
                    continue
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        if grade.cell.cell_type != "code":
                            continue
                        rows.append(
                            CheckScore(
                                student,
                                assignment.name,
                                grade.name,
                                float(grade.score),
                                float(grade.max_score),
                            )
                        )
    return rows


def pass_rates(rows: list[CheckScore]) -> list[dict]:
    by_check: dict[tuple[str, str], list[CheckScore]] = defaultdict(list)
    for row in rows:
        by_check[(row.assignment, row.check)].append(row)
    table = []
    for (assignment, check), scores in sorted(by_check.items()):
        passed = sum(s.passed for s in scores)
        table.append(
            {
                "assignment": assignment,
                "check": check,
                "max_score": scores[0].max_score,
                "submissions": len(scores),
                "passed": passed,
                "pass_rate": round(passed / len(scores), 3),
            }
        )
    return table


def pass_rate_lines(rates: list[dict]) -> list[str]:
    """The pass-rate table as printed: a header saying what is counted, then one line per test cell.

    ``rates`` as ``pass_rates`` makes them. A cell counts as passed only with its full points.
    """
    if not rates:
        return ["pass rates: no autograded test cell in the gradebook yet"]
    lines = [f"{'assignment':28} {'test cell':36} pass rate (submissions with full points / graded submissions)"]
    for row in rates:
        lines.append(
            f"{row['assignment']:28} {row['check']:36} {row['passed']} of {row['submissions']} passed "
            f"({100 * row['pass_rate']:.0f}%)"
        )
    return lines


def student_totals(rows: list[CheckScore]) -> dict[str, tuple[float, float]]:
    """student -> (autograded score, autograded maximum over the assignments they submitted)."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        totals[row.student][0] += row.score
        totals[row.student][1] += row.max_score
    return {student: (score, maximum) for student, (score, maximum) in totals.items()}


def _write_csv(path: Path, records: list[dict]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        if not records:
            return
        writer = csv.DictWriter(handle, fieldnames=list(records[0]))
        writer.writeheader()
        writer.writerows(records)


def plot_histogram(totals: dict[str, tuple[float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    percents = [100 * score / maximum for score, maximum in totals.values() if maximum]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=120)
    ax.hist(percents, bins=list(range(0, 101, 10)), color="#0072B2", edgecolor="white")
    ax.set_xlabel("autograded score (% of the points of the submitted notebooks)")
    ax.set_ylabel("students")
    ax.set_title(f"Class scores ({len(percents)} students)")
    ax.set_xlim(0, 100)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


NOT_GRADED = "NOT GRADED: nbgrader could not grade this submission (reports/ungraded.csv)"
NOT_SUBMITTED = "not submitted"
GRADED = "graded"


def add_status(grades_csv: Path, status: dict[tuple[str, str], str]) -> None:
    """Add a ``status`` column to nbgrader's export, so a failed submission never reads as a plain 0.

    ``status`` maps (student, assignment) to GRADED or NOT_GRADED; rows it does not name were
    not submitted.
    """
    with open(grades_csv, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["status"] = status.get((row["student_id"], row["assignment"]), NOT_SUBMITTED)
    _write_csv(grades_csv, rows)


def write_report(db_url: str, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = autograded_scores(db_url)
    paths = {
        "checks": out_dir / "checks.csv",
        "pass_rates": out_dir / "pass_rates.csv",
        "histogram": out_dir / "score_histogram.png",
    }
    _write_csv(paths["checks"], [{**row.__dict__, "passed": row.passed} for row in rows])
    _write_csv(paths["pass_rates"], pass_rates(rows))
    plot_histogram(student_totals(rows), paths["histogram"])
    return paths
