"""Calls of a learner's launcher that need more than a call: under the launch watcher, or compiled.

A kernel check asks ``run_watched("kernel", launcher, args, limit)`` and gets an ``Outcome``. In
the lab the launcher is the learner's own function and runs here, in a forked child
(``running.isolated``). When grading it is a ``Remote``: the same run happens in the learner's
process (``run_here`` there, through the protocol's ``run`` operation), and only the outcome
crosses, as plain data. The GPU compile (``compile_for_gpu``) runs on the checking side: the
learner's process reports the launches it made (kernel names, argument types, constexprs: a
``capture`` run), and the kernels' source is read from the notebook as text
(``running.kernel_source``: validated, so compiling it runs nothing of the learner's), never
taken from the learner's process, which compiles nothing.

The kinds of run: ``kernel`` (``launch_watch.watched``: result, launch counts, guard bands, which
tensor the kernels wrote), ``warmup`` (``launch_watch.watched_call`` with the outputs' whole
buffers), ``plain`` (a bare call in a child) and ``capture`` (the launches described for a compile,
none of them run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..running.gpu_compile import CompileResult, Launch, capture_launches, compile_launches
from ..running.isolated import Outcome, run_isolated
from ..running.kernel_source import kernel_module_from_notebook
from ..running.launch_watch import watched, watched_call
from .remote import is_remote, remote_peer

__all__ = ["compile_for_gpu", "run_here", "run_watched"]

KINDS = ("kernel", "warmup", "plain", "capture")


def run_here(kind: str, launcher: Callable, args: tuple, time_limit: float, buffers: tuple = ()) -> Outcome:
    if kind == "kernel":
        return run_isolated(watched(launcher), args, time_limit)
    if kind == "warmup":
        return run_isolated(watched_call(launcher, args, tuple(buffers)), (), time_limit)
    if kind == "plain":
        return run_isolated(launcher, args, time_limit)
    if kind == "capture":
        return run_isolated(lambda *a: capture_launches(launcher, a), args, time_limit)
    raise ValueError(f"no such kind of run: {kind!r}")


def run_watched(kind: str, launcher: Callable, args: tuple, time_limit: float, buffers: tuple = ()) -> Outcome:
    """``launcher(*args)`` run as ``kind`` says, here or in the learner's process; what happened."""
    if not is_remote(launcher):
        return run_here(kind, launcher, args, time_limit, buffers)
    data = remote_peer(launcher).request(
        "run", name=kind, target=launcher, args=[list(args), time_limit, list(buffers)], kwargs={}
    )
    outcome = outcome_from_data(data)
    if kind == "capture" and outcome.kind == "returned":
        outcome = Outcome("returned", value=[launch_from_data(item) for item in _list(outcome.value)])
    return outcome


def compile_for_gpu(launcher: Callable, launches: list[Launch], targets: tuple[int, ...]) -> list[CompileResult]:
    """``launches`` compiled for ``targets``, here. A ``Remote`` launcher's launches are compiled from
    the kernels of the notebook its process loaded, read as text (``kernel_module_from_notebook``):
    of what that process reported, only the kernels' names and arguments are used.

    Raises ``KernelSourceRefused`` (a kernel's module holds what compiling it would run) and
    RuntimeError (no compiler here)."""
    if not is_remote(launcher):
        return compile_launches(launches, targets)
    notebook = remote_peer(launcher).notebook
    if notebook is None:
        raise RuntimeError("no notebook to read the kernels' source from")
    module = kernel_module_from_notebook(notebook, sorted({launch.kernel for launch in launches}))
    return compile_launches([launch.with_source(module.source) for launch in launches], targets)


# -- the learner's end of ``run`` -------------------------------------------------------------


def serve_run(kind: Any, launcher: Any, *args: Any) -> Any:
    """What the learner's process answers to a ``run`` request (see ``peer``)."""
    if kind not in KINDS:
        raise ValueError(f"no such kind of run: {kind!r}")
    call_args, time_limit, buffers = args
    outcome = run_here(kind, launcher, tuple(call_args), float(time_limit), tuple(buffers))
    if kind == "capture" and outcome.kind == "returned":
        outcome = Outcome("returned", value=[launch_to_data(launch) for launch in outcome.value])
    return outcome_to_data(outcome)


# -- plain data of the runners' records --------------------------------------------------------

_OUTCOME_TEXT = ("kind", "error_type", "error_message", "error_traceback", "signal_name", "printed")


def _list(value: Any) -> list:
    if type(value) is not list:
        raise TypeError("the learner's process answered a run with something that is not a list")
    return value


def outcome_to_data(outcome: Outcome) -> dict:
    return {
        **{name: getattr(outcome, name) for name in _OUTCOME_TEXT},
        "value": outcome.value,
        "error_chain": list(outcome.error_chain),
    }


def outcome_from_data(data: Any) -> Outcome:
    if type(data) is not dict or any(type(data.get(name)) is not str for name in _OUTCOME_TEXT):
        raise TypeError("the learner's process answered a run with something that is not an outcome")
    if data["kind"] not in ("returned", "raised", "crashed", "timed out"):
        raise TypeError("an outcome of a kind that does not exist")
    chain = tuple(str(item)[:80] for item in _list(data.get("error_chain", []))[:10])
    return Outcome(
        **{name: data[name][:20000] for name in _OUTCOME_TEXT},
        value=data.get("value"),
        error_chain=chain,
    )


def launch_to_data(launch: Launch) -> dict:
    return {
        "kernel": launch.kernel,
        "module_source": launch.module_source,
        "args": list(launch.args),
        "kwargs": [list(pair) for pair in launch.kwargs],
    }


def _descriptor(value: Any) -> dict:
    if type(value) is not dict or len(value) != 1 or not set(value) <= {"tensor", "value"}:
        raise TypeError("a launch argument that is not a descriptor")
    if "tensor" in value and type(value["tensor"]) is not str:
        raise TypeError("a tensor argument whose dtype is not a name")
    if "value" in value and type(value["value"]) not in (bool, int, float, str, type(None)):
        raise TypeError("a launch argument that is not a number, a bool, a string or None")
    return value


def launch_from_data(data: Any) -> Launch:
    if type(data) is not dict or type(data.get("kernel")) is not str or type(data.get("module_source")) is not str:
        raise TypeError("a launch record that is not one")
    kwargs = []
    for pair in _list(data.get("kwargs")):
        if type(pair) is not list or len(pair) != 2 or type(pair[0]) is not str:
            raise TypeError("a launch keyword that is not a (name, descriptor) pair")
        kwargs.append((pair[0], _descriptor(pair[1])))
    return Launch(
        kernel=data["kernel"],
        module_source=data["module_source"],
        args=tuple(_descriptor(item) for item in _list(data.get("args"))),
        kwargs=tuple(kwargs),
    )
