"""One check per graded capability, one module per notebook topic.

Each check takes the learner's function or class, returns None when it is right and raises
``CheckFailed`` (an AssertionError) with a message naming the scenario, the expected and the
actual values, and a hint. Modules are imported on first use, so a notebook that checks an
allocator never pays for importing Triton.

    check_physical_slot      block_tables.py     notebook 01
    check_block_allocator    allocator.py        notebook 02
    check_paged_kv_cache     paged_cache.py      notebook 03
    check_copy_on_write      copy_on_write.py    notebook 04
    check_fork_logits        copy_on_write.py    notebook 04
    check_prefix_cache       prefix_cache.py     notebook 05
    check_paged_decode       kernels.py          notebook 06
    check_split_k_decode     kernels.py          notebook 06 (optional exercise)
    check_engine             engine.py           notebook 07
    check_paged_prefill      kernels.py          notebook 08
"""

from importlib import import_module

from .report import CheckFailed, NotImplementedYet

_MODULE_OF = {
    "check_physical_slot": "block_tables",
    "check_block_allocator": "allocator",
    "check_paged_kv_cache": "paged_cache",
    "check_copy_on_write": "copy_on_write",
    "check_fork_logits": "copy_on_write",
    "check_prefix_cache": "prefix_cache",
    "check_paged_decode": "kernels",
    "check_split_k_decode": "kernels",
    "check_paged_prefill": "kernels",
    "check_engine": "engine",
}

__all__ = ["CheckFailed", "NotImplementedYet", *_MODULE_OF]


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"paged_helpers.checks has no {name!r}; the checks are: {', '.join(_MODULE_OF)}")
    return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)


def __dir__() -> list[str]:
    return sorted(__all__)
