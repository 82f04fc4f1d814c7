"""The package as the learner's process sees it when grading: everything but what judges or answers.

``build(destination)`` writes a copy of ``paged_helpers`` without its checks, its references (the
gather-then-attend attention the kernels are compared with, the bug replays of ``checks.kernels.bugs``, the
expected answers of ``checks.radix.order``) and its demos (which import both). In their place stand modules of
the same names whose every attribute is ``unavailable``: a notebook's definitions that import a
check, a reference or a demo still load, and calling one says that it does not run here. The
grader mounts this copy where the package is installed in the learner's sandbox, so no file of a
check, a reference or a scenario exists there to be read or imported.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["WITHHELD", "build"]

# Sub-packages that judge, answer or import those that do.
WITHHELD = ("checks", "reference", "demos")

_STUB = '''"""Not in the learner's process while grading (see paged_helpers.learner_view.package_view)."""


class CheckFailed(AssertionError):
    pass


class NotImplementedYet(CheckFailed):
    pass


class Unavailable(RuntimeError):
    pass


class _Withheld:
    """Any use of it (a call, iterating it, indexing it, one of its attributes) says it is not here."""

    def __init__(self, name):
        self._name = name

    def _refuse(self, *args, **kwargs):
        raise Unavailable(f"{__name__}.{self._name} does not run in the learner's process while grading")

    __call__ = __iter__ = __getitem__ = __len__ = __contains__ = _refuse

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self._refuse()

    def __repr__(self):
        return f"<{__name__}.{self._name}, withheld while grading>"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Withheld(name)
'''


def build(destination: Path) -> Path:
    """Write the learner's view of the package into ``destination`` (a new folder); return it."""
    source = Path(__file__).resolve().parent.parent
    shutil.copytree(
        source,
        destination,
        ignore=lambda folder, names: [
            name for name in names if name == "__pycache__" or (Path(folder).resolve() == source and name in WITHHELD)
        ],
    )
    for package in WITHHELD:
        # Every module and sub-package keeps its name (checks.kernels.bugs, say), each a stub.
        (destination / package).mkdir()
        (destination / package / "__init__.py").write_text(_STUB)
        for module in sorted((source / package).rglob("*.py")):
            if "__pycache__" in module.parts:
                continue
            stub = destination / package / module.relative_to(source / package)
            stub.parent.mkdir(parents=True, exist_ok=True)
            if not (stub.parent / "__init__.py").exists():
                (stub.parent / "__init__.py").write_text(_STUB)
            stub.write_text(_STUB)
    return destination
