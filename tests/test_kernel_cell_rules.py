"""The rules of a kernel cell are one fact, stated alike where a learner writes kernels.

``kernel_source.RULES`` is what the checks enforce (each refusal names its rule); notebooks 06, 07
and 09 state the same rules, each as one markdown bullet list built from ``RULES``, in order.
"""

from __future__ import annotations

import nbformat
import pytest

from paged_helpers.running.kernel_source import RULES

from conftest import NOTEBOOKS

KERNEL_NOTEBOOKS = ("06_triton_warmup", "07_paged_decode_kernel", "09_paged_prefill_kernel")
BULLETS = [f"- {rule}" for rule in RULES.values()]


def markdown_of(notebook: str) -> list[str]:
    cells = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4).cells
    return [cell.source for cell in cells if cell.cell_type == "markdown"]


@pytest.mark.parametrize("notebook", KERNEL_NOTEBOOKS)
def test_the_notebook_states_every_rule(notebook):
    lines = {line for source in markdown_of(notebook) for line in source.splitlines()}
    missing = [bullet for bullet in BULLETS if bullet not in lines]
    assert not missing, f"{notebook} does not state, word for word:\n" + "\n".join(missing)


@pytest.mark.parametrize("notebook", KERNEL_NOTEBOOKS)
def test_the_rules_are_one_list_in_their_order(notebook):
    block = "\n".join(BULLETS)
    assert any(block in source for source in markdown_of(notebook)), (
        f"{notebook} has no markdown cell holding the rules as one list, in RULES' order:\n{block}"
    )
