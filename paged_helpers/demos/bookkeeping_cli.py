"""The command line the demos that run no model share (``tiers``, ``route``).

Those demos serve the learner's caches on bookkeeping-shaped pools and take their times from the
stated cost model (``cost_model.py``), so they end their arguments the same way: the workload's
``--seed``, ``--no-model`` (accepted so that a ``run.py radix`` command line works unchanged, and
ignored: no model runs), the cost model's arguments and ``--impl``. Their integer sizes must be
positive, checked before anything loads.
"""

from __future__ import annotations

import argparse

from .cost_model import add_cost_arguments
from .implementation import add_impl_argument


def add_bookkeeping_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments after a bookkeeping demo's own: --seed, --no-model, the cost model's, --impl."""
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument(
        "--no-model", action="store_true", help="accepted for symmetry with run.py radix: this demo never runs a model"
    )
    add_cost_arguments(parser)
    add_impl_argument(parser)


def require_positive_integers(args: argparse.Namespace, names: tuple[str, ...]) -> None:
    """SystemExit naming the first of ``args.<name>`` below 1, as its option (``block_size``: --block-size)."""
    for name in names:
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
