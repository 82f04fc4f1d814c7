"""Sweep random 31-bit seeds through every seeded check on the instructor's solutions.

The grader's clean run draws each hidden call's seed from [0, 2**31); a right solution must pass
all of them. This runs many random seeds per check and prints a table:

    .venv/bin/python tools/sweep_seeds.py --seeds 200
    .venv/bin/python tools/sweep_seeds.py --seeds 100 --checks check_radix_logits
    .venv/bin/python tools/sweep_seeds.py --seeds 200 --slow-seeds 20     # fewer for the model and kernel checks
    .venv/bin/python tools/sweep_seeds.py --seed 1234567 --checks check_radix_logits   # replay one seed

Exit status 1 when any check failed a seed; every failing seed is listed with the first lines of
its message. The list of checks and how each is called comes from tools/seeded_checks.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seeded_checks import draw_seeds, seeded_checks, sweep  # noqa: E402


def _progress(seed: int, message: str | None) -> None:
    """A dot per passing seed, a line per failing one: a long sweep shows where it is."""
    if message is None:
        print(".", end="", flush=True)
    else:
        print(f"\n  seed {seed} failed: {message.splitlines()[0]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    checks = seeded_checks()
    names = [check.name for check in checks]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="random seeds per check (default 200)")
    parser.add_argument("--seed", type=int, action="append", default=[], help="run this seed (repeatable) instead")
    parser.add_argument("--checks", nargs="+", choices=names, metavar="NAME", help=f"among: {', '.join(names)}")
    parser.add_argument(
        "--slow-seeds",
        type=int,
        help="seeds per check whose first seed took over a second (model, kernels; default --seeds)",
    )
    args = parser.parse_args(argv)
    chosen = [check for check in checks if not args.checks or check.name in args.checks]

    rows, failed = [], []
    for check in chosen:
        seeds = args.seed or draw_seeds(args.seeds)
        print(f"{check.name}: up to {len(seeds)} seeds ...", flush=True)
        result = sweep(check, seeds, slow_count=None if args.seed else args.slow_seeds, on_seed=_progress)
        rows.append(result)
        failed += [(check, seed, message) for seed, message in result.failures.items()]
        print()
        print(
            f"{check.name}: {len(result.failures)} of {len(result.seeds)} failed in {result.seconds:.1f} s"
            + (f"; failing seeds {sorted(result.failures)}" if result.failures else ""),
            flush=True,
        )

    print()
    print(f"{'check':<26} {'seeds':>6} {'failures':>9} {'seconds':>9}  failing seeds")
    for result in rows:
        seeds = " ".join(str(seed) for seed in sorted(result.failures)) or "-"
        print(
            f"{result.check.name:<26} {len(result.seeds):>6} {len(result.failures):>9} {result.seconds:>9.1f}  {seeds}"
        )
    for check, seed, message in failed:
        print(f"\n{check.describe(seed)} failed:")
        print("\n".join("    " + line for line in message.splitlines()[:6]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
