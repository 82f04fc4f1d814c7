"""One try's result: what a worker sends back, bounded, and what the coordinator writes from it.

A worker sends (``collect``): which assignments nbgrader graded, the digest of each submitted
notebook it graded, the files of ``autograded/<student>/<assignment>/`` and
``feedback/<student>/<assignment>/`` (the graded notebook, the feedback page, the copies nbgrader
makes), the gradebook rows of the student (``gradebook_rows``), the lines the grader added to its
``reports/`` logs (integrity findings, hidden draws, recovered metadata) and to the student's
grading-time ledger, and the log of the grading. At most ``MAX_FILE_BYTES`` per file and
``MAX_RESULT_BYTES`` in all (the feedback page is already capped at 8 MiB by ``course.py
feedback``): a result over them fails the try with that reason, never a truncated grade.

``status``: ``graded`` (every assignment of the job has a graded notebook), ``incomplete`` (nbgrader
gave up on some: retried like an infrastructure failure, since a worker cannot tell the two apart;
the last try's partial result is kept and the rest listed NOT GRADED), ``failed`` (no grading: the
reason says why; retried, never scored).

The coordinator alone writes from a result (``apply``), after it checked the MAC and the try
(``coordinator``): it replaces the student's ``autograded/`` and ``feedback/`` folders of the graded
assignments (removed first, links never followed, every name checked), writes the gradebook rows,
appends the report lines, and keeps the log in ``reports/grading-logs/<student>.log``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..preprocessors.execute import TIME_LEDGER
from . import gradebook_rows
from .submission_job import TooLarge, bounded_json, safe_relative, submission_digest_of

FORMAT = 1
MAX_FILE_BYTES = 16 * 2**20
MAX_RESULT_BYTES = 64 * 2**20
MAX_LOG_CHARS = 200_000
TOPS = ("autograded", "feedback")
REPORT_LOGS = ("integrity.log", "hidden_draws.log", "recovered_metadata.log")
GRADED, INCOMPLETE, FAILED = "graded", "incomplete", "failed"


@dataclass
class Result:
    job_key: str
    student: str
    worker: str
    status: str
    reason: str = ""
    graded: list[str] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)  # assignment -> submitted notebook's SHA-256, as graded
    files: dict[str, tuple[int, bytes]] = field(default_factory=dict)  # "autograded/<a>/<name>" -> (mode, bytes)
    rows: list[dict] = field(default_factory=list)
    reports: dict[str, str] = field(default_factory=dict)  # log name -> lines this grading added
    ledger: dict[str, str] = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0
    format: int = FORMAT


def failed(job_key: str, student: str, worker: str, reason: str, log: str = "", seconds: float = 0.0) -> Result:
    return Result(job_key, student, worker, FAILED, reason=reason, log=log[-MAX_LOG_CHARS:], seconds=seconds)


def collect(root: Path, payload, worker: str, log: str, seconds: float) -> Result:
    """The result of grading ``payload`` in a worker's ``root`` (its own SQLite gradebook)."""
    student = payload.student
    graded = [a for a in payload.assignments if (root / "autograded" / student / a / f"{a}.ipynb").is_file()]
    files: dict[str, tuple[int, bytes]] = {}
    total = 0
    for top in TOPS:
        for assignment in graded:
            folder = root / top / student / assignment
            for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
                if path.is_symlink() or not path.is_file():
                    continue  # course.py feedback removed any; never followed
                size = path.stat().st_size
                total += size
                if size > MAX_FILE_BYTES or total > MAX_RESULT_BYTES:
                    raise TooLarge(
                        f"{top}/{student}/{assignment}/{path.name} makes the result over its limit "
                        f"({MAX_FILE_BYTES // 2**20} MiB per file, {MAX_RESULT_BYTES // 2**20} MiB in all)"
                    )
                files[f"{top}/{assignment}/{path.relative_to(folder).as_posix()}"] = (
                    path.stat().st_mode & 0o777,
                    path.read_bytes(),
                )
    reports = {}
    for name in REPORT_LOGS:
        path = root / "reports" / name
        if path.is_file():
            reports[name] = path.read_text(encoding="utf-8", errors="replace")[-MAX_LOG_CHARS:]
    ledger_folder = root / TIME_LEDGER / student
    ledger = (
        {p.name: p.read_text() for p in sorted(ledger_folder.glob("*")) if p.is_file()}
        if ledger_folder.is_dir()
        else {}
    )
    missing = [a for a in payload.assignments if a not in graded]
    status = GRADED if not missing else INCOMPLETE
    reason = f"nbgrader could not grade {', '.join(missing)} (see the log)" if missing else ""
    return Result(
        job_key=payload.job_key, student=student, worker=worker, status=status, reason=reason, graded=graded,
        digests={a: submission_digest_of(payload.files[a].get(f"{a}.ipynb")) for a in graded},
        files=files, rows=gradebook_rows.export(f"sqlite:///{root / 'gradebook.db'}", student, graded),
        reports=reports, ledger=ledger, log=log[-MAX_LOG_CHARS:], seconds=round(seconds, 1),
    )  # fmt: skip


def encode(result: Result) -> bytes:
    data = asdict(result)
    data["files"] = {n: [mode, base64.b64encode(b).decode()] for n, (mode, b) in result.files.items()}
    return zlib.compress(json.dumps(data, sort_keys=True).encode(), 6)


def decode(blob: bytes) -> Result:
    """A result from its bytes (call only after its MAC is verified); every name is checked."""
    data = bounded_json(blob, 2 * MAX_RESULT_BYTES, "result", FORMAT, "this coordinator")
    files = {}
    for name, (mode, encoded) in data["files"].items():
        path = safe_relative(name)
        if path.parts[0] not in TOPS or path.parts[1] not in data["graded"] or len(path.parts) < 3:
            raise ValueError(f"refused file {name!r} in a result")
        files[name] = (int(mode) & 0o777, base64.b64decode(encoded))
    data["files"] = files
    for name in [*data["graded"], *data["ledger"]]:
        if len(safe_relative(name).parts) != 1:
            raise ValueError(f"refused name {name!r} in a result")
    if set(data["reports"]) - set(REPORT_LOGS):
        raise ValueError(f"refused report logs {sorted(set(data['reports']) - set(REPORT_LOGS))}")
    return Result(**data)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """A new file (never through a link: the folder was just made, and O_EXCL | O_NOFOLLOW say so)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode or 0o644)


def remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def apply(root: Path, result: Result, *, db_url: str, course_id: str, header: str) -> None:
    """Write one accepted result into the course root and its gradebook (the coordinator's job)."""
    student = result.student
    for top in TOPS:
        for assignment in result.graded:
            remove(root / top / student / assignment)
    for name, (mode, data) in result.files.items():
        top, assignment, *rest = safe_relative(name).parts
        _write_new(root / top / student / assignment / Path(*rest), data, mode)
    gradebook_rows.apply(db_url, course_id, student, result.rows)
    reports = root / "reports"
    reports.mkdir(exist_ok=True)
    for name, text in result.reports.items():
        with open(reports / name, "a", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") or not text else text + "\n")
    ledger = root / TIME_LEDGER / student
    for assignment, text in result.ledger.items():
        ledger.mkdir(parents=True, exist_ok=True)
        (ledger / assignment).write_text(text)
    write_log(root, student, header, result.log)


def write_log(root: Path, student: str, header: str, log: str) -> None:
    logs = root / "reports" / "grading-logs"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{student}.log").write_text(f"{header}\n{log}", encoding="utf-8")
