"""The queue: procrastinate on PostgreSQL, and the course's own tables beside procrastinate's.

Engine: procrastinate (pinned in requirements/contributor.txt; see autograde/README.md, "Grading on
many machines", for why and for the documented semantics relied on). One procrastinate job per
student and try: its row says who runs it (``status`` todo -> doing -> succeeded/failed, taken by
one worker at a time with ``SELECT ... FOR UPDATE SKIP LOCKED``), and every worker's heartbeat row
says whether that worker is alive (``get_stalled_jobs``).

The job itself carries only a key and a MAC; what it means lies in the course's tables:

| table | written by | read by | holds |
| --- | --- | --- | --- |
| ``paged_grading_bundles`` | coordinator | workers | the released course (``course_bundle``), by digest |
| ``paged_grading_payloads`` | coordinator | workers | one signed payload per job: a student's submission, seeds |
| ``paged_grading_events`` | workers | coordinator | "started", with the worker's name (progress, status) |
| ``paged_grading_results`` | workers | coordinator | one signed, bounded result per try; its ``verdict`` |

Invariants: the coordinator is the only writer of payloads, bundles and verdicts; a worker only
inserts (events, results), never updates or deletes; nothing a worker inserts is trusted before
its MAC and its try (``coordinator``) are checked. Keeping the payloads out of procrastinate's
``args`` keeps its job rows small: the queries that list or fetch jobs never carry a submission.
The queue should be a database of its own (not the gradebook's): a worker needs the queue's
credential, and nothing of the gradebook.
"""

from __future__ import annotations

import logging
import re

TASK = "paged_grading.grade_student"

OUR_TABLES = """
CREATE TABLE IF NOT EXISTS paged_grading_bundles (
    digest text PRIMARY KEY,
    bundle bytea NOT NULL,
    made_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS paged_grading_payloads (
    job_key text PRIMARY KEY,
    run_id text NOT NULL,
    payload bytea NOT NULL,
    mac text NOT NULL,
    made_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS paged_grading_events (
    id bigserial PRIMARY KEY,
    job_key text NOT NULL,
    job_id bigint,
    worker text NOT NULL,
    kind text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS paged_grading_results (
    id bigserial PRIMARY KEY,
    job_key text NOT NULL,
    job_id bigint,
    worker text NOT NULL,
    result bytea NOT NULL,
    mac text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    verdict text
);
CREATE INDEX IF NOT EXISTS paged_grading_results_open ON paged_grading_results (id) WHERE verdict IS NULL;
CREATE INDEX IF NOT EXISTS paged_grading_events_key ON paged_grading_events (job_key);
"""


ENGINE_PINS = "procrastinate==3.10.0 'psycopg[binary]==3.3.9' tqdm==4.70.1"


def require_engine() -> None:
    """Say what to install when the engine is missing (it is instructor-side only, never a learner's)."""
    try:
        import procrastinate  # noqa: F401
        import psycopg  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError as error:
        raise SystemExit(
            f"grading on many machines needs procrastinate, psycopg and tqdm ({error.name} is missing): "
            f".venv/bin/pip install {ENGINE_PINS} (pinned in requirements/contributor.txt), on the coordinator "
            "and on every worker"
        ) from None


def queue_name(course_id: str) -> str:
    """One queue per course: workers of another course on the same database never take its jobs."""
    return "paged-grading-" + re.sub(r"[^A-Za-z0-9_-]", "_", course_id)


def conninfo(url: str) -> str:
    """A libpq connection string from the URL the instructor gives (SQLAlchemy's ``+driver`` dropped).

    A password belongs in ``~/.pgpass`` (or ``PGPASSFILE``), never in the URL: the URL shows in ``ps``.
    """
    if not re.match(r"postgres(ql)?(\+\w+)?://", url):
        raise SystemExit(
            f"--queue {url!r}: expected a PostgreSQL URL such as postgresql://grader@dbhost/grading_queue "
            "(procrastinate keeps the queue in PostgreSQL; see autograde/README.md)"
        )
    return re.sub(r"^postgres(ql)?\+\w+://", "postgresql://", url)


def make_app(url: str):
    """The procrastinate app on the queue's database (its connection pool checks each connection
    before use, so a restarted server is reconnected to, not failed on)."""
    require_engine()
    import procrastinate

    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo(url), min_size=1, max_size=4))


async def prepare(app) -> None:
    """procrastinate's schema (once per database) and the course's tables: the coordinator's job."""
    if not await app.check_connection_async():
        await app.schema_manager.apply_schema_async()
    for statement in OUR_TABLES.split(";"):
        if statement.strip():
            await app.connector.execute_query_async(statement)


async def ready(app) -> bool:
    """Whether a coordinator has prepared this database (a worker waits until one has)."""
    if not await app.check_connection_async():
        return False
    row = await app.connector.execute_query_one_async("SELECT to_regclass('paged_grading_results') AS t")
    return row["t"] is not None


class _PoolOutages(logging.Handler):
    def __init__(self, on_away) -> None:
        super().__init__(logging.WARNING)
        self.on_away = on_away

    def emit(self, record: logging.LogRecord) -> None:
        if "connect" in record.getMessage():
            self.on_away()


def watch_outages(on_away) -> None:
    """While the database is away, psycopg's pool waits for it (up to 30 s per query) and logs a
    warning per failed connection; ``on_away()`` is called instead, for one plain line."""
    pool_logger = logging.getLogger("psycopg.pool")
    pool_logger.handlers = [_PoolOutages(on_away)]
    pool_logger.propagate = False


def is_unreachable(error: BaseException) -> bool:
    """A database that is down or restarting (retry later), as opposed to a bug (raise)."""
    import psycopg
    import psycopg_pool

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, (psycopg.OperationalError, psycopg_pool.PoolTimeout, ConnectionError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def live_lines(url: str, course_id: str) -> list[str]:
    """``course.py status --queue URL``: the course's jobs by state, and the workers' last heartbeats."""
    import asyncio

    async def read() -> list[str]:
        app = make_app(url)
        async with app.open_async():
            if not await ready(app):
                return [f"{url}: no course has been sent to this queue yet"]
            queue = queue_name(course_id)
            stats = list(await app.job_manager.list_queues_async(queue=queue)) or [{}]
            counts = ", ".join(
                f"{stats[0].get(state, 0)} {state}" for state in ("todo", "doing", "succeeded", "failed")
            )
            lines = [f"queue {queue}: {counts} job(s)"]
            workers = await app.connector.execute_query_all_async(
                "SELECT id, EXTRACT(EPOCH FROM now() - last_heartbeat) AS age FROM procrastinate_workers ORDER BY id"
            )
            lines += [f"  worker {w['id']}: last heartbeat {float(w['age']):.0f} s ago" for w in workers]
            return lines or ["no worker has a heartbeat in this database"]

    return asyncio.run(read())


# --- The coordinator's housekeeping in the queue's database -------------------------------------------


async def publish_bundle(app, digest: str, data: bytes) -> None:
    """The released course, once per digest: every job of the run names it, workers fetch it once."""
    await app.connector.execute_query_async(
        "INSERT INTO paged_grading_bundles (digest, bundle) VALUES (%(d)s, %(b)s) ON CONFLICT (digest) DO NOTHING",
        d=digest,
        b=data,
    )


async def end_earlier_runs(app, queue: str) -> None:
    """Jobs of this course left queued or running by an earlier coordinator that stopped: cancelled
    (queued) or aborted (running), their payloads removed; their results are never this run's."""
    manager = app.job_manager
    for status, abort in (("todo", False), ("doing", True)):
        for job in await manager.list_jobs_async(queue=queue, status=status):
            try:
                await manager.cancel_job_by_id_async(job.id, abort=abort, delete_job=not abort)
            except Exception as error:  # noqa: BLE001 - it ended meanwhile
                if is_unreachable(error):
                    raise
            await app.connector.execute_query_async(
                "DELETE FROM paged_grading_payloads WHERE job_key = %(k)s", k=str(job.task_kwargs.get("job_key"))
            )


async def clean_up_run(app, queue: str, run_id: str, job_keys: list[str]) -> None:
    """What one run put in the queue's database, and the results it judged, removed; and the queue's
    finished jobs."""
    connector = app.connector
    await connector.execute_query_async("DELETE FROM paged_grading_payloads WHERE run_id = %(r)s", r=run_id)
    await connector.execute_query_async("DELETE FROM paged_grading_results WHERE job_key = ANY(%(k)s)", k=job_keys)
    await connector.execute_query_async("DELETE FROM paged_grading_events WHERE job_key = ANY(%(k)s)", k=job_keys)
    await app.job_manager.delete_old_jobs(
        nb_hours=0, queue=queue, include_failed=True, include_cancelled=True, include_aborted=True
    )
