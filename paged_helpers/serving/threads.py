"""Run tiny tensor work on one CPU thread, then restore the setting.

The course's model multiplies matrices of a few thousand numbers: extra threads cannot
speed that up, and on a shared machine a parallel region waits for whichever of its
threads the operating system parked, which makes a step up to a hundred times slower.
Checks and the benchmark run their engine work inside ``one_thread()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
