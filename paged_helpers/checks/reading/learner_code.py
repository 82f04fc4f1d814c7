"""The one door from the checks to the learner's code: nothing else in ``checks`` imports
``learner_view`` or ``running`` (an import-linter contract in pyproject.toml holds it).

When a notebook is graded, the learner's objects live in another process and a check holds
stand-ins for them (``learner_view``); in the lab they are the objects themselves. A check does
not care which: it reads and calls through what this module gives, and how many requests that
costs is this module's business.

    reading      ``read_ahead`` (the attributes a check is about to read, fetched together),
                 ``plain`` (a copy of a learner's value), ``learner_type`` and ``class_name``,
                 ``is_remote``, ``remote_type`` and ``remote_value_like`` for the strict readers
    writing      ``assign`` (a write into a learner's pool, as the model would make it),
                 ``transfer`` (a course dataclass handed to the learner's engine),
                 ``create_holding`` (a sequence created over shared full blocks)
    subclassing  ``subclass`` (a watching subclass of the learner's class, made where it lives)
    running      ``run_apart`` (a launcher run in a child process with a time limit: ``Outcome``),
                 ``graded_run`` (decided before any learner code runs), ``spawned``
    kernels      the learner's ``@triton.jit`` kernel judged in the checker's own process:
                 ``learner_kernel``, ``KernelProcess``, ``compile_launches`` and their types
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...learner_view.access import assign, create_holding, transfer
from ...learner_view.launcher_runs import run_apart
from ...learner_view.prefetch import prefetch
from ...learner_view.remote import is_remote, learner_type, plain, remote_type, remote_value_like
from ...learner_view.subclass import subclass
from ...running import spawned
from ...running.gpu_compile import TARGETS, CompileResult, Launch, compile_launches, explain_failure, timed_out
from ...running.graded import graded_run
from ...running.isolated import Outcome
from ...running.kernel_process import KernelAnswer, KernelProcess, KernelProcessFailed
from ...running.kernel_source import KERNEL_CELL_RULES, KernelModule, KernelSourceRefused
from ...running.learner_kernel import KernelUnfinished, learner_kernel

__all__ = [
    "KERNEL_CELL_RULES",
    "TARGETS",
    "CompileResult",
    "KernelAnswer",
    "KernelModule",
    "KernelProcess",
    "KernelProcessFailed",
    "KernelSourceRefused",
    "KernelUnfinished",
    "Launch",
    "Outcome",
    "assign",
    "class_name",
    "compile_launches",
    "create_holding",
    "explain_failure",
    "graded_run",
    "is_remote",
    "learner_kernel",
    "learner_type",
    "plain",
    "read_ahead",
    "remote_type",
    "remote_value_like",
    "run_apart",
    "spawned",
    "subclass",
    "timed_out",
    "transfer",
]


def read_ahead(*objects: Any, names: Sequence[str], follow: Sequence[str] = ()) -> None:
    """Say which attributes of ``objects`` the check reads next (and, through ``follow``, of the
    objects they hold): where the objects live in the learner's process they come in one request,
    and each read until the learner's code runs again is answered here. Changes no answer."""
    prefetch(*objects, names=names, follow=follow)


def class_name(value: Any) -> str:
    """The ``__name__`` of the learner's value's class, read with type's own descriptor, so that no
    code of the learner's (a metaclass, a property) answers."""
    if is_remote(value):
        return remote_type(value)
    return type.__dict__["__name__"].__get__(type(value))
