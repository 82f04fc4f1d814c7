"""One check per graded capability; a module per notebook, or a folder where a notebook needs several.

Each check takes the learner's function or class, prints one line when it is right and raises
``CheckFailed`` (an AssertionError) with a message naming the scenario, the expected and the
actual values, and a hint. Each check declares, in its ``@check(...)`` decorator, the notebook
that calls it and the learner's definition it verifies; ``REGISTRY`` collects them, and every
table of checks (this package's names, the course map, the no-solutions test) is derived from it.

    python -m paged_helpers.checks        # prints the table: check, notebook, what it verifies

A failing check's hint names the idea first; ``more_hint()`` (or the same failure again) prints
the concrete change.

Importing this package imports every check module (a few milliseconds; none imports triton).
"""

import pkgutil
from importlib import import_module

from .registry import REGISTRY, CheckInfo
from .speaking.failure import CheckFailed, NotImplementedYet, more_hint

# Every module of the checks, subpackages included (a notebook with several modules has a folder).
for _module in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
    if not any(part.startswith("_") for part in _module.name.split(".")):
        import_module(_module.name)
del _module
# Course order: by notebook, then in the order each module defines its checks.
_in_course_order = sorted(REGISTRY.items(), key=lambda item: item[1].notebook)
REGISTRY.clear()
REGISTRY.update(_in_course_order)
del _in_course_order

globals().update({name: info.function for name, info in REGISTRY.items()})

__all__ = ["CheckFailed", "CheckInfo", "NotImplementedYet", "REGISTRY", "more_hint", *REGISTRY]


def for_notebook(notebook: str) -> list[CheckInfo]:
    """The checks that notebook ``notebook`` (its file stem) calls, in registration order."""
    return [info for info in REGISTRY.values() if info.notebook == notebook]


def table() -> str:
    """A plain-text table of every check: name, notebook, what it verifies."""
    rows = [
        (name, info.notebook, info.builds + ("" if info.graded else " (optional)")) for name, info in REGISTRY.items()
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )
