"""The rules of a kernel cell, as words, and a refusal that names the rule each line breaks.

``RULES`` is the one statement of the rules (``kernel_source``'s docstring says them at length):
``KERNEL_CELL_RULES`` shows them to a learner, one line a rule, and ``WHAT_IS_ALLOWED`` in one
sentence. ``Refusals`` collects what one validation refuses, each problem under its rule's name;
``KernelSourceRefused`` carries them, the lines first, then each rule they break, stated once.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["KERNEL_CELL_RULES", "KernelModule", "KernelSourceRefused", "RULES", "Refusals", "WHAT_IS_ALLOWED"]

# The rules, once: each refusal names its rule; ``KERNEL_CELL_RULES`` (for a learner, one line a
# rule) and ``WHAT_IS_ALLOWED`` (one sentence) are these words, put together.
RULES = {
    "imports": "Imports: only triton, triton.language and math.",
    "constants": (
        'Constants: NAME = a literal, float("-inf"), math.pi or math.inf, - or + before one, optionally '
        "inside tl.constexpr(...); nothing computed (not 2 ** 10)."
    ),
    "functions": (
        "Functions: only @triton.jit ones (that one decorator), with literal defaults and annotations "
        "like tl.constexpr; nothing else runs at the top level."
    ),
    "kernel code": (
        "Kernel code: assignments, if/for/while/return/assert over locals, constants, tl.*/math.* names, "
        "@triton.jit functions and range, float, int, min, max, len, print; a value's attributes only "
        "Triton's own (x.dtype, x.shape, x.T, x.to(...)), never x.handle."
    ),
    "names": (
        "Names: one leading _ is fine (_attn_fwd, _BLOCK); no name, attribute or keyword starts with __; "
        "each top-level name is bound once."
    ),
}
KERNEL_CELL_RULES = "\n".join(RULES.values())
WHAT_IS_ALLOWED = "a kernel's module may hold only what these rules allow: " + " ".join(RULES.values())


class KernelSourceRefused(ValueError):
    """A kernel's source holds something that compiling it would run. The message names it."""


@dataclass(frozen=True)
class KernelModule:
    """A kernel module's source, and where each of its lines came from (for messages)."""

    source: str
    where: Callable[[int], str] = staticmethod(lambda line: f"line {line}")


class Refusals:
    """What one validation refused, in the order it found it: (where and what, the rule's name in RULES).

    ``where(line)`` names a line of the module as its learner knows it (a notebook's cell and line).
    """

    def __init__(self, where: Callable[[int], str]):
        self.where = where
        self.problems: list[tuple[str, str]] = []

    def refuse(self, node: ast.AST, text: str, rule: str) -> None:
        self.problems.append((f"{self.where(getattr(node, 'lineno', 0))}: {text}", rule))

    def message(self) -> str:
        """Each problem's line, naming its rule (``(rule: constants)``), then each rule named, stated once."""
        lines = dict.fromkeys(f"{text} (rule: {rule})" for text, rule in self.problems)
        rules = dict.fromkeys(rule for _, rule in self.problems)
        return "\n".join([*lines, "The rules of a kernel cell that these lines break:", *(RULES[r] for r in rules)])


def first_line(node: ast.AST) -> str:
    """How a refusal quotes a statement or an expression: its first line, at most 120 characters."""
    return ast.unparse(node).splitlines()[0][:120]
