"""Helpers for the course "Paged attention and prefix caching".

Import this package first in every notebook: it decides the device once (CUDA, else the CPU
with Triton's interpreter, which it switches on before triton is imported) and prints a
one-line banner in a notebook. It holds what the learner does *not* write: the model, the
baseline caches, workloads, checks, widgets and plots. Never a solution.

Map of the package:
  device            where the course runs (CUDA or CPU + Triton interpreter)
  model             a readable Qwen3 on any cache: cache.update(...), or cache.paged(...) and kernels
  checkpoint        loading a real Qwen3 from a local folder (and saving one)
  course_data       where data/ is (clone or installed) and how its files are rebuilt
  words             the tiny Qwen3's word-level tokenizer: ph.tokenizer().encode / decode / token_text
  baselines         the static-slot cache learners compare against
  workloads         seeded request generators
  notebook_loader   taking a learner's classes out of an earlier notebook
  unfinished        try_it: "Try it" cells that wait politely for unfinished code
  checks            one module per graded capability (check_block_allocator, ...)
  reference         slow, obvious attention references the kernels are compared against
  widgets           live block tables, the copy-on-write demo, the prefix-cache view
  plots             matplotlib figures for the notebooks
  serving           engine pieces without solutions: sequences, sampling, metrics, the driver
  demos             the figures behind `python run.py NAME`
"""

from . import device as _device  # first: sets TRITON_INTERPRET before anything imports triton
from .checkpoint import tiny_qwen3
from .device import DEVICE, banner
from .model import Qwen3, Qwen3Config
from .notebook_loader import NotebookLoadError, load_from_notebook
from .unfinished import try_it
from .words import tokenizer

__all__ = [
    "DEVICE",
    "banner",
    "Qwen3",
    "Qwen3Config",
    "tiny_qwen3",
    "tokenizer",
    "load_from_notebook",
    "NotebookLoadError",
    "try_it",
]
__version__ = "0.1.0"

# Submodules reached as attributes (ph.checks, ph.widgets, ...) are imported on first use, so
# `import paged_helpers` stays fast and never imports triton or ipywidgets by itself.
_SUBMODULES = {
    "baselines",
    "checkpoint",
    "checks",
    "course_data",
    "demos",
    "model",
    "notebook_loader",
    "plots",
    "reference",
    "serving",
    "widgets",
    "words",
    "workloads",
}


def __getattr__(name: str):
    if name in _SUBMODULES:
        from importlib import import_module

        return import_module(f".{name}", __name__)
    raise AttributeError(f"module 'paged_helpers' has no attribute {name!r}")


def _in_notebook_kernel() -> bool:
    import sys

    return "ipykernel" in sys.modules


if _in_notebook_kernel() or _device.INFO.problem is not None:  # a problem is said at import, anywhere
    print(_device.INFO.banner())
