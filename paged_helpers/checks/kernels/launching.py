"""How a kernel check runs the learner's kernel: it launches it itself, and speaks of what happened.

Every kernel check of notebooks 06, 07 and 09 goes through ``KernelUnderTest``:

1. the kernel's module is built from text (``running.learner_kernel``) and validated: an
   unfinished kernel is "not implemented yet", a refused line fails with the rule it breaks;
2. the module is loaded in a fresh process (``running.kernel_process``), and the kernel's
   parameters are compared with the signature the notebook states;
3. each scenario is a launch the check makes, with its own grid and tensors: what the kernel
   raised, where it strayed out of its tensors, a crash or a spent budget become the scenario's
   message; otherwise its outputs are in the check's own tensors, to compare;
4. ``compile_for_gpu`` compiles the same module for CUDA targets at the launches the check
   states (nothing of the learner's process is asked or trusted).

Nothing here depends on the launcher: a kernel's points are the kernel's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from ..reading.learner_code import (
    KERNEL_CELL_RULES,
    TARGETS,
    CompileResult,
    KernelAnswer,
    KernelModule,
    KernelProcess,
    KernelProcessFailed,
    KernelSourceRefused,
    KernelUnfinished,
    Launch,
    compile_launches,
    explain_failure,
    learner_kernel,
    timed_out,
)
from ..speaking.failure import CheckFailed, Finding, LearnerWords, NotImplementedYet, NoVerdict, fail, four_parts
from ..speaking.tally import count_call

__all__ = ["KernelLaunchFailed", "KernelUnderTest", "Parameter", "cpu_budget", "gpu_launch", "tensor_argument"]

# CPU seconds a launch may use: a fixed part (the interpreter's start on a first launch) and a
# part per program-iteration (about 3 ms each in the interpreter; a correct kernel ten times
# slower than the course's still has more than ten times the margin). CPU time, not wall time:
# a loaded machine slows the clock, not the count.
_BUDGET_FIXED_S, _BUDGET_PER_ITERATION_S = 20.0, 0.05


def cpu_budget(program_iterations: int) -> float:
    return _BUDGET_FIXED_S + _BUDGET_PER_ITERATION_S * program_iterations


class KernelLaunchFailed(CheckFailed):
    """A launch the check made did not run to its end: ``answer`` says how (its ``kind``, and for a
    stray access its ``access``), so a check can look closer before it speaks. A hidden scenario's
    failure is remade from its message alone (``hidden_failure``): its ``answer`` is None."""

    def __init__(self, message: str, answer: KernelAnswer | None = None, *, finding: Finding | None = None):
        super().__init__(message, finding=finding)
        self.answer = answer


@dataclass(frozen=True)
class Parameter:
    name: str
    constexpr: bool = False


@contextlib.contextmanager
def _no_verdict_on_infrastructure() -> Iterator[None]:
    """The kernel process could not start or broke its protocol: the machine's trouble, not the
    kernel's (a validated kernel cannot reach the protocol's descriptors)."""
    try:
        yield
    except KernelProcessFailed as error:
        raise NoVerdict(f"the check could not run your kernel here ({error}); run the check again") from None


def _signature_text(name: str, parameters: Sequence[Parameter]) -> str:
    shown = [f"{p.name}: tl.constexpr" if p.constexpr else p.name for p in parameters]
    return f"{name}({', '.join(shown)})"


def _last_lines(text: str, count: int = 10) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join("    " + line for line in lines[-count:])


class KernelUnderTest:
    """One learner kernel, loaded in its own process for the length of a check (a context manager).

    ``kernel`` is what the test cell handed the check; ``name`` and ``parameters`` the signature
    the notebook states (the check launches with those arguments, positionally).
    """

    def __init__(self, kernel: object, name: str, parameters: Sequence[Parameter]):
        self.name, self.parameters = name, tuple(parameters)
        try:
            source = learner_kernel(kernel, name)
        except TypeError as error:
            fail(f"{name}, handed to the check", "your @triton.jit kernel", str(error), "pass the kernel itself")
        try:
            self.module: KernelModule = source.module()
        except KernelUnfinished:
            raise NotImplementedYet(
                f"not implemented yet: {name} still raises NotImplementedError. Write its body in its cell "
                "(replacing `raise NotImplementedError()`), run that cell, then this check."
            ) from None
        except KernelSourceRefused as error:
            fail(
                f"{name}'s cell, read as the module the check launches",
                "a kernel cell that holds only what a Triton kernel's module may hold",
                f"lines the check refuses to load:\n{_indented(str(error))}",
                f"the rules for kernel cells:\n{_indented(KERNEL_CELL_RULES)}",
            )
        self.process = KernelProcess(self.module)

    def __enter__(self) -> KernelUnderTest:
        with _no_verdict_on_infrastructure():
            loaded = self.process.loaded()
        if not loaded.ok:
            self._speak("loading your kernel's cell", loaded, "the kernel's cell runs without error")
        found = self.process.kernels.get(self.name)
        if found is None:
            fail(
                f"loading {self.name}",
                f"a @triton.jit function named {self.name}",
                f"none in the module read from your cells (kernels there: {', '.join(self.process.kernels) or 'none'})",
                "keep the kernel's name as the notebook states it",
            )
        stated = [p.name for p in self.parameters]
        constexprs = [p.name for p in self.parameters if p.constexpr]
        position = {name: index for index, name in enumerate(found["params"])}
        if (
            len(found["params"]) != len(stated)
            or [position.get(c, -1) for c in constexprs] != [stated.index(c) for c in constexprs]
            or any(found["params"][stated.index(c)] not in found["constexprs"] for c in constexprs)
        ):
            fail(
                f"the signature of {self.name}",
                _signature_text(self.name, self.parameters),
                _signature_text(self.name, [Parameter(n, n in found["constexprs"]) for n in found["params"]]),
                "the check launches your kernel itself, with the arguments the notebook states, in that order: "
                "keep its parameters (their names may differ, not their number, order or which are tl.constexpr)",
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.close()

    # -- launches -------------------------------------------------------------------------------

    def launch(
        self,
        scenario: str,
        grid: Sequence[int],
        args: Sequence[object],
        *,
        writable: set[int],
        iterations: int,
        stray_hint: str = "",
    ) -> None:
        """Launch the kernel on the check's own tensors; any failure raises ``KernelLaunchFailed`` with
        the scenario's message. ``iterations``: program-iterations the scenario needs (its CPU
        budget's measure); ``stray_hint``: what this kernel's addresses are built from, for the hint
        of a stray access."""
        count_call(scenario)
        options = {"num_warps": 4}
        with _no_verdict_on_infrastructure():
            answer = self.process.launch(
                self.name, grid, args, writable=writable, cpu_budget=cpu_budget(iterations), options=options
            )
        if not answer.ok:
            self._speak(scenario, answer, "the kernel runs to its end", stray_hint)

    def _where(self, answer: KernelAnswer) -> str:
        if not answer.lines:
            return ""
        line, text = answer.lines[-1]
        return f" at {self.module.where(line)}: `{text}`"

    def _speak(self, scenario: str, answer: KernelAnswer, expected: str, stray_hint: str = "") -> None:
        printed = ""
        if answer.printed.strip():
            printed = f"\n  what your kernel printed (last lines):\n{_last_lines(answer.printed)}"
        if answer.kind == "no verdict":
            raise NoVerdict(
                f"{scenario}: the machine gave your kernel no CPU time for minutes ({answer.message}); this says "
                "nothing about your kernel. Run the check again."
            )
        if answer.kind == "over budget":
            parts = (
                "the kernel to finish within its budget of work (many times what the scenario needs)",
                "it was still running when the budget was spent",
                "look for a loop that never ends, or a loop over far more iterations than the data has (its "
                "bound comes from the sizes the kernel is handed)",
            )
        elif answer.kind == "crashed":
            parts = (
                expected,
                f"the kernel's process died ({answer.signal_name})",
                "the check ran your kernel in a process of its own, so this notebook is still alive; look for an "
                "address built from a wrong offset or stride",
            )
        elif answer.kind == "out of bounds":
            parts = (
                "every load and store inside the tensors the kernel was given",
                self._stray(answer),
                _STRAY_HINT + (f" {stray_hint}" if stray_hint else ""),
            )
        else:
            first = answer.message.splitlines()[0] if answer.message else ""
            parts = (
                expected,
                f"{answer.error_type}: {first}{self._where(answer)}",
                "read the error and the line it names",
            )
        # what the kernel printed is the learner's, after the hint and never in it
        finding = Finding(scenario, *parts, learner=LearnerWords(printed=answer.printed))
        raise KernelLaunchFailed(four_parts(scenario, *parts) + printed, answer, finding=finding)

    def _stray(self, answer: KernelAnswer) -> str:
        facts = answer.access
        what = "a store" if facts.get("what") == "store" else "a load"
        where = self._where(answer)
        if "into" in facts:
            return f"{what} into {facts['into']}, which the kernel may only read{where}"
        if facts.get("unit") == "bytes":  # compiled: found after the launch, in the bytes around the tensors
            return (
                f"{what} that changed {facts.get('count')} bytes outside every tensor, up to {facts.get('elements')} "
                f"bytes {facts.get('side')} of {facts.get('near')} (found after the launch)"
            )
        return (
            f"{what} of {facts.get('count')} of its {facts.get('of')} addresses outside every tensor, up to "
            f"{facts.get('elements')} elements {facts.get('side')} of {facts.get('near')}{where}"
        )

    # -- compiling for GPUs ---------------------------------------------------------------------

    def compile_for_gpu(self, launches: Sequence[Launch]) -> None:
        """Compile ``launches`` of this module for every GPU target; a compile error fails the check.
        Where no compiler can run here, a note says so and it costs nothing."""
        try:
            results = compile_launches(list(launches), TARGETS)
        except RuntimeError as error:  # the compiler's toolchain, not the learner's kernel
            print(f"note: the GPU compile could not run here: {str(error).splitlines()[0]}")
            return
        for result in results:
            if timed_out(result):
                raise NoVerdict(
                    f"{self.name}, compiled for a GPU (sm_{result.target}): the compiler got no answer in time on "
                    "this machine; this says nothing about your kernel. Run the check again."
                )
            if not result.ok:
                fail(
                    f"{self.name}, compiled for a GPU (sm_{result.target}, {_dtype_of(result)})",
                    "a kernel that also compiles for CUDA GPUs (the course runs unchanged on one)",
                    "a compile error",
                    explain_failure(result),
                )

    def gpu_launch(self, args: Sequence[object], options: dict | None = None) -> Launch:
        """A launch of this kernel described for the GPU compile: tensors as their dtypes, integers by
        Triton's specialisation, constexprs by name and value."""
        return gpu_launch(self.name, self.module.source, self.parameters, args, options)


def gpu_launch(
    name: str, source: str, parameters: Sequence[Parameter], args: Sequence[object], options: dict | None = None
) -> Launch:
    described, constexprs = [], {}
    for parameter, value in zip(parameters, args, strict=True):
        if parameter.constexpr:
            constexprs[parameter.name] = {"value": value}
        elif isinstance(value, str):  # a dtype name: a pointer to that dtype
            described.append({"tensor": value})
        elif isinstance(value, bool) or not isinstance(value, int):
            described.append({"value": value})
        else:
            described.append({"value": 1 if value == 1 else 16 if value % 16 == 0 else 3})
    for key, value in (options or {}).items():
        constexprs[key] = {"value": value}
    return Launch(kernel=name, module_source=source, args=tuple(described), kwargs=tuple(sorted(constexprs.items())))


def _dtype_of(result: CompileResult) -> str:
    return next((d["tensor"] for d in result.launch.args if "tensor" in d and "float" in d["tensor"]), "")


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


_STRAY_HINT = (
    "mask every load and store whose addresses can leave the data: rows past the last one, positions past the "
    "length, lanes of a tile past the end. Here the check stopped the access before it happened; on a GPU it "
    "reads garbage or faults, and in Triton's interpreter it can crash Python. If no mask is missing, check "
    "the address itself: the offsets and strides it is built from."
)


def tensor_argument(value: torch.Tensor) -> str:
    """A tensor as ``gpu_launch`` describes it: its dtype's name."""
    return str(value.dtype).removeprefix("torch.")
