"""``course.py worker``: take one student's job at a time from the queue, grade it here, send the result.

What a worker holds, and for how long:

* its own course root (``--root``), never the instructor's: the released course (``course_bundle``:
  the source notebooks with their solutions and hidden tests, which grading needs, outside every
  sandbox), a gradebook of its own made from it, and ``published/``;
* during one job only: that one student's submitted files, the secret seeds of exactly those bytes
  (``secret_seeds.GIVEN_SEEDS_FILE``), the student's grading-time ledger, and what grading writes.
  Before and after every job the root is emptied of all of it (``clear``), so a worker never holds
  two students at once, nor a student after their result is sent;
* the worker key (``signing``), to check jobs and sign results, and the queue's connection (a
  password, if any, in ``~/.pgpass``).

Not: the course key (the coordinator computes each submission's seeds), the coordinator's
gradebook or its credential, other students' files, feedback or grades. Nothing of the queue
reaches a student's code: grading runs ``course.py grade`` in a process without the ``PG*``
variables, every kernel runs in the bubblewrap sandbox (no network namespace shared, so no TCP
to the database; only the student's folders bound, so no Unix socket or ``~/.pgpass`` either;
credential-like variables removed), and the worker's root is not mounted there.

The grading is today's one-machine path, unchanged: ``course.py --root ROOT grade A... --student S``
then ``course.py feedback A... --student S``, in a session of their own (killed whole on a timeout
or a second SIGTERM). procrastinate runs the job (``queue_db``): it marks it ``doing`` for this
worker alone, and the worker's heartbeat (every ``--heartbeat`` seconds) is its lease; the result is
inserted, signed, before the job is marked done, so a job that ends without one is known lost.

Stopping: SIGTERM or Ctrl-C once finishes the current job and exits; twice stops it now (its try is
reported failed and retried elsewhere). A worker whose grading code differs from the coordinator's
(``fingerprint``) reports so and exits: it would only fail every job it takes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..clean_run.secret_seeds import GIVEN_SEEDS_FILE
from ..sandbox import bubblewrap
from . import course_bundle, queue_db, result, signing, submission_job
from .fingerprint import course_fingerprint

MARK = ".paged-grading-worker"
SESSION_FILE = ".grading-session"
PRISTINE_GRADEBOOK = ".gradebook.pristine.db"
GRADING_SCRATCH = ("submitted", "autograded", "feedback", "reports")
DELIVERY_PATIENCE_S = 900  # how long a finished result waits for an unreachable database


class Refused(RuntimeError):
    """A job this worker will not run (unsigned, unknown); it is failed without a result."""


class Stopped(RuntimeError):
    """The worker was told twice to stop: its running grading was ended."""


@dataclass
class Setup:
    root: Path
    key: bytes
    name: str
    queue: str
    course_script: Path
    release: Callable
    fingerprint: str
    job_timeout: float
    heartbeat: float = 10.0
    quit: asyncio.Event = field(default_factory=asyncio.Event)
    stop_now: asyncio.Event = field(default_factory=asyncio.Event)
    jobs_done: int = 0


def claim_root(root: Path) -> None:
    """A worker's root is its own: refuse a course root with students that no worker made."""
    root.mkdir(parents=True, exist_ok=True)
    if not (root / MARK).exists() and any(
        (root / name).exists() for name in ("submitted", "autograded", "gradebook.db")
    ):
        raise SystemExit(
            f"{root} looks like a course (it has submitted/, autograded/ or gradebook.db): a worker empties its "
            "root between jobs, so give it a folder of its own: course.py --root /path/to/new/folder worker ..."
        )
    (root / MARK).write_text("the root of a paged-grading worker: emptied between jobs\n")


def end_session(root: Path) -> bool:
    """Kill the grading session recorded in ``root`` (its whole process group), if it still runs there."""
    path = root / SESSION_FILE
    ended = False
    try:
        pid = int(path.read_text())
        if str(root).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.killpg(pid, signal.SIGKILL)
            ended = True
    except (OSError, ValueError):
        pass
    path.unlink(missing_ok=True)
    return ended


def end_leftover_session(root: Path) -> None:
    """A grading session left by a worker that was killed (SIGKILL) in this root: end it first."""
    if end_session(root):
        print(f"ended the grading left running in {root} by a worker that was killed", flush=True)


def clear(root: Path) -> None:
    """Everything of the last student gone; the released course and a fresh gradebook stay."""
    for name in GRADING_SCRATCH:
        shutil.rmtree(root / name, ignore_errors=True)
    (root / GIVEN_SEEDS_FILE).unlink(missing_ok=True)
    pristine = root / PRISTINE_GRADEBOOK
    if pristine.is_file():
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{root / 'gradebook.db'}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(pristine, root / "gradebook.db")


def _grading_env() -> dict[str, str]:
    """The worker's environment without the database's (PGPASSWORD, PGHOST...): grading needs none of it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


async def _run(setup: Setup, *args: str, timeout: float) -> tuple[int, str]:
    """``course.py --root ROOT ARGS`` in a session of its own; killed whole on a timeout or a cancel."""
    command = [sys.executable, str(setup.course_script), "--root", str(setup.root), *args]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=_grading_env(),
        cwd=setup.root, start_new_session=True,
    )  # fmt: skip
    (setup.root / SESSION_FILE).write_text(str(process.pid))
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
        return process.returncode, out.decode(errors="replace")
    except BaseException:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await process.wait()
        raise
    finally:
        (setup.root / SESSION_FILE).unlink(missing_ok=True)


async def _ensure_course(app, setup: Setup, digest: str) -> None:
    if course_bundle.installed(setup.root) == digest:
        return
    row = await app.connector.execute_query_one_async(
        "SELECT bundle FROM paged_grading_bundles WHERE digest = %(digest)s", digest=digest
    )
    if row is None:
        raise Refused(f"the course bundle {digest[:12]} is not in the queue's database")
    print(f"{setup.name}: installing the course {digest[:12]} (nbgrader generate_assignment, once)", flush=True)
    try:
        await asyncio.to_thread(course_bundle.install, setup.root, digest, bytes(row["bundle"]), setup.release)
    except SystemExit as error:  # course.py's nbgrader step says why it stopped
        raise RuntimeError(f"releasing the course here failed ({error}; see {setup.root / '.install.log'})") from None
    shutil.copyfile(setup.root / "gradebook.db", setup.root / PRISTINE_GRADEBOOK)


async def _grade(app, setup: Setup, payload, started: float) -> result.Result:
    """Grade one payload in the worker's root with course.py; the bounded result."""
    if payload.fingerprint != setup.fingerprint:
        setup.quit.set()  # every job would fail the same way here
        return result.failed(
            payload.job_key, payload.student, setup.name,
            f"worker {setup.name} grades with other code than the coordinator (paged_helpers, the grader, "
            "nbgrader_config.py or the nbgrader/torch/triton/numpy versions differ): update that machine; "
            "it stopped taking jobs",
        )  # fmt: skip
    await _ensure_course(app, setup, payload.bundle)
    clear(setup.root)
    submission_job.write_submission(setup.root, payload)
    (setup.root / GIVEN_SEEDS_FILE).write_text(json.dumps(payload.seeds))
    left = setup.job_timeout
    code, graded_log = await _run(setup, "grade", *payload.assignments, "--student", payload.student, timeout=left)
    if setup.stop_now.is_set():
        raise Stopped(f"worker {setup.name} was stopped during the grading")
    log = f"$ course.py grade --student {payload.student} (exit {code})\n{graded_log}"
    graded = [a for a in payload.assignments if (setup.root / "autograded" / payload.student / a).is_dir()]
    if graded:
        left = max(60.0, setup.job_timeout - (time.monotonic() - started))
        code, feedback_log = await _run(setup, "feedback", *graded, "--student", payload.student, timeout=left)
        log += f"\n$ course.py feedback --student {payload.student} (exit {code})\n{feedback_log}"
        if setup.stop_now.is_set():
            raise Stopped(f"worker {setup.name} was stopped during the feedback")
    return await asyncio.to_thread(result.collect, setup.root, payload, setup.name, log, time.monotonic() - started)


async def _keep_lease(app, worker_id: int | None, every: float) -> None:
    """The job's lease, renewed while it runs: this worker's heartbeat row, every ``every`` seconds.

    procrastinate's own heartbeat task runs too, but ends for good at its first database error (a
    restart hitting mid-query) and nothing restarts it in this version: a worker would then keep
    grading while looking dead, and lose every job it takes. This one outlives such errors.
    """
    while worker_id is not None:
        await asyncio.sleep(every)
        try:
            await app.job_manager.update_heartbeat(worker_id)
        except Exception:  # noqa: BLE001 - the database is away: the lease runs out, or the next beat lands
            pass


async def _deliver(app, setup: Setup, job_key: str, job_id: int, outcome: result.Result) -> None:
    """Insert the signed result; wait out an unreachable database (bounded), then give up loudly."""
    blob = result.encode(outcome)
    mac = signing.sign(setup.key, job_key.encode(), str(job_id).encode(), blob)
    deadline, delay = time.monotonic() + DELIVERY_PATIENCE_S, 1.0
    while True:
        try:
            await app.connector.execute_query_async(
                "INSERT INTO paged_grading_results (job_key, job_id, worker, result, mac) "
                "VALUES (%(job_key)s, %(job_id)s, %(worker)s, %(result)s, %(mac)s)",
                job_key=job_key, job_id=job_id, worker=setup.name, result=blob, mac=mac,
            )  # fmt: skip
            return
        except Exception as error:
            if not queue_db.is_unreachable(error) or time.monotonic() > deadline:
                raise
            print(f"{setup.name}: the queue's database is unreachable; the result of {outcome.student} waits "
                  f"(next try in {delay:.0f} s)", flush=True)  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


async def grade_student(context, job_key: str) -> None:
    """The task: one student's job, from a signed payload to a signed result."""
    setup: Setup = context.additional_context["setup"]
    app = context.app
    job_id = context.job.id
    row = await app.connector.execute_query_one_async(
        "SELECT payload, mac FROM paged_grading_payloads WHERE job_key = %(job_key)s", job_key=job_key
    )
    if row is None:
        raise Refused(f"job {job_id}: no payload (its coordinator's run has ended)")
    blob = bytes(row["payload"])
    if not signing.verify(setup.key, row["mac"], job_key.encode(), blob):
        print(f"{setup.name}: REFUSED job {job_id}: its payload is not signed with this worker's key "
              "(a job not from the course's coordinator, or this machine has another key)", flush=True)  # fmt: skip
        raise Refused(f"job {job_id}: bad signature")
    payload = submission_job.decode(blob)
    if payload.job_key != job_key:
        raise Refused(f"job {job_id}: its payload belongs to another job")
    await app.connector.execute_query_async(
        "INSERT INTO paged_grading_events (job_key, job_id, worker, kind) VALUES (%(k)s, %(j)s, %(w)s, 'started')",
        k=job_key, j=job_id, w=setup.name,
    )  # fmt: skip
    started = time.monotonic()
    print(f"{setup.name}: grading {payload.student} ({len(payload.assignments)} notebook(s), try {payload.try_no})",
          flush=True)  # fmt: skip
    keeper = asyncio.create_task(_keep_lease(app, context.job.worker_id, setup.heartbeat))
    try:
        try:
            outcome = await _grade(app, setup, payload, started)
        except asyncio.TimeoutError:
            reason = f"grading ran past this worker's limit of {setup.job_timeout:.0f} s"
            outcome = result.failed(job_key, payload.student, setup.name, reason)
        except Stopped as error:
            outcome = result.failed(job_key, payload.student, setup.name, str(error))
        except Exception as error:  # noqa: BLE001 - any failure here is the infrastructure's: retried, never scored
            outcome = result.failed(job_key, payload.student, setup.name, f"{type(error).__name__}: {error}")
        finally:
            clear(setup.root)  # also when the job is aborted (an earlier run's, cancelled by its coordinator)
        await _deliver(app, setup, job_key, job_id, outcome)
    finally:
        keeper.cancel()
    setup.jobs_done += 1
    words = outcome.status if not outcome.reason else f"{outcome.status} ({outcome.reason})"
    print(f"{setup.name}: {payload.student}: {words} in {time.monotonic() - started:.1f} s, result sent", flush=True)


def _install_handlers(loop: asyncio.AbstractEventLoop, setup: Setup) -> None:
    """^C or SIGTERM once: stop after the current job; twice: stop now. And plain lines for a job that
    another worker was given meanwhile, and for a database that went away."""

    def on_signal() -> None:
        if setup.quit.is_set():
            print(f"{setup.name}: stopping now; the running job is reported failed and retried elsewhere", flush=True)
            setup.stop_now.set()
            end_session(setup.root)  # the grading's session: the job then reports itself stopped
        else:
            print(f"{setup.name}: stopping after the current job (again to stop now)", flush=True)
            setup.quit.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)

    def on_unretrieved(loop, context) -> None:
        """procrastinate cannot mark done a job that was given to another worker meanwhile: say so plainly."""
        error = context.get("exception")
        if error is not None and 'not in "doing" or "todo" status' in str(error.__cause__ or ""):
            print(
                f"{setup.name}: a job this worker finished had been given to another worker meanwhile (this one "
                "stopped answering for a while); the coordinator keeps the other worker's result",
                flush=True,
            )
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(on_unretrieved)
    said = [0.0]

    def on_away() -> None:
        if time.monotonic() - said[0] > 30:
            said[0] = time.monotonic()
            print(f"{setup.name}: the queue's database is unreachable: waiting for it", flush=True)

    queue_db.watch_outages(on_away)


async def _take_jobs(app, setup: Setup, heartbeat: float) -> None:
    """One connection to the queue: take jobs, one at a time, until told to stop or the connection fails."""
    async with app.open_async():
        while not await queue_db.ready(app):
            print(f"{setup.name}: the queue has no course yet: start `course.py grade --queue ...` "
                  "on the coordinator (waiting)", flush=True)  # fmt: skip
            await asyncio.sleep(10)
        print(f"{setup.name}: ready, taking jobs from {setup.queue}", flush=True)
        worker_task = asyncio.create_task(app.run_worker_async(
            queues=[setup.queue], name=setup.name, concurrency=1, install_signal_handlers=False,
            update_heartbeat_interval=heartbeat, stalled_worker_timeout=max(60.0, 10 * heartbeat),
            fetch_job_polling_interval=min(5.0, heartbeat * 2), delete_jobs="successful",
            additional_context={"setup": setup},
        ))  # fmt: skip
        stopper = asyncio.create_task(setup.quit.wait())
        await asyncio.wait({worker_task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if not worker_task.done():
            worker_task.cancel()  # procrastinate: stop taking jobs, wait for the running one
        try:
            await worker_task
        except asyncio.CancelledError:
            pass


async def _serve(app, setup: Setup, heartbeat: float) -> None:
    """Take jobs until told to stop, outliving the database: each failed connection is tried again, later."""
    _install_handlers(asyncio.get_running_loop(), setup)
    delay = 1.0
    while not setup.quit.is_set():
        try:
            await _take_jobs(app, setup, heartbeat)
            delay = 1.0
        except Exception as error:  # noqa: BLE001 - the worker itself must outlive its database
            what = "the queue's database is unreachable" if queue_db.is_unreachable(error) else "procrastinate failed"
            print(f"{setup.name}: {what} ({type(error).__name__}: {str(error).strip()[:200]}); "
                  f"starting again in {delay:.0f} s", flush=True)  # fmt: skip
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
            continue
        if not setup.quit.is_set():
            print(f"{setup.name}: the worker stopped (its database connection failed): starting again", flush=True)
            await asyncio.sleep(delay)


def run(
    root: Path,
    *,
    queue_url: str,
    course_id: str,
    key_path: Path | None,
    name: str | None,
    course_script: Path,
    release: Callable,
    config: Path,
    heartbeat: float,
    job_timeout: float,
) -> int:
    """``course.py worker``: serve the course's queue until stopped."""
    bubblewrap.require_bwrap()  # a worker without the sandbox would fail every job: refuse to start
    claim_root(root)
    end_leftover_session(root)
    clear(root)
    setup = Setup(
        root=root, key=signing.read_key(key_path or root / signing.KEY_FILE),
        name=name or f"{socket.gethostname()}-{os.getpid()}", queue=queue_db.queue_name(course_id),
        course_script=course_script, release=release, fingerprint=course_fingerprint(config), job_timeout=job_timeout,
        heartbeat=heartbeat,
    )  # fmt: skip
    logging.basicConfig(level=logging.WARNING, format=f"{setup.name}: %(name)s %(levelname)s %(message)s")
    app = queue_db.make_app(queue_url)
    app.task(name=queue_db.TASK, pass_context=True)(grade_student)
    asyncio.run(_serve(app, setup, heartbeat))
    print(f"{setup.name}: stopped after {setup.jobs_done} job(s)", flush=True)
    return 0
