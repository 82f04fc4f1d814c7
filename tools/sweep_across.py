"""Sweep random 31-bit seeds through the hidden calls the way the clean run makes them: across the boundary.

    .venv/bin/python tools/sweep_across.py --seeds 8                       # every notebook's hidden calls
    .venv/bin/python tools/sweep_across.py 08_continuous_batching --seeds 20
    .venv/bin/python tools/sweep_across.py 10_radix_cache --seed 1234567   # replay one seed

``tools/sweep_seeds.py`` runs the checks on the instructor's solutions in one process. The grader's
clean run does not: the checks run in the checker on ``Remote`` stand-ins, and the learner's
definitions in another process (``learner_view.host``), every read and call a message in plain data.
A check that reads differently across that wire (a list copied instead of shared, a container read
ahead, an exception rebuilt on this side) could fail right work only when graded. This replays each
notebook's hidden calls as ``preprocessors.second_opinion`` parses them from the instructor's test cells, each with
the seeds drawn here in place of the secret one, one learner process per hidden call (unsandboxed,
the whole package: the sandbox changes what the learner's process may touch, not what crosses).

Exit status 1 when any call failed a seed; each failing seed is listed with the first line of its
message and the command that replays it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import nbformat  # noqa: E402
from seeded_checks import SEED_SPACE, draw_seeds  # noqa: E402

from paged_helpers.checks import REGISTRY  # noqa: E402
from paged_helpers.learner_view.connection import LearnerProcess  # noqa: E402

SECONDS_PER_SEED = 120.0  # the learner process's deadline grows by this for each seed it serves


def hidden_calls(notebook: Path) -> list[tuple[str, dict]]:
    """(grade_id, call) for each hidden call with a seed in the notebook's autograded test cells."""
    from paged_grading.preprocessors.guard import is_autograded_test
    from paged_grading.preprocessors.second_opinion import check_calls

    found = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        if is_autograded_test(cell):
            for call in check_calls(cell.source):
                if call["hidden"] and "seed" in call["kwargs"]:
                    found.append((cell.metadata["nbgrader"]["grade_id"], call))
    return found


def sweep_call(notebook: Path, call: dict, seeds: list[int]) -> dict[int, str]:
    """Run ``call`` across the boundary once per seed; the first line of each failure, by seed."""
    host = [sys.executable, "-m", "paged_helpers.learner_view.host", str(notebook)]
    one_thread = {**os.environ, "OMP_NUM_THREADS": "1"}  # as the grader runs the learner's process
    failures = {}
    with LearnerProcess(host, time_limit=SECONDS_PER_SEED * len(seeds), cwd=str(ROOT), env=one_thread) as learner:
        args = [learner.name(value) if kind == "name" else value for kind, value in call["args"]]
        for seed in seeds:
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # the pass lines: this table says it
                    REGISTRY[call["check"]].function(*args, **{**call["kwargs"], "seed": seed})
            except Exception as failure:  # noqa: BLE001 - a failing seed is the finding
                failures[seed] = f"{type(failure).__name__}: {str(failure).strip().splitlines()[0][:160]}"
    return failures


def main(argv: list[str] | None = None) -> int:
    every = sorted(path.stem for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help=f"among: {', '.join(every)}")
    parser.add_argument("--seeds", type=int, default=4, help="random seeds per hidden call (default 4)")
    parser.add_argument("--seed", type=int, help="one given seed instead of random ones (a replay)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.notebooks) - set(every))
    if unknown:
        parser.error(f"no such notebook: {', '.join(unknown)}")
    if args.seed is not None and not 0 <= args.seed < SEED_SPACE:
        parser.error(f"--seed must be in [0, {SEED_SPACE})")
    failed = 0
    print(f"{'notebook':28} {'cell':24} {'check':26} {'seeds':>5} {'failed':>6} {'seconds':>8}")
    for name in args.notebooks or every:
        path = ROOT / "notebooks" / f"{name}.ipynb"
        for grade_id, call in hidden_calls(path):
            seeds = [args.seed] if args.seed is not None else draw_seeds(args.seeds)
            start = time.perf_counter()
            failures = sweep_call(path, call, seeds)
            print(
                f"{name:28} {grade_id[:24]:24} {call['check'][:26]:26} {len(seeds):5d} {len(failures):6d} "
                f"{time.perf_counter() - start:8.1f}",
                flush=True,
            )
            for seed, message in failures.items():
                print(f"    seed {seed}: {message}")
                print(f"    replay: .venv/bin/python tools/sweep_across.py {name} --seed {seed}")
            failed += len(failures)
    print(f"{failed} failing seed(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
