"""Grading on many machines, for real (issue 38): procrastinate on a throwaway PostgreSQL, one
coordinator (``course.py grade --queue``) and three worker processes (``course.py worker``), each
worker with its own course folder as if on its own machine.

One class of four, graded once (module fixture) through faults, and graded again on one machine
with ``course.py grade`` (the reference, same course key): ``ada`` and ``eve`` finished both
notebooks (``eve``'s 02 also probes the queue from inside the sandbox), ``bob`` did nothing,
``broken`` handed in a notebook that is not JSON. The run, in order:

1. a forged job (a payload not signed with the worker key) is put in the queue first: the first
   worker refuses it and grades nothing for it;
2. workers w1 and w2 start and each takes a student; then, mid-job, w1's machine is killed
   (``kill -9`` of its processes) and w2's machine is paused (``SIGSTOP``) past the lease;
3. w3 starts: both lost jobs run again there (the coordinator saw no heartbeat for the lease);
   a forged result (no valid MAC) is slipped in for ``eve``;
4. once w2's student has a second try, w2's machine resumes (``SIGCONT``): the result it then
   sends for its superseded try is refused, never written;
5. the database is restarted at once (``-m immediate``, as a crash) while w2 and w3 grade;
6. ``broken`` fails on every try (nbgrader cannot read it) and ends NOT GRADED with the reason.

Then: every grade, needs-manual-grade flag and hidden draw equals the one-machine grading, every
graded student has feedback, each student was graded exactly once, and nothing of the queue
(socket, TCP, credential variables, the worker key) was reachable from the student's sandbox.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from autograde_helpers import (
    AUTOGRADE,
    autograded_notebook,
    course,
    graded_course,
    grading_env,
    insert_cell_after,
    instructor,
    released,
    throwaway_postgres,
)

pytestmark = [pytest.mark.nbgrader, pytest.mark.slow]

A1, A2 = "01_block_tables", "02_block_allocator"
LEASE = 8  # seconds without a heartbeat before a job goes to another worker (workers beat every second)
TRIES = 3  # tries per student (course.py's default)
TIMEOUT = 40
STUDENTS = ["ada", "bob", "broken", "eve"]
SECRET_IN_WORKER_ENV = "not-for-students-3141"

PROBE = """\
import os, socket
_seen = []
for _family, _address in ((socket.AF_UNIX, {pg_socket!r}), (socket.AF_INET, ("127.0.0.1", {port}))):
    _client = socket.socket(_family, socket.SOCK_STREAM)
    _client.settimeout(2)
    try:
        _client.connect(_address)
        _seen.append("REACHED " + str(_address))
    except OSError as _error:
        _seen.append("unreachable " + type(_error).__name__)
    finally:
        _client.close()
_seen.append("variables " + str(sorted(k for k in os.environ if k.startswith("PG") or "KEY" in k)))
_seen.append("secret in environment " + str({secret!r} in str(os.environ)))
_seen.append("worker files " + str([p for p in {paths!r} if os.path.exists(p)]))
print("PROBE", _seen)
"""


def _solution_id(assignment: str) -> str:
    return next(
        c.metadata["nbgrader"]["grade_id"]
        for c in instructor(assignment).cells
        if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"
    )


def _hand_in(folder: Path, probe: str) -> Path:
    """The class's notebooks, written once (a notebook written twice gets new cell ids: other bytes)."""
    notebooks = {
        "ada": {A1: instructor(A1), A2: instructor(A2)},
        "bob": {A1: released(A1), A2: released(A2)},
        "eve": {A1: instructor(A1), A2: insert_cell_after(instructor(A2), _solution_id(A2), probe)},
    }
    for student, by_assignment in notebooks.items():
        (folder / student).mkdir(parents=True, exist_ok=True)
        for assignment, notebook in by_assignment.items():
            nbformat.write(notebook, folder / student / f"{assignment}.ipynb")
    return folder


def _collect(root: Path, folder: Path) -> None:
    """The class collected the way an instructor does, plus one notebook that is not JSON."""
    course(root, "collect", str(folder))
    broken = root / "submitted" / "broken" / A1
    broken.mkdir(parents=True)
    (broken / f"{A1}.ipynb").write_text('{"cells": [ this is not JSON')


class Worker:
    """``course.py --root ROOT worker`` in a session of its own: its machine, for signals."""

    def __init__(self, name: str, root: Path, queue: str, key: Path) -> None:
        self.name, self.root = name, root
        root.mkdir(parents=True)
        shutil.copyfile(key, root / ".worker_key")
        os.chmod(root / ".worker_key", 0o600)
        self.log = root.parent / f"{name}.log"
        env = {**grading_env(), "PGPASSWORD": SECRET_IN_WORKER_ENV, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, str(AUTOGRADE / "course.py"), "--root", str(root), "worker", "--queue", queue]
        command += ["--name", name, "--heartbeat", "1"]
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def machine(self, sig: int) -> None:
        """A signal to everything this worker's machine runs: the worker and its grading session."""
        groups = [self.process.pid]
        session = self.root / ".grading-session"
        if session.exists():
            groups.append(int(session.read_text()))
        for group in groups:
            try:
                os.killpg(group, sig)
            except (ProcessLookupError, ValueError):
                pass

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.machine(signal.SIGCONT)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                pass
        self.machine(signal.SIGKILL)
        self.process.wait()


def _status(root: Path) -> dict[str, dict]:
    path = root / "reports" / "grading-status.csv"
    if not path.exists():
        return {}
    with open(path, encoding="utf-8") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def _wait(what: str, condition, timeout: float, coordinator: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if coordinator is not None and coordinator.poll() is not None:
            raise AssertionError(f"the coordinator exited while waiting for {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _running_on(root: Path, worker: str, tries: int = 1) -> str | None:
    for student, row in _status(root).items():
        if row["state"] == "running" and row["worker"] == worker and int(row["tries"]) == tries:
            return student
    return None


def _queue_sql(url: str, query: str, *params):
    import psycopg
    from paged_grading.many_machines import queue_db

    with psycopg.connect(queue_db.conninfo(url), autocommit=True) as connection:
        cursor = connection.execute(query, params)
        return cursor.fetchall() if cursor.description else None


def _bundle_sent(url: str) -> bool:
    import psycopg

    try:
        return bool(_queue_sql(url, "SELECT 1 FROM paged_grading_bundles"))
    except psycopg.Error:  # the coordinator has not made the tables yet
        return False


def _forge_job(url: str) -> None:
    """A job in the course's queue whose payload is signed with another key (someone with database access)."""
    import asyncio

    from paged_grading.many_machines import queue_db, signing, submission_job

    job_key = uuid.uuid4().hex
    payload = submission_job.Payload(
        run_id="forged", job_key=job_key, course_id="paged-attention", student="mallory", assignments=[A1],
        files={A1: {f"{A1}.ipynb": b"{}"}}, seeds={"seeds": {}, "families": {}}, ledger={}, bundle="0" * 64,
        fingerprint="0" * 64, try_no=1,
    )  # fmt: skip
    blob = submission_job.encode(payload)
    _queue_sql(
        url, "INSERT INTO paged_grading_payloads (job_key, run_id, payload, mac) VALUES (%s, 'forged', %s, %s)",
        job_key, blob, signing.sign(b"a key that is not the course's worker key", job_key.encode(), blob),
    )  # fmt: skip

    async def defer():
        app = queue_db.make_app(url)
        async with app.open_async():
            await app.configure_task(
                queue_db.TASK, queue=queue_db.queue_name("paged-attention"), priority=5
            ).defer_async(job_key=job_key)

    asyncio.run(defer())


def _forge_result(url: str, student: str) -> None:
    """A result claiming full marks for ``student``'s current try, without the worker key's MAC."""
    from paged_grading.many_machines import result, submission_job

    for job_key, blob in _queue_sql(
        url, "SELECT job_key, payload FROM paged_grading_payloads WHERE run_id <> 'forged'"
    ):
        payload = submission_job.decode(bytes(blob))
        if payload.student == student:
            forged = result.encode(result.Result(job_key, student, "mallory", result.GRADED, graded=[]))
            job_id = _queue_sql(url, "SELECT id FROM procrastinate_jobs WHERE args->>'job_key' = %s", job_key)[0][0]
            insert = "INSERT INTO paged_grading_results (job_key, job_id, worker, result, mac) "
            insert += " VALUES (%s, %s, %s, %s, %s)"
            _queue_sql(url, insert, job_key, job_id, "mallory", forged, "0" * 64)
            return
    raise AssertionError(f"no payload for {student} in the queue")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    reason = throwaway_postgres.unavailable_reason()
    if reason:
        pytest.skip(f"grading on many machines needs PostgreSQL for its queue: {reason}")
    pytest.importorskip("procrastinate", reason="grading on many machines needs procrastinate (make contributor)")
    from paged_grading.many_machines import signing

    server = throwaway_postgres.ThrowawayPostgres().start()
    listener = socket.create_server(("127.0.0.1", 0))  # something on the loopback a sandbox must not reach
    workers: list[Worker] = []
    coordinator = None
    try:
        queue = server.create_database("grading_queue")
        scratch = tmp_path_factory.mktemp("many-machines")
        config = {"FairExecute.timeout": TIMEOUT, "FairExecute.responsive_grace": 5}
        reference, root = graded_course("one-machine", **config), graded_course("coordinator", **config)
        key = signing.course_key_file(root)
        worker_roots = [scratch / name for name in ("w1", "w2", "w3")]
        probe = PROBE.format(
            pg_socket=str(server.folder / ".s.PGSQL.5432"), port=listener.getsockname()[1],
            secret=SECRET_IN_WORKER_ENV, paths=[str(key), *(str(r / ".worker_key") for r in worker_roots)],
        )  # fmt: skip
        handed_in = _hand_in(scratch / "handed-in", probe)
        for where in (reference, root):
            _collect(where, handed_in)
        # One course key for both, so that their hidden draws can be compared.
        (root / ".hidden_seed_key").write_text(uuid.uuid4().hex * 2)
        os.chmod(root / ".hidden_seed_key", 0o600)
        shutil.copyfile(root / ".hidden_seed_key", reference / ".hidden_seed_key")

        began = time.monotonic()
        one_machine = course(reference, "grade", A1, A2, check=False)
        one_machine_s = time.monotonic() - began

        began = time.monotonic()
        log = scratch / "coordinator.log"
        with open(log, "w") as out:
            coordinator = subprocess.Popen(
                [sys.executable, str(AUTOGRADE / "course.py"), "--root", str(root), "grade", A1, A2, "--queue", queue,
                 "--lease", str(LEASE), "--tries", str(TRIES), "--poll", "0.5", "--no-progress"],
                env={**grading_env(), "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait("the queue's tables", lambda: _status(root), 60, coordinator)
        _wait("the course in the queue", lambda: _bundle_sent(queue), 30)
        _forge_job(queue)
        w1 = Worker("w1", worker_roots[0], queue, key)
        workers.append(w1)
        _wait("w1 refusing the forged job", lambda: "REFUSED job" in w1.output(), 60, coordinator)
        w2 = Worker("w2", worker_roots[1], queue, key)
        workers.append(w2)
        killed = _wait("a student on w1", lambda: _running_on(root, "w1"), 90, coordinator)
        paused = _wait("a student on w2", lambda: _running_on(root, "w2"), 90, coordinator)
        time.sleep(2)  # mid-job
        w1.machine(signal.SIGKILL)
        w2.machine(signal.SIGSTOP)
        w3 = Worker("w3", worker_roots[2], queue, key)
        workers.append(w3)
        _forge_result(queue, "eve")
        _wait(f"{paused}'s second try", lambda: _status(root)[paused]["tries"] == "2", 60, coordinator)
        w2.machine(signal.SIGCONT)
        server.restart(pause_s=2)
        code = coordinator.wait(480)
        workers_s = time.monotonic() - began
        for worker in workers:
            worker.stop()
        status = course(root, "status")
        yield {
            "root": root, "reference": reference, "one_machine": one_machine, "coordinator": log.read_text(),
            "code": code, "killed": killed, "paused": paused, "workers": {w.name: w.output() for w in workers},
            "status": status.stdout, "seconds": (one_machine_s, workers_s),
            "worker_roots": {w.name: w.root for w in workers},
        }  # fmt: skip
    finally:
        if coordinator is not None and coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait()
        for worker in workers:
            worker.stop()
        listener.close()
        server.stop()


def _grades(root: Path) -> dict[tuple, tuple]:
    """(student, assignment, notebook, cell) -> (auto_score, needs_manual_grade), every grade nbgrader keeps."""
    from nbgrader.api import Gradebook, MissingEntry

    rows = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        for assignment in gradebook.assignments:
            for student in gradebook.students:
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:
                    continue
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        key = (student.id, assignment.name, notebook.name, grade.name)
                        rows[key] = (grade.auto_score, bool(grade.needs_manual_grade))
    return rows


def _draws(root: Path) -> set[tuple]:
    """(student, assignment, digest prefix, draw family) of every graded notebook with hidden calls."""
    lines = (root / "reports" / "hidden_draws.log").read_text().splitlines()
    return {tuple(line.split("\t")[1:2] + line.split("\t")[2:3] + line.split("\t")[4:6]) for line in lines}


def _ungraded(root: Path) -> dict[tuple[str, str], str]:
    with open(root / "reports" / "ungraded.csv", encoding="utf-8") as handle:
        return {(row["student_id"], row["assignment"]): row.get("reason") or "" for row in csv.DictReader(handle)}


def test_results_equal_grading_on_one_machine(graded):
    root, reference = graded["root"], graded["reference"]
    on_workers, on_one = _grades(root), _grades(reference)
    assert on_workers == on_one, graded["coordinator"][-4000:]
    assert on_workers[("ada", A2, A2, "test_block_allocator")] == (5.0, False)
    assert on_workers[("bob", A2, A2, "test_block_allocator")][0] == 0
    assert _draws(root) == _draws(reference) and _draws(root)
    assert set(_ungraded(root)) == set(_ungraded(reference)) == {("broken", A1)}
    for student in ("ada", "bob", "eve"):
        for assignment in (A1, A2):
            assert (root / "feedback" / student / assignment / f"{assignment}.html").is_file(), (student, assignment)
            assert (root / "autograded" / student / assignment / f"{assignment}.ipynb").is_file()


def test_a_killed_worker_s_job_runs_again_elsewhere(graded):
    row = _status(graded["root"])[graded["killed"]]
    assert row["state"] == "graded" and row["worker"] != "w1" and int(row["tries"]) >= 2, row
    assert "on w1: the worker stopped answering" in row["reason"], row
    log = (graded["root"] / "reports" / "grading-logs" / f"{graded['killed']}.log").read_text()
    assert log.startswith(f"graded on worker {row['worker']}"), log[:300]


def test_a_paused_worker_s_late_result_does_not_overwrite(graded):
    paused, out = graded["paused"], graded["coordinator"]
    row = _status(graded["root"])[paused]
    assert row["state"] == "graded" and int(row["tries"]) == 2, row
    assert "on w2: the worker stopped answering" in row["reason"], row
    assert f"late result for {paused} from w2 (try 1) refused" in out, out[-4000:]
    assert f"w2: {paused}: graded" in graded["workers"]["w2"]  # w2 did finish and send it, after its pause
    # the result that counted is the second try's: the log the coordinator kept says so
    log = (graded["root"] / "reports" / "grading-logs" / f"{paused}.log").read_text()
    assert log.startswith(f"graded on worker {row['worker']} (try 2"), log[:300]


def test_the_database_restarted_mid_run_loses_nothing(graded):
    out = graded["coordinator"]
    assert "the queue's database is unreachable" in out and "answers again" in out, out[-4000:]
    status = _status(graded["root"])
    assert set(status) == set(STUDENTS)
    assert all(row["state"] in ("graded", "NOT GRADED") for row in status.values()), status
    assert graded["code"] == 1  # broken is NOT GRADED, as course.py grade says for one machine
    assert graded["one_machine"].returncode == 1


def test_a_failing_submission_is_retried_then_not_graded_with_the_reason(graded):
    row = _status(graded["root"])["broken"]
    assert row["state"] == "NOT GRADED" and int(row["tries"]) == TRIES, row
    reason = _ungraded(graded["root"])[("broken", A1)]
    assert f"on {TRIES} tries" in reason and "nbgrader could not grade" in reason, reason
    assert f"NOT GRADED broken/01_block_tables: nbgrader could not grade it on {TRIES} tries" in graded["coordinator"]
    assert not (graded["root"] / "autograded" / "broken").exists()


def test_each_student_is_graded_once(graded):
    out = graded["coordinator"]
    assert "on workers: 3 of 4 student(s) graded" in out, out[-3000:]
    for student in ("ada", "bob", "eve"):
        header = (graded["root"] / "reports" / "grading-logs" / f"{student}.log").read_text().splitlines()[0]
        assert header.startswith("graded on worker w"), header
    lines = (graded["root"] / "reports" / "hidden_draws.log").read_text().splitlines()
    assert len(lines) == len(set(line.split("\t", 1)[1] for line in lines)), lines


def test_only_the_coordinator_s_jobs_and_results_count(graded):
    assert "REFUSED job" in graded["workers"]["w1"]
    assert "mallory" not in " ".join(_status(graded["root"]))
    assert "REFUSED a result for eve claiming to come from 'mallory'" in graded["coordinator"]
    assert ("eve", A2, A2, "test_block_allocator") in _grades(graded["root"])


def test_workers_never_hold_the_course_key(graded):
    """The hidden draws equal the one-machine grading's (above) with seeds the coordinator sent: no
    worker made or read a course key of its own. A worker that stopped keeps no student's files (w1,
    killed mid-job, keeps them on its disk until a worker starts there again and empties it)."""
    roots = graded["worker_roots"]
    for name, root in roots.items():
        assert not (root / ".hidden_seed_key").exists(), name
    for name in ("w2", "w3"):
        assert not (roots[name] / "submitted").exists(), name
        assert not (roots[name] / ".hidden_seeds_given.json").exists(), name


def test_nothing_of_the_queue_reaches_the_sandbox(graded):
    notebook = autograded_notebook(graded["root"], "eve", A2)
    printed = "".join(
        output.get("text", "")
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if cell.cell_type == "code"
    )
    probe = next(line for line in printed.splitlines() if line.startswith("PROBE"))
    assert probe.count("unreachable") == 2 and "REACHED" not in probe, probe
    assert "variables []" in probe and "secret in environment False" in probe and "worker files []" in probe, probe
    assert _grades(graded["root"])[("eve", A2, A2, "test_block_allocator")] == (5.0, False)


def test_status_shows_every_student(graded):
    out = graded["status"]
    for student in STUDENTS:
        assert student in out
    assert "3 graded" in out and "1 NOT GRADED" in out, out
