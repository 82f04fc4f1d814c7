"""Tries whose worker is gone: a worker silent for a lease, or a job that ended without a result.

procrastinate's workers send a heartbeat; ``get_stalled_jobs`` lists the jobs whose worker has sent
none for ``lease`` seconds (kill -9, a paused or cut-off machine). Each such job is marked failed in
procrastinate first, so that worker can never mark it done (its result, if it ever comes, is refused
by ``fencing``); then its try fails and the roster defers the next. A current try whose job ended
(succeeded, failed, cancelled or removed) is failed once that is seen on two checks in a row: its
result, if any, is judged between the two, so a result that is merely late is never lost to a race.
"""

from __future__ import annotations

from . import queue_db
from .roster import Roster


async def fail_lost_tries(app, queue: str, lease: float, roster: Roster) -> None:
    from procrastinate.jobs import Status

    manager = app.job_manager
    stalled = await manager.get_stalled_jobs(queue=queue, task_name=queue_db.TASK, seconds_since_heartbeat=lease)
    for job in stalled:
        try:  # fenced: that worker can no longer mark it done, and its result will be refused
            await manager.finish_job_by_id_async(job.id, status=Status.FAILED, delete_job=False)
        except Exception as error:  # noqa: BLE001 - it ended meanwhile
            if queue_db.is_unreachable(error):
                raise
        attempt = roster.by_job.get(job.id)
        if attempt is not None and roster.students[attempt.student].current is attempt:
            roster.try_failed(
                roster.students[attempt.student], attempt,
                f"try {attempt.number} on {attempt.started_by or 'a worker'}: the worker stopped answering "
                f"(no heartbeat for {lease:g} s); its job runs again elsewhere",
            )  # fmt: skip
    current = {s.current.job_id: s.current for s in roster.students.values() if s.current and not s.done}
    if not current:
        return
    rows = await app.connector.execute_query_all_async(
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
            roster.try_failed(
                roster.students[attempt.student], attempt,
                f"try {attempt.number} on {attempt.started_by or 'a worker'}: its job ended "
                f"({state or 'removed'}) without a result (the worker's output says why)",
            )  # fmt: skip
