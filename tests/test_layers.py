"""The package's layers, read from its imports (issue 24): the folder tree is the map, this test the law.

    running        runs the learner's code apart (child processes, the launch watcher, the GPU compile)
    learner_view   the one place checks meet the learner's objects (here, or across the wire)
    checks         scenarios, references and verdicts
    demos          the figures behind run.py

A layer imports only the layers below it: ``running`` knows nothing of views, checks or demos;
``learner_view`` (which the learner's process holds whole while grading) nothing of checks,
references or demos; ``checks`` nothing of demos. Every import is counted: at the top of a module
and inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "paged_helpers"

# layer -> sub-packages of paged_helpers its modules may not import
FORBIDDEN = {
    "running": ("learner_view", "checks", "demos", "reference", "widgets", "plots"),
    "learner_view": ("checks", "demos", "reference", "widgets", "plots"),
    "checks": ("demos", "widgets"),
}


def _imported(path: Path) -> set[str]:
    """The paged_helpers sub-packages ``path`` imports (its relative imports resolved)."""
    module_parts = ("paged_helpers", *path.relative_to(PACKAGE).with_suffix("").parts)
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_parts[: len(module_parts) - node.level]
                target = (*base, *(node.module.split(".") if node.module else ()))
                names = [(*target, alias.name) for alias in node.names] if not node.module else [target]
            else:
                names = [tuple(node.module.split("."))] if node.module else []
            for name in names:
                if name[:1] == ("paged_helpers",) and len(name) > 1:
                    found.add(name[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "paged_helpers" and len(parts) > 1:
                    found.add(parts[1])
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_only_the_layers_below_it(layer):
    broken = {
        str(path.relative_to(PACKAGE)): sorted(_imported(path) & set(FORBIDDEN[layer]))
        for path in sorted((PACKAGE / layer).rglob("*.py"))
    }
    assert not {module: bad for module, bad in broken.items() if bad}, broken


def test_the_reader_sees_relative_imports():
    probe = PACKAGE / "checks" / "radix_logits.py"
    assert {"learner_view", "model"} <= _imported(probe)
