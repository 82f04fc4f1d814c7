"""A clock that runs only while its engine is working.

The benchmark alternates steps of two engines in one process, so that whatever else the
machine is doing slows both alike; each engine's metrics read its own ``BusyClock``, which
adds up the time spent inside that engine's steps and nothing else.
"""

from __future__ import annotations

import time


class BusyClock:
    """Call it for the seconds accumulated so far; ``with clock:`` around the work it should count."""

    def __init__(self) -> None:
        self.total = 0.0
        self._since: float | None = None

    def __call__(self) -> float:
        running = time.perf_counter() - self._since if self._since is not None else 0.0
        return self.total + running

    def __enter__(self) -> BusyClock:
        if self._since is not None:
            raise RuntimeError("BusyClock is already running; it cannot be entered twice")
        self._since = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.total += time.perf_counter() - self._since
        self._since = None
