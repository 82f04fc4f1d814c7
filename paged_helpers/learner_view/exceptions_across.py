"""Exceptions across the wire: described as data on the end that raised them, rebuilt by name on the other.

``PeerGone`` and ``ProtocolBroken`` are this end's own: the other end died, hung, or sent what the
protocol does not allow. ``LearnerError`` is an exception the other end raised, rebuilt here (never
unpickled); ``RaisedHere`` remembers what this end raised while serving, so that one coming back
through the other end's code is raised again as itself.
"""

from __future__ import annotations

import builtins
import traceback
from typing import Any

__all__ = ["LearnerError", "PeerGone", "ProtocolBroken", "RaisedHere", "describe_error", "rebuild_error"]


class PeerGone(BaseException):
    """The other end died, hung past the deadline, or broke the protocol.

    A BaseException, like KeyboardInterrupt: a check's `except Exception` around a learner's call must
    not turn a dead or lying process into an ordinary wrong answer; the checker ends the cell on it.
    """


class ProtocolBroken(PeerGone):
    """The other end sent what the protocol does not allow: a garbled, forged or out-of-turn message."""


class LearnerError(Exception):
    """An exception raised on the other end, rebuilt here by name (a subclass of the builtin of that
    name where there is one, so ``except ValueError`` and ``hasattr`` work as in one process)."""

    remote_type = ""
    remote_traceback = ""
    remote_chain: tuple[str, ...] = ()
    remote_origin: int | None = None  # the other end's number for it, when it raised it there


# One class per name the other end reported, made once: ``except`` clauses see the same class each time.
_ERROR_CLASSES: dict[str, type] = {}


def _builtin_exception(name: str) -> type | None:
    value = getattr(builtins, name, None)
    return value if isinstance(value, type) and issubclass(value, Exception) else None


def _error_class(name: str) -> type:
    if name not in _ERROR_CLASSES:
        base = _builtin_exception(name)
        bases = (LearnerError, base) if base is not None and base is not Exception else (LearnerError,)
        try:
            _ERROR_CLASSES[name] = type(name, bases, {})
        except TypeError:  # a builtin that cannot be a second base (layout conflict)
            _ERROR_CLASSES[name] = type(name, (LearnerError,), {})
    return _ERROR_CLASSES[name]


def rebuild_error(error: dict) -> BaseException:
    """The exception ``error`` (a ``describe_error`` dict from the other end) describes, every field bounded."""
    name = error.get("type") if type(error.get("type")) is str else "Exception"
    name = name if name.isidentifier() and len(name) < 80 else "Exception"
    message = str(error.get("message", ""))[:4000]
    klass = _error_class(name)
    try:
        exception = klass(message)
    except Exception:  # noqa: BLE001 - an exception class that insists on other arguments
        exception = LearnerError(message)
    exception.remote_type = name
    exception.remote_traceback = str(error.get("traceback", ""))[:8000]
    chain = error.get("chain")
    exception.remote_chain = tuple(str(c)[:80] for c in chain[:10]) if type(chain) is list else ()
    origin = error.get("origin")
    exception.remote_origin = origin if type(origin) is int and error.get("origin_side") == "mine" else None
    return exception


def describe_error(error: BaseException) -> dict:
    """``error`` as data: its type's name, message, traceback and chain of causes (a rebuilt one keeps
    the words of the end that raised it)."""
    chain, cause = [], error
    while cause is not None and len(chain) < 10:
        chain.append(type(cause).__name__)
        cause = cause.__cause__ or cause.__context__
    if isinstance(error, LearnerError):  # passed through from the other end: keep its own words
        return {
            "type": error.remote_type,
            "message": str(error),
            "traceback": error.remote_traceback,
            "chain": list(error.remote_chain) or chain,
        }
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:  # noqa: BLE001 - a learner's exception whose str() raises
        text = ""
    try:
        message = str(error)
    except Exception:  # noqa: BLE001
        message = "(an exception whose message could not be read)"
    return {"type": type(error).__name__, "message": message, "traceback": text[-8000:], "chain": chain}


class RaisedHere:
    """The exceptions one end raised while serving, by its own number (owned by that end's ``Peer``).

    Each error reply says whose number it carries (``origin_side``): ``mine`` for one raised by the
    end that replies, ``yours`` for one of the asker's own passing back through the other's code
    (a hook's CheckFailed through the learner's engine), which the asker raises again as itself.
    """

    def __init__(self) -> None:
        self.by_number: dict[int, BaseException] = {}

    def describe(self, error: BaseException) -> dict:
        """``describe_error``, numbered: the asker's own exception by its number, another by a new one here."""
        description = describe_error(error)
        if isinstance(error, LearnerError) and error.remote_origin is not None:
            description["origin"], description["origin_side"] = error.remote_origin, "yours"
        else:
            number = len(self.by_number) + 1
            self.by_number[number] = error
            description["origin"], description["origin_side"] = number, "mine"
        return description

    def rebuild(self, error: dict) -> BaseException:
        """The exception an error reply names: this end's own again, or the other end's rebuilt."""
        origin: Any = error.get("origin")
        if type(origin) is int and origin in self.by_number and error.get("origin_side") == "yours":
            return self.by_number[origin]
        return rebuild_error(error)
