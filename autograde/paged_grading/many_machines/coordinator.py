"""``course.py grade --queue URL``: send one job per student to the workers, and keep every grade.

The coordinator is the loop that sends and receives; what it decides lives beside it: ``roster`` (each
student's tries, which one is current), ``fencing`` (which result counts), ``leases`` (tries whose
worker is gone), ``grading_status`` (the bar, the status file, the run's summary).

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
import time
import uuid
from pathlib import Path

from . import course_bundle, fencing, grading_status, leases, queue_db, result, signing, submission_job
from .fingerprint import course_fingerprint
from .grading_status import DONE, NOT_GRADED, RUNNING, Board
from .roster import Gradebook, Roster, Student, Try

QUEUED_AHEAD = 100  # first tries waiting in the queue at most (retries always go in, ahead of them)


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
        self.board = Board(root, sorted(students), show_bar=show_bar)
        self.roster = Roster(students, self.board, tries, Gradebook(root, db_url, course_id))
        self.students = self.roster.students
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
        tries = sum(len(s.tries) for s in self.students.values())
        grading_status.write_run_summary(self.root, self.board, tries, self.timing, time.monotonic() - start)
        return self.roster.not_graded_reasons()

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
            released = sorted(p.name for p in (self.root / "source").iterdir() if p.is_dir())
            self.bundle, data = course_bundle.pack(self.root, released)
            await queue_db.publish_bundle(self.app, self.bundle, data)
            await queue_db.end_earlier_runs(self.app, self.queue)
            while not self.roster.all_done():
                try:
                    await self._defer_needed()
                    await self._judge_results()
                    await self._note_starts()
                    if self.db_ok_since is None:
                        self.board.say("the queue's database answers again: grading goes on")
                        self.db_ok_since = time.monotonic()
                    if time.monotonic() - self.db_ok_since >= self.lease:
                        await leases.fail_lost_tries(self.app, self.queue, self.lease, self.roster)
                except Exception as error:
                    if not queue_db.is_unreachable(error):
                        raise
                    self._database_away(error)
                self.board.flush()
                await asyncio.sleep(self.poll)
            await queue_db.clean_up_run(self.app, self.queue, self.run_id, list(self.roster.by_key))

    # --- sending -----------------------------------------------------------------------------------
    async def _defer_needed(self) -> None:
        """Retries first, then first tries while fewer than ``QUEUED_AHEAD`` jobs wait untaken: the queue
        holds the next jobs, not the class (a class of thousands is not thousands of payloads at once)."""
        waiting = self.roster.waiting()
        for student in sorted(self.students.values(), key=lambda s: not s.tries):
            if student.done or not student.needs_try:
                continue
            if len(student.tries) >= self.max_tries:
                self.roster.give_up(student)
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
                self.roster.give_up(student)
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
            self.roster.add_try(student, job_key, job_id, payload.digests())
            self.timing["send_s"] += time.perf_counter() - began
            self.timing["sent"] += 1

    # --- receiving ---------------------------------------------------------------------------------
    async def _judge_results(self) -> None:
        """Every result not judged yet, oldest first: each accepted or refused, with the reason stored."""
        pending = await self.app.connector.execute_query_all_async(
            "SELECT id FROM paged_grading_results WHERE verdict IS NULL AND job_key = ANY(%(keys)s) ORDER BY id",
            keys=list(self.roster.by_key),
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
        attempt = self.roster.by_key[row["job_key"]]
        student = self.students[attempt.student]
        judgement = fencing.judge(row, attempt, student, key=self.key, max_tries=self.max_tries)
        if judgement.warning:
            self.board.say(judgement.warning)
        if judgement.failed:
            self.roster.try_failed(student, attempt, judgement.failed)
        if judgement.outcome is not None:
            self._accept(student, attempt, judgement.outcome, row["worker"])
        return judgement.verdict

    def _accept(self, student: Student, attempt: Try, outcome: result.Result, worker: str) -> None:
        """The current try's grading counts: written into the course, and the student is done."""
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
        self.roster.not_graded(student, {a: reason for a in missing})
        self.board.set(
            student.name, state=DONE if not missing else NOT_GRADED, worker=worker, seconds=outcome.seconds,
            reason="; ".join(student.reasons + ([f"NOT GRADED {', '.join(missing)}: {reason}"] if missing else [])),
        )  # fmt: skip

    async def _note_starts(self) -> None:
        rows = await self.app.connector.execute_query_all_async(
            "SELECT id, job_key, worker FROM paged_grading_events WHERE id > %(last)s AND job_key = ANY(%(keys)s) "
            "ORDER BY id",
            last=self.last_event, keys=list(self.roster.by_key),
        )  # fmt: skip
        for row in rows:
            self.last_event = max(self.last_event, row["id"])
            attempt = self.roster.by_key[row["job_key"]]
            attempt.started_by = row["worker"]
            student = self.students[attempt.student]
            if student.current is attempt and not student.done:
                self.board.set(student.name, state=RUNNING, worker=row["worker"])
