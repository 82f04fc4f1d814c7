"""Where a demo's classes come from: ``--impl DIR``, the notebooks to load them from.

Every demo that runs the learner's code uses these two functions, so ``run.py cow --impl
~/my-course`` and ``run.py engine --impl ~/my-course`` mean the same thing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..notebook_loader import load_from_notebook

# The instructor's notebooks, when this package is used from a checkout of the course.
COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def add_impl_argument(parser: argparse.ArgumentParser, default: Path | None = COURSE_NOTEBOOKS) -> None:
    where = "the course's notebooks/" if default == COURSE_NOTEBOOKS else "none"
    parser.add_argument(
        "--impl",
        metavar="DIR",
        type=Path,
        default=default,
        help=f"folder of the notebooks to take the implementation from (default: {where})",
    )


def load_impl(args: argparse.Namespace, notebook: str, names: str | list[str]):
    """The learner's definitions ``names`` from ``notebook`` in the ``--impl`` folder."""
    folder = Path(args.impl).expanduser()
    if not folder.is_dir():
        raise SystemExit(f"--impl {folder}: no such folder (it should hold your NN_*.ipynb notebooks)")
    return load_from_notebook(notebook, names, search=[folder], allow_unimplemented=False)
