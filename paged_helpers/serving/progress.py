"""A text progress bar that writes to stdout only.

nbgrader gives a cell zero points for any stderr output, and tqdm writes to stderr, so the
course draws its own bar: one line, redrawn in place with a carriage return, finished with
a newline.
"""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressBar:
    """``update(done)`` redraws ``label [#####.....] done/total``; ``close()`` ends the line."""

    def __init__(self, total: int, label: str = "", width: int = 30, stream: TextIO | None = None) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        self.total, self.label, self.width = total, label, width
        self.stream = stream  # None: whatever sys.stdout is when drawing (notebooks swap it)
        self.done = 0
        self.drawn = False
        self.closed = False

    def _out(self) -> TextIO:
        return self.stream or sys.stdout

    def update(self, done: int, note: str = "") -> None:
        """Redraw, but only when ``done`` changed: a bar redrawn every step floods a notebook."""
        done = min(done, self.total)
        if done == self.done and self.drawn:
            return
        self.done, self.drawn = done, True
        filled = self.width * self.done // self.total if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        text = f"\r{self.label} [{bar}] {self.done}/{self.total} {note}".rstrip()
        self._out().write(text)
        self._out().flush()

    def close(self) -> None:
        if not self.closed:
            self._out().write("\n")
            self._out().flush()
            self.closed = True
