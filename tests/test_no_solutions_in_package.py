"""Students install paged_helpers: nothing in it may be a working solution.

For every registered check (``paged_helpers.checks.REGISTRY``), every function or class defined
anywhere in the package that could be called the way the learner's is (its signature binds the
same required arguments as the instructor's solution) is handed to that check, which must fail.
A new check is covered as soon as its ``@check(...)`` decorator names its notebook.
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
    info: checks.CheckInfo

    @property
    def right(self) -> object:
        return solution(self.info.notebook, self.info.builds)

    @property
    def kind(self) -> str:
        if self.info.kernel:  # a @triton.jit kernel, judged from its text
            return "kernel"
        return "class" if inspect.isclass(self.right) else "function"

    @property
    def call(self) -> tuple:
        """Placeholder arguments for the solution's required positional parameters."""
        right = self.right.fn if self.kind == "kernel" else self.right
        return (tuple(object() for _ in _required_positional(right)), {})

    def run_check(self, candidate: object) -> None:
        partners = [solution(notebook, name) for notebook, name in self.info.partners]
        self.info.function(candidate, *partners)


def _required_positional(candidate: object) -> list[inspect.Parameter]:
    signature = inspect.signature(candidate)
    return [
        p
        for p in signature.parameters.values()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]


CAPABILITIES = [Capability(info) for info in checks.REGISTRY.values()]


def _is_kernel(value: object) -> bool:
    """A @triton.jit function (interpreted or compiled)."""
    return type(value).__name__ in ("JITFunction", "InterpretedFunction") and inspect.isfunction(
        getattr(value, "fn", None)
    )


def package_definitions() -> list[tuple[str, object]]:
    """(qualified name, object) of every function, class and @triton.jit kernel defined in a
    paged_helpers module."""
    found = []
    modules = [paged_helpers.__name__] + [
        info.name
        for info in pkgutil.walk_packages(paged_helpers.__path__, prefix=f"{paged_helpers.__name__}.")
        if not info.name.endswith(".__main__")  # scripts: importing one runs it
    ]
    for name in modules:
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == name:
                found.append((f"{name}.{attribute}", value))
            elif _is_kernel(value) and value.fn.__module__ == name:
                found.append((f"{name}.{attribute}", value))
    return found


def accepts(candidate: object, kind: str, call: tuple) -> bool:
    """True if ``candidate`` is of the right kind and its signature binds the check's call."""
    if kind == "kernel":
        return _is_kernel(candidate) and len(_required_positional(candidate.fn)) == len(call[0])
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
    return len(_required_positional(candidate)) == len(call[0])


DEFINITIONS = package_definitions()


def test_the_package_was_searched():
    names = {name for name, _ in DEFINITIONS}
    assert "paged_helpers.baselines.StaticKVCache" in names and "paged_helpers.checkpoint.tiny_qwen3" in names


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: c.info.name)
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
        f"but these pass {capability.info.name}: {passing}"
    )


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: c.info.name)
def test_the_harness_would_flag_a_solution_hidden_in_the_package(capability):
    """The instructor's solution is a candidate this search would try, and it passes: the search has teeth."""
    right = capability.right
    assert accepts(right, capability.kind, capability.call)
    capability.run_check(right)
