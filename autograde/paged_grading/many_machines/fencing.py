"""Which worker's result counts: the coordinator's judgement of one result row, as data.

A result counts only if its MAC verifies with the worker key, it names the job it was sent for, that
job is its student's current try, the student is not graded yet in this run, and it graded the very
bytes that were sent. A failed or incomplete grading (before the last try) fails the try instead, so
the next one is deferred. ``judge`` decides and changes nothing: the coordinator applies the
judgement (``Judgement.failed`` to the roster, ``Judgement.outcome`` to the course, ``warning`` to the
instructor) and stores ``verdict`` beside the row.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import result, signing
from .roster import Student, Try


@dataclass(frozen=True)
class Judgement:
    verdict: str  # stored with the result row: "accepted", "failed try", or "refused: why"
    outcome: result.Result | None = None  # the result to apply: set only when it counts
    failed: str = ""  # the try failed for this reason (the next one is deferred)
    warning: str = ""  # a line for the instructor


def judge(row: dict, attempt: Try, student: Student, *, key: bytes, max_tries: int) -> Judgement:
    """The judgement of ``row`` (job_key, job_id, worker, result, mac), sent for ``attempt`` of ``student``."""
    blob, worker = bytes(row["result"]), row["worker"]
    on = f"try {attempt.number} on {worker}"
    if row["job_id"] != attempt.job_id or not signing.verify(
        key, row["mac"], row["job_key"].encode(), str(row["job_id"]).encode(), blob
    ):
        return Judgement(
            "refused: not signed with the worker key for this job",
            warning=f"REFUSED a result for {student.name} claiming to come from {worker!r}: it is not signed with "
            "the worker key for its job (a result not from one of the course's workers); look at who can write "
            "the queue's database",
        )
    try:
        outcome = result.decode(blob)
    except (ValueError, KeyError, TypeError) as error:
        return Judgement(f"refused: unreadable ({error})", failed=f"{on}: an unreadable result ({error})")
    if outcome.student != student.name or outcome.job_key != attempt.job_key:
        return Judgement("refused: a result for another job")
    if student.done:
        return Judgement(
            f"refused: {student.name} was already graded in this run",
            warning=f"late result for {student.name} from {worker} (try {attempt.number}) refused: {student.name} "
            "was already graded in this run by a newer try; a result counts once",
        )
    if student.current is not attempt:
        newer = student.current.number if student.current else len(student.tries)
        return Judgement(
            f"refused: superseded by try {newer}",
            warning=f"late result for {student.name} from {worker} (try {attempt.number}) refused: try {newer} "
            "replaced it when that worker stopped answering; only the current try's result counts",
        )
    if outcome.status == result.FAILED:
        return Judgement("failed try", failed=f"{on}: {outcome.reason}")
    changed = [a for a in outcome.graded if outcome.digests.get(a) != attempt.digests.get(a)]
    if changed:
        return Judgement("refused: graded other bytes than were sent", failed=f"{on}: graded other bytes of {changed}")
    if outcome.status == result.INCOMPLETE and attempt.number < max_tries:
        return Judgement("incomplete try", failed=f"{on}: {outcome.reason}")
    return Judgement("accepted", outcome=outcome)
