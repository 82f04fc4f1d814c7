"""Students install paged_helpers: nothing in it may be a working solution.

For every graded capability in ``CAPABILITIES``, every function or class defined anywhere in
the package that could be called the way the learner's is (its signature accepts the check's
call) is handed to that check, which must fail. Add a line to ``CAPABILITIES`` when a new
check is written.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass

import pytest

import paged_helpers
from paged_helpers import checks

from conftest import solution


@dataclass(frozen=True)
class Capability:
    check_name: str  # the check in paged_helpers.checks
    kind: str  # "function" or "class": what the learner hands to the check
    call: tuple  # (args, kwargs) the check uses to call or construct it: a candidate must accept them
    notebook: str  # where the right implementation lives (it must be found by this harness)
    name: str
    # (notebook, name) of the right implementations the check takes after the candidate (the cache
    # a prefix cache works on, say): the candidate is the only piece that comes from the package.
    partners: tuple = ()

    def run_check(self, candidate: object) -> None:
        partners = [solution(notebook, name) for notebook, name in self.partners]
        getattr(checks, self.check_name)(candidate, *partners)


CAPABILITIES = [
    Capability(
        "check_physical_slot", "function", (([5, 1, 7], 9, 4), {}), "01_block_tables", "physical_slot"
    ),
    Capability("check_block_allocator", "class", ((6,), {}), "02_block_allocator", "BlockAllocator"),
    Capability(
        "check_paged_kv_cache",
        "class",
        ((2, 24, 4, 2, 8), {"device": "cpu", "dtype": None}),
        "03_paged_kv_cache",
        "PagedKVCache",
    ),
    Capability("check_copy_on_write", "class", ((2, 24, 4, 2, 8), {}), "04_fork_and_copy_on_write", "PagedKVCache"),
    Capability("check_fork_logits", "class", ((2, 24, 4, 2, 8), {}), "04_fork_and_copy_on_write", "PagedKVCache"),
    Capability(
        "check_prefix_cache",
        "class",
        ((object(),), {}),
        "05_prefix_caching",
        "PrefixCache",
        partners=(("04_fork_and_copy_on_write", "PagedKVCache"),),
    ),
    Capability(
        "check_engine",
        "class",
        (("model", "cache", "prefix_cache"), {"chunk_size": 8, "max_step_tokens": 32}),
        "07_continuous_batching",
        "ContinuousBatchingEngine",
        partners=(("04_fork_and_copy_on_write", "PagedKVCache"), ("05_prefix_caching", "PrefixCache")),
    ),
    Capability(
        "check_paged_decode",
        "function",
        (("q", "k", "v", "t", "l", 4), {}),
        "06_paged_decode_kernel",
        "paged_decode_attention",
    ),
    Capability(
        "check_split_k_decode",
        "function",
        (("q", "k", "v", "t", "l", 4, 2), {}),
        "06_paged_decode_kernel",
        "split_k_decode_attention",
    ),
    Capability(
        "check_paged_prefill",
        "function",
        (("q", "k", "v", "t", 3, 4), {}),
        "08_paged_prefill_kernel",
        "paged_prefill_attention",
    ),
]


def package_definitions() -> list[tuple[str, object]]:
    """(qualified name, object) of every function and class defined in a paged_helpers module."""
    found = []
    modules = [paged_helpers.__name__] + [
        info.name
        for info in pkgutil.walk_packages(paged_helpers.__path__, prefix=f"{paged_helpers.__name__}.")
    ]
    for name in modules:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == name:
                found.append((f"{name}.{attribute}", value))
    return found


def accepts(candidate: object, kind: str, call: tuple) -> bool:
    """True if ``candidate`` is of the right kind and its signature binds the check's call."""
    if kind == "class" and not inspect.isclass(candidate):
        return False
    if kind == "function" and not inspect.isfunction(candidate):
        return False
    if inspect.isclass(candidate) and issubclass(candidate, BaseException):
        return False
    try:
        signature = inspect.signature(candidate)
        signature.bind(*call[0], **call[1])
    except (TypeError, ValueError):
        return False
    # Same arity as the learner's: every positional argument of the call is required (no defaults),
    # which keeps unrelated helpers with optional arguments (demos, servers) out of the search.
    required = [
        p
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return len(required) == len(call[0])


DEFINITIONS = package_definitions()


def test_the_package_was_searched():
    names = {name for name, _ in DEFINITIONS}
    assert "paged_helpers.baselines.StaticKVCache" in names and "paged_helpers.model.tiny_qwen3" in names


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: c.check_name)
def test_nothing_in_the_package_passes_the_check(capability):
    candidates = [(name, obj) for name, obj in DEFINITIONS if accepts(obj, capability.kind, capability.call)]
    passing = []
    for name, candidate in candidates:
        try:
            capability.run_check(candidate)
        except Exception:  # noqa: BLE001 (any failure means "not a solution")
            continue
        passing.append(name)
    assert not passing, (
        "paged_helpers must not contain a working solution, "
        f"but these pass {capability.check_name}: {passing}"
    )


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: c.check_name)
def test_the_harness_would_flag_a_solution_hidden_in_the_package(capability):
    """The instructor's solution is a candidate this search would try, and it passes: the search has teeth."""
    right = solution(capability.notebook, capability.name)
    assert accepts(right, capability.kind, capability.call)
    capability.run_check(right)
