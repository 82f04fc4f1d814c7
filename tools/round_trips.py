"""Count the learner view's round trips: requests per check, per notebook, and where they come from.

    .venv/bin/python tools/round_trips.py                        # every notebook's test cells
    .venv/bin/python tools/round_trips.py 05_prefix_caching 10_radix_cache --top 15
    .venv/bin/python tools/round_trips.py --json counts.json     # the table as data too

Each test cell of the instructor notebooks is replayed as the clean run replays it
(``second_opinion.check_calls``, hidden calls with one fixed secret-like seed): the checks run in
this process on ``Remote`` stand-ins, the learner's definitions in a fresh process per cell
(``learner_view.host``, unsandboxed, the whole package), each process on one torch thread. For
every check it prints the requests this side sent, the requests the learner's side sent back (a
hook, the model), CPU seconds of both processes (the learner's without its start: torch's import,
the notebook's load) and the check's wall seconds; with ``--top N`` the N places in the checks that
sent the most requests (file:line of the first frame outside the learner view, with the operation).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

# One thread each, as the grader's sandbox gives the learner's process: CPU seconds then measure
# work, not threads spinning on a shared machine.
os.environ["OMP_NUM_THREADS"] = "1"
ROOT = Path(__file__).resolve().parent.parent

import nbformat  # noqa: E402

from paged_helpers.checks import REGISTRY  # noqa: E402
from paged_helpers.learner_view.connection import LearnerProcess  # noqa: E402
from paged_helpers.learner_view.peer import Peer  # noqa: E402

SEED = 1_234_567_891
VIEW = str(ROOT / "paged_helpers" / "learner_view")


def _cells(notebook: Path) -> list[tuple[str, list[dict]]]:
    from paged_grading.clean_run.secret_seeds import with_secret_seeds
    from paged_grading.preprocessors.guard import is_autograded_test
    from paged_grading.preprocessors.second_opinion import check_calls

    nb = nbformat.read(notebook, as_version=4)
    cells = []
    for cell in nb.cells:
        if is_autograded_test(cell):
            cells.append((cell.metadata["nbgrader"]["grade_id"], with_secret_seeds(check_calls(cell.source), SEED)))
    return cells


class Tally:
    """Requests counted on one peer (both directions), by the check's line that caused them."""

    def __init__(self, peer: Peer, top: bool):
        self.sent = 0
        self.served = 0
        self.places: collections.Counter = collections.Counter()
        self.top = top
        request, serve_one = peer.request, peer._serve_one

        def counted_request(op, **fields):
            self.sent += 1
            if self.top:
                self.places[(self._place(), op, str(fields.get("name"))[:24])] += 1
            return request(op, **fields)

        def counted_serve(message):
            self.served += 1
            return serve_one(message)

        peer.request, peer._serve_one = counted_request, counted_serve

    @staticmethod
    def _place() -> str:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith((VIEW, __file__)):
            frame = frame.f_back
        if frame is None:
            return "?"
        return f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _idle_learner_cpu(path: Path) -> float:
    """CPU seconds of a learner process that starts, loads the notebook and ends (subtracted below:
    the grader forks each cell's process from a zygote that imported torch once)."""
    before = _cpu(resource.RUSAGE_CHILDREN)
    with LearnerProcess([sys.executable, "-m", "paged_helpers.learner_view.host", str(path)], cwd=str(ROOT)):
        pass
    return _cpu(resource.RUSAGE_CHILDREN) - before


def run_notebook(name: str, top: bool) -> dict:
    path = ROOT / "notebooks" / f"{name}.ipynb"
    rows, places = [], collections.Counter()
    idle = _idle_learner_cpu(path)
    for grade_id, calls in _cells(path):
        for call in calls:
            host = [sys.executable, "-m", "paged_helpers.learner_view.host", str(path)]
            child_before = _cpu(resource.RUSAGE_CHILDREN)
            with LearnerProcess(host, time_limit=600, cwd=str(ROOT)) as learner:
                self_before, wall_before = _cpu(resource.RUSAGE_SELF), time.perf_counter()
                args = [learner.name(value) if kind == "name" else value for kind, value in call["args"]]
                tally = Tally(learner.peer, top)
                error = ""
                try:
                    REGISTRY[call["check"]].function(*args, **call["kwargs"])
                except Exception as failure:  # noqa: BLE001 - reported in the table
                    error = f"{type(failure).__name__}: {str(failure).splitlines()[0][:100]}"
                checker_cpu, wall = _cpu(resource.RUSAGE_SELF) - self_before, time.perf_counter() - wall_before
            rows.append(
                {
                    "notebook": name,
                    "cell": grade_id,
                    "check": call["check"] + (" (hidden)" if call["hidden"] else ""),
                    "sent": tally.sent,
                    "served": tally.served,
                    "checker_cpu_s": round(checker_cpu, 2),
                    "learner_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - child_before - idle, 2),
                    "wall_s": round(wall, 2),
                    "error": error,
                }
            )
            places.update(tally.places)
    return {"rows": rows, "places": places}


def main(argv: list[str] | None = None) -> int:
    every = sorted(path.stem for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help=f"among: {', '.join(every)}")
    parser.add_argument("--top", type=int, default=0, help="list the N places that sent the most requests")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.notebooks) - set(every))
    if unknown:
        parser.error(f"no such notebook: {', '.join(unknown)}")
    all_rows = []
    print(f"{'check':44} {'sent':>7} {'served':>7} {'chk cpu':>8} {'lrn cpu':>8} {'wall':>6}")
    for name in args.notebooks or every:
        result = run_notebook(name, args.top > 0)
        rows = result["rows"]
        all_rows += rows
        for row in rows:
            print(
                f"{row['check'][:44]:44} {row['sent']:7d} {row['served']:7d} {row['checker_cpu_s']:8.2f} "
                f"{row['learner_cpu_s']:8.2f} {row['wall_s']:6.2f} {row['error']}"
            )
        total = {key: sum(row[key] for row in rows) for key in ("sent", "served", "checker_cpu_s", "learner_cpu_s")}
        total["wall_s"] = sum(row["wall_s"] for row in rows)
        print(
            f"{'= ' + name:44} {total['sent']:7d} {total['served']:7d} {total['checker_cpu_s']:8.2f} "
            f"{total['learner_cpu_s']:8.2f} {total['wall_s']:6.2f}",
            flush=True,
        )
        for (place, op, what), count in result["places"].most_common(args.top):
            print(f"    {count:7d}  {op:9} {what:24} {place}")
    if args.json:
        Path(args.json).write_text(json.dumps(all_rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
