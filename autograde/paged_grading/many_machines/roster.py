"""The coordinator's account of the class: each student's tries, which one is current, and why any failed.

Invariants (the coordinator alone changes a roster, in one thread):
  * a student has at most one current try, the last one deferred; only its result can count;
  * a try that failed (``try_failed``) is never current again, and its reason is kept for the report;
  * a student is ``done`` once graded or given up on, and then never gets another try in this run;
  * a student NOT GRADED (all or some notebooks) leaves no autograded notebook or feedback for those
    notebooks and a gradebook row with no new score (``not_graded``), never a silent 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import gradebook_rows, result
from .grading_status import NOT_GRADED, QUEUED, Board


@dataclass
class Try:
    """One job sent for one student: its key and procrastinate id, and the digests of the bytes it carried."""

    student: str
    number: int
    job_key: str
    job_id: int
    digests: dict[str, str]
    started_by: str = ""
    ended_seen: int = 0  # checks in a row that found its job ended without a result


@dataclass
class Student:
    name: str
    assignments: list[str]
    current: Try | None = None
    tries: list[Try] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why each failed try failed, in order
    done: bool = False
    needs_try: bool = True
    not_graded: dict[str, str] = field(default_factory=dict)  # assignment -> why


@dataclass
class Gradebook:
    """Where a NOT GRADED submission is recorded: the course folder and its gradebook database."""

    root: Path
    db_url: str
    course_id: str


class Roster:
    def __init__(self, students: dict[str, list[str]], board: Board, max_tries: int, gradebook: Gradebook) -> None:
        self.students = {name: Student(name, assignments) for name, assignments in students.items()}
        self.by_key: dict[str, Try] = {}
        self.by_job: dict[int, Try] = {}
        self.board, self.max_tries, self.gradebook = board, max_tries, gradebook

    def all_done(self) -> bool:
        return all(s.done for s in self.students.values())

    def waiting(self) -> int:
        """Current tries no worker has started yet."""
        return sum(1 for s in self.students.values() if s.current and not s.current.started_by and not s.done)

    def add_try(self, student: Student, job_key: str, job_id: int, digests: dict[str, str]) -> Try:
        assert not student.done and student.current is None, f"{student.name} already has a current try or is done"
        attempt = Try(student.name, len(student.tries) + 1, job_key, job_id, digests)
        student.tries.append(attempt)
        student.current, student.needs_try = attempt, False
        self.by_key[job_key], self.by_job[job_id] = attempt, attempt
        self.board.set(student.name, state=QUEUED, tries=attempt.number, worker="")
        return attempt

    def try_failed(self, student: Student, attempt: Try, reason: str) -> None:
        """This try will never count; the next one is deferred (or the student given up on). A try that is
        no longer current (superseded, or its student graded) changes nothing: the current one stands."""
        if student.done or student.current is not attempt:
            return
        student.reasons.append(reason)
        student.current, student.needs_try = None, True
        self.board.failed_tries += 1
        self.board.set(student.name, state=QUEUED, reason="; ".join(student.reasons))
        self.board.say(f"{student.name}: {reason}" + ("" if len(student.tries) >= self.max_tries else "; trying again"))

    def give_up(self, student: Student) -> None:
        student.done, student.needs_try = True, False
        tries = f"not graded on {len(student.tries)} tries: " if student.tries else ""
        reason = tries + "; ".join(student.reasons)
        self.not_graded(student, {a: reason for a in student.assignments})
        self.board.set(student.name, state=NOT_GRADED, reason=reason)

    def not_graded(self, student: Student, reasons: dict[str, str]) -> None:
        """What course.py grade leaves for a submission nbgrader gave up on: no autograded notebook or
        feedback (an older one removed, as ``autograde --force`` does), and the submission in the
        gradebook with no new score, so that the report lists it NOT GRADED, never a silent 0 or gap."""
        student.not_graded = reasons
        book = self.gradebook
        for assignment in reasons:
            for top in result.TOPS:
                result.remove(book.root / top / student.name / assignment)
            submitted = book.root / "submitted" / student.name / assignment
            gradebook_rows.record_not_graded(book.db_url, book.course_id, student.name, assignment, submitted)

    def not_graded_reasons(self) -> dict[tuple[str, str], str]:
        """(student, assignment) -> why it is NOT GRADED."""
        return {(s.name, a): reason for s in self.students.values() for a, reason in s.not_graded.items()}
