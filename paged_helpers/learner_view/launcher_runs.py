"""A call of a learner's launcher in a child process, here or in the learner's own process.

A launcher check asks ``run_apart(launcher, args, limit)`` and gets an ``Outcome``. In
the lab the launcher is the learner's own function and runs here, in a forked child
(``running.isolated``): a segfault or a hang becomes a message. When grading it is a ``Remote``:
the same run happens in the learner's process (``serve_run`` there, through the protocol's ``run``
operation), and only the outcome crosses, as plain data. Kernels are not run this way: a kernel
check launches the kernel itself (``running.kernel_process``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..running.isolated import Outcome, run_isolated
from .remote import is_remote, remote_peer

__all__ = ["run_apart"]


def run_apart(launcher: Callable, args: tuple, time_limit: float) -> Outcome:
    """``launcher(*args)`` in a child process, here or in the learner's process; what happened."""
    if not is_remote(launcher):
        return run_isolated(launcher, args, time_limit)
    data = remote_peer(launcher).request("run", name="plain", target=launcher, args=[list(args), time_limit], kwargs={})
    return outcome_from_data(data)


# -- the learner's end of ``run`` -------------------------------------------------------------


def serve_run(kind: Any, launcher: Any, *args: Any) -> Any:
    """What the learner's process answers to a ``run`` request (see ``operations``)."""
    if kind != "plain" or len(args) != 2:
        raise ValueError(f"no such run: {kind!r}")
    call_args, time_limit = args
    return outcome_to_data(run_isolated(launcher, tuple(call_args), float(time_limit)))


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
