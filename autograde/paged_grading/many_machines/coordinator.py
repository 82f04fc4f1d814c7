"""``course.py grade --queue URL``: send one job per student to the workers, and keep every grade.

The coordinator is the only writer of the course: the gradebook, ``autograded/``, ``feedback/`` and
``reports/`` (and, in the queue's database, the payloads, the course bundle and the verdicts on
results). Workers only ever send results; the coordinator decides which one counts.

Tries and fencing. Each try of a student is a new procrastinate job with a key of its own; the
student's current try is the only one whose result can count. A try ends, and the next one is
deferred (ahead of first tries: priority 1), when
  * its worker stops answering: procrastinate's ``get_stalled_jobs`` lists jobs whose worker has
    sent no heartbeat for ``lease`` seconds (kill -9, a paused or cut-off machine). The job is then
    marked failed in procrastinate, so that worker can never mark it done;
  * its job ends without a result (the worker refused or crashed on it), seen twice in a row;
  * its worker reports a failure (no sandbox, other code, a timeout, a result over its limit) or an
    incomplete grading (nbgrader gave up on a notebook: retried, since a worker cannot tell a bad
    notebook from a bad machine).
A result is accepted only if its MAC verifies with the worker key, it names the job it was sent for,
that job is its student's current try, the student is not graded yet in this run, and it graded
the very bytes that were sent. Everything else is refused and its ``verdict`` says why, so a worker
that comes back after a pause can never overwrite the newer try's grade, and no student is counted
twice. No try that failed for the infrastructure's reasons is ever scored: after ``tries`` tries the
student's notebooks are listed NOT GRADED, with each try's reason (``reports/ungraded.csv``,
``reports/grading-status.csv``), as ``course.py grade`` lists what nbgrader gave up on.

The database may go away (a restart, a failover): every job, payload and result is a row in it,
so nothing is lost; the coordinator waits, and judges no worker stalled until ``lease`` seconds
after it can see the database again (the workers' heartbeats could not reach it either).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import course_bundle, gradebook_rows, queue_db, result, signing, submission_job
from .fingerprint import course_fingerprint
from .grading_status import DONE, NOT_GRADED, QUEUED, RUNNING, Board

RUN_SUMMARY = Path("reports") / "workers-run.json"
QUEUED_AHEAD = 100  # first tries waiting in the queue at most (retries always go in, ahead of them)


@dataclass
class Try:
    student: str
    number: int
    job_key: str
    job_id: int
    digests: dict[str, str]
    started_by: str = ""
    ended_seen: int = 0


@dataclass
class Student:
    name: str
    assignments: list[str]
    current: Try | None = None
    tries: list[Try] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    done: bool = False
    needs_try: bool = True
    not_graded: dict[str, str] = field(default_factory=dict)


class Coordinator:
    def __init__(
        self, root: Path, queue_url: str, students: dict[str, list[str]], *, course_id: str, db_url: str,
        config: Path, lease: float, tries: int, poll: float = 1.0, show_bar: bool = True,
    ) -> None:  # fmt: skip
        self.root, self.course_id, self.db_url = root, course_id, db_url
        self.lease, self.max_tries, self.poll = lease, tries, poll
        self.queue = queue_db.queue_name(course_id)
        self.app = queue_db.make_app(queue_url)
        self.key = signing.read_key(signing.course_key_file(root))
        self.fingerprint = course_fingerprint(config)
        self.run_id = uuid.uuid4().hex
        self.students = {name: Student(name, assignments) for name, assignments in students.items()}
        self.by_key: dict[str, Try] = {}
        self.by_job: dict[int, Try] = {}
        self.board = Board(root, sorted(students), show_bar=show_bar)
        self.db_ok_since: float | None = time.monotonic() - lease
        self.last_event = 0
        self.timing = {"send_s": 0.0, "sent": 0, "accept_s": 0.0, "accepted": 0}
        self.bundle = ""

    # --- the run -----------------------------------------------------------------------------------
    def run(self) -> dict[tuple[str, str], str]:
        """Grade every student on the workers; returns (student, assignment) -> why it is NOT GRADED."""
        start = time.monotonic()
        try:
            asyncio.run(self._run())
        except KeyboardInterrupt:
            left = sum(not s.done for s in self.students.values())
            raise SystemExit(
                f"stopped: {left} student(s) not graded yet; the grades already written stay. To grade the others, "
                "run `course.py grade --queue ...` again (it first cancels this run's jobs; --student S for one)"
            ) from None
        finally:
            self.board.close()
        self._summary(time.monotonic() - start)
        return {
            (s.name, assignment): reason for s in self.students.values() for assignment, reason in s.not_graded.items()
        }

    def _database_away(self, error: BaseException | None = None) -> None:
        if self.db_ok_since is not None:
            what = f" ({type(error).__name__})" if error is not None else ""
            self.board.say(
                f"the queue's database is unreachable{what}: waiting for it. Nothing is lost: every job and "
                "result is a row in it, and workers keep their results until it is back"
            )
        self.db_ok_since = None  # no worker is judged by its heartbeats until a lease after it is back

    async def _run(self) -> None:
        queue_db.watch_outages(self._database_away)
        async with self.app.open_async():
            await queue_db.prepare(self.app)
            await self._publish_course()
            await self._end_earlier_runs()
            while not all(s.done for s in self.students.values()):
                try:
                    await self._defer_needed()
                    await self._judge_results()
                    await self._note_starts()
                    if self.db_ok_since is None:
                        self.board.say("the queue's database answers again: grading goes on")
                        self.db_ok_since = time.monotonic()
                    if time.monotonic() - self.db_ok_since >= self.lease:
                        await self._find_lost_tries()
                except Exception as error:
                    if not queue_db.is_unreachable(error):
                        raise
                    self._database_away(error)
                self.board.flush()
                await asyncio.sleep(self.poll)
            await self._clean_up()

    async def _publish_course(self) -> None:
        released = sorted(p.name for p in (self.root / "source").iterdir() if p.is_dir())
        self.bundle, data = course_bundle.pack(self.root, released)
        await self.app.connector.execute_query_async(
            "INSERT INTO paged_grading_bundles (digest, bundle) VALUES (%(d)s, %(b)s) ON CONFLICT (digest) DO NOTHING",
            d=self.bundle,
            b=data,
        )

    async def _end_earlier_runs(self) -> None:
        """Jobs of this course left queued or running by an earlier coordinator that stopped: cancelled
        (queued) or aborted (running); their results are never this run's."""
        manager = self.app.job_manager
        for status, abort in (("todo", False), ("doing", True)):
            for job in await manager.list_jobs_async(queue=self.queue, status=status):
                try:
                    await manager.cancel_job_by_id_async(job.id, abort=abort, delete_job=not abort)
                except Exception as error:  # noqa: BLE001 - it ended meanwhile
                    if queue_db.is_unreachable(error):
                        raise
                await self.app.connector.execute_query_async(
                    "DELETE FROM paged_grading_payloads WHERE job_key = %(k)s", k=str(job.task_kwargs.get("job_key"))
                )

    # --- sending -----------------------------------------------------------------------------------
    async def _defer_needed(self) -> None:
        """Retries first, then first tries while fewer than ``QUEUED_AHEAD`` jobs wait untaken: the queue
        holds the next jobs, not the class (a class of thousands is not thousands of payloads at once)."""
        waiting = sum(1 for s in self.students.values() if s.current and not s.current.started_by and not s.done)
        for student in sorted(self.students.values(), key=lambda s: not s.tries):
            if student.done or not student.needs_try:
                continue
            if len(student.tries) >= self.max_tries:
                self._give_up(student)
                continue
            if not student.tries and waiting >= QUEUED_AHEAD:
                continue
            waiting += 1
            began = time.perf_counter()
            number, job_key = len(student.tries) + 1, uuid.uuid4().hex
            try:
                payload = submission_job.build(
                    self.root, run_id=self.run_id, job_key=job_key, course_id=self.course_id, student=student.name,
                    assignments=student.assignments, bundle=self.bundle, fingerprint=self.fingerprint, try_no=number,
                )  # fmt: skip
            except submission_job.TooLarge as error:
                student.reasons.append(str(error))
                self._give_up(student)
                continue
            blob = submission_job.encode(payload)
            await self.app.connector.execute_query_async(
                "INSERT INTO paged_grading_payloads (job_key, run_id, payload, mac) "
                "VALUES (%(k)s, %(r)s, %(p)s, %(m)s)",
                k=job_key, r=self.run_id, p=blob, m=signing.sign(self.key, job_key.encode(), blob),
            )  # fmt: skip
            job_id = await self.app.configure_task(
                queue_db.TASK, queue=self.queue, priority=1 if number > 1 else 0
            ).defer_async(job_key=job_key)
            attempt = Try(student.name, number, job_key, job_id, payload.digests())
            student.tries.append(attempt)
            student.current, student.needs_try = attempt, False
            self.by_key[job_key], self.by_job[job_id] = attempt, attempt
            self.board.set(student.name, state=QUEUED, tries=number, worker="")
            self.timing["send_s"] += time.perf_counter() - began
            self.timing["sent"] += 1

    # --- receiving ---------------------------------------------------------------------------------
    async def _judge_results(self) -> None:
        """Every result not judged yet, oldest first: each accepted or refused, with the reason stored."""
        pending = await self.app.connector.execute_query_all_async(
            "SELECT id FROM paged_grading_results WHERE verdict IS NULL AND job_key = ANY(%(keys)s) ORDER BY id",
            keys=list(self.by_key),
        )
        for row in pending:
            full = await self.app.connector.execute_query_one_async(
                "SELECT job_key, job_id, worker, result, mac FROM paged_grading_results WHERE id = %(id)s", id=row["id"]
            )
            verdict = self._judge(full)
            await self.app.connector.execute_query_async(
                "UPDATE paged_grading_results SET verdict = %(v)s WHERE id = %(id)s", v=verdict, id=row["id"]
            )

    def _judge(self, row: dict) -> str:
        attempt = self.by_key[row["job_key"]]
        student = self.students[attempt.student]
        blob, worker = bytes(row["result"]), row["worker"]
        if row["job_id"] != attempt.job_id or not signing.verify(
            self.key, row["mac"], row["job_key"].encode(), str(row["job_id"]).encode(), blob
        ):
            self.board.say(
                f"REFUSED a result for {student.name} claiming to come from {worker!r}: it is not signed with the "
                "worker key for its job (a result not from one of the course's workers); look at who can write the "
                "queue's database"
            )
            return "refused: not signed with the worker key for this job"
        try:
            outcome = result.decode(blob)
        except (ValueError, KeyError, TypeError) as error:
            self._try_failed(student, attempt, f"try {attempt.number} on {worker}: an unreadable result ({error})")
            return f"refused: unreadable ({error})"
        if outcome.student != student.name or outcome.job_key != attempt.job_key:
            return "refused: a result for another job"
        if student.done:
            self.board.say(
                f"late result for {student.name} from {worker} (try {attempt.number}) refused: {student.name} was "
                "already graded in this run by a newer try; a result counts once"
            )
            return f"refused: {student.name} was already graded in this run"
        if student.current is not attempt:
            newer = student.current.number if student.current else len(student.tries)
            self.board.say(
                f"late result for {student.name} from {worker} (try {attempt.number}) refused: try {newer} replaced "
                "it when that worker stopped answering; only the current try's result counts"
            )
            return f"refused: superseded by try {newer}"
        if outcome.status == result.FAILED:
            self._try_failed(student, attempt, f"try {attempt.number} on {worker}: {outcome.reason}")
            return "failed try"
        changed = [a for a in outcome.graded if outcome.digests.get(a) != attempt.digests.get(a)]
        if changed:
            self._try_failed(student, attempt, f"try {attempt.number} on {worker}: graded other bytes of {changed}")
            return "refused: graded other bytes than were sent"
        if outcome.status == result.INCOMPLETE and attempt.number < self.max_tries:
            self._try_failed(student, attempt, f"try {attempt.number} on {worker}: {outcome.reason}")
            return "incomplete try"
        began = time.perf_counter()
        done = "graded" if outcome.status == result.GRADED else "NOT GRADED (all or part) after the last try"
        header = (
            f"{done} on worker {worker} (try {attempt.number} of at most {self.max_tries}, {outcome.seconds:.1f} s)"
        )
        if student.reasons:
            header += "; earlier tries: " + "; ".join(student.reasons)
        result.apply(self.root, outcome, db_url=self.db_url, course_id=self.course_id, header=header)
        self.timing["accept_s"] += time.perf_counter() - began
        self.timing["accepted"] += 1
        student.done = True
        missing = [a for a in student.assignments if a not in outcome.graded]
        reason = f"nbgrader could not grade it on {self.max_tries} tries; the last: {outcome.reason}"
        self._not_graded(student, {a: reason for a in missing})
        self.board.set(
            student.name, state=DONE if not missing else NOT_GRADED, worker=worker, seconds=outcome.seconds,
            reason="; ".join(student.reasons + ([f"NOT GRADED {', '.join(missing)}: {reason}"] if missing else [])),
        )  # fmt: skip
        return "accepted"

    async def _note_starts(self) -> None:
        rows = await self.app.connector.execute_query_all_async(
            "SELECT id, job_key, worker FROM paged_grading_events WHERE id > %(last)s AND job_key = ANY(%(keys)s) "
            "ORDER BY id",
            last=self.last_event, keys=list(self.by_key),
        )  # fmt: skip
        for row in rows:
            self.last_event = max(self.last_event, row["id"])
            attempt = self.by_key[row["job_key"]]
            attempt.started_by = row["worker"]
            student = self.students[attempt.student]
            if student.current is attempt and not student.done:
                self.board.set(student.name, state=RUNNING, worker=row["worker"])

    # --- lost tries --------------------------------------------------------------------------------
    async def _find_lost_tries(self) -> None:
        from procrastinate.jobs import Status

        manager = self.app.job_manager
        stalled = await manager.get_stalled_jobs(
            queue=self.queue, task_name=queue_db.TASK, seconds_since_heartbeat=self.lease
        )
        for job in stalled:
            try:  # fenced: that worker can no longer mark it done, and its result will be refused
                await manager.finish_job_by_id_async(job.id, status=Status.FAILED, delete_job=False)
            except Exception as error:  # noqa: BLE001 - it ended meanwhile
                if queue_db.is_unreachable(error):
                    raise
            attempt = self.by_job.get(job.id)
            if attempt is not None and self.students[attempt.student].current is attempt:
                self._try_failed(
                    self.students[attempt.student], attempt,
                    f"try {attempt.number} on {attempt.started_by or 'a worker'}: the worker stopped answering "
                    f"(no heartbeat for {self.lease:g} s); its job runs again elsewhere",
                )  # fmt: skip
        current = {s.current.job_id: s.current for s in self.students.values() if s.current and not s.done}
        if not current:
            return
        rows = await self.app.connector.execute_query_all_async(
            "SELECT id, status FROM procrastinate_jobs WHERE id = ANY(%(ids)s)", ids=list(current)
        )
        status = {row["id"]: row["status"] for row in rows}
        for job_id, attempt in current.items():
            state = status.get(job_id)
            if state in ("todo", "doing"):
                attempt.ended_seen = 0
                continue
            attempt.ended_seen += 1  # its result, if any, was judged above: twice in a row is no race
            if attempt.ended_seen >= 2:
                self._try_failed(
                    self.students[attempt.student], attempt,
                    f"try {attempt.number} on {attempt.started_by or 'a worker'}: its job ended "
                    f"({state or 'removed'}) without a result (the worker's output says why)",
                )  # fmt: skip

    def _try_failed(self, student: Student, attempt: Try, reason: str) -> None:
        """This try will never count; the next one is deferred (or the student given up on)."""
        student.reasons.append(reason)
        student.current, student.needs_try = None, True
        self.board.failed_tries += 1
        self.board.set(student.name, state=QUEUED, reason="; ".join(student.reasons))
        self.board.say(f"{student.name}: {reason}" + ("" if len(student.tries) >= self.max_tries else "; trying again"))

    def _give_up(self, student: Student) -> None:
        student.done, student.needs_try = True, False
        tries = f"not graded on {len(student.tries)} tries: " if student.tries else ""
        reason = tries + "; ".join(student.reasons)
        self._not_graded(student, {a: reason for a in student.assignments})
        self.board.set(student.name, state=NOT_GRADED, reason=reason)

    def _not_graded(self, student: Student, reasons: dict[str, str]) -> None:
        """What course.py grade leaves for a submission nbgrader gave up on: no autograded notebook or
        feedback (an older one removed, as ``autograde --force`` does), and the submission in the
        gradebook with no new score, so that the report lists it NOT GRADED, never a silent 0 or gap."""
        student.not_graded = reasons
        for assignment in reasons:
            for top in result.TOPS:
                result.remove(self.root / top / student.name / assignment)
            submitted = self.root / "submitted" / student.name / assignment
            gradebook_rows.record_not_graded(self.db_url, self.course_id, student.name, assignment, submitted)

    # --- the end -----------------------------------------------------------------------------------
    async def _clean_up(self) -> None:
        """What this run put in the queue's database, and the results it judged, are removed."""
        keys = list(self.by_key)
        connector = self.app.connector
        await connector.execute_query_async("DELETE FROM paged_grading_payloads WHERE run_id = %(r)s", r=self.run_id)
        await connector.execute_query_async("DELETE FROM paged_grading_results WHERE job_key = ANY(%(k)s)", k=keys)
        await connector.execute_query_async("DELETE FROM paged_grading_events WHERE job_key = ANY(%(k)s)", k=keys)
        await self.app.job_manager.delete_old_jobs(  # finished jobs of this course's queue
            nb_hours=0, queue=self.queue, include_failed=True, include_cancelled=True, include_aborted=True
        )

    def _summary(self, seconds: float) -> None:
        workers: dict[str, int] = {}
        for row in self.board.rows.values():
            if row["state"] == DONE and row["worker"]:
                workers[row["worker"]] = workers.get(row["worker"], 0) + 1
        sent, accepted = max(1, self.timing["sent"]), max(1, self.timing["accepted"])
        summary = {
            "students": len(self.students),
            "graded": sum(1 for r in self.board.rows.values() if r["state"] == DONE),
            "not_graded": sum(1 for r in self.board.rows.values() if r["state"] == NOT_GRADED),
            "tries": sum(len(s.tries) for s in self.students.values()),
            "failed_tries": self.board.failed_tries,
            "seconds": round(seconds, 1),
            "coordinator_s_per_job": {
                "send": round(self.timing["send_s"] / sent, 4),
                "accept": round(self.timing["accept_s"] / accepted, 4),
            },
            "graded_by": workers,
        }
        path = self.root / RUN_SUMMARY
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
