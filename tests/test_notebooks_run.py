"""Every instructor notebook runs top to bottom with its solutions: no error, no stderr.

Stderr matters: nbgrader gives a test cell zero points for any stderr output, so a warning
that leaks from a check or a demo would cost learners their marks.
"""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import NOTEBOOKS, strip_ansi

NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
# Run times are not asserted (shared machines are noisy): `make test` reports them through
# pytest's --durations, which .ci/run turns on.


def run_notebook(path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return notebook


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=lambda p: p.stem)
def test_notebook_runs_clean(path):
    notebook = run_notebook(path)
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", f"cell {index} raised:\n" + strip_ansi(
                "\n".join(output.get("traceback", []))
            )
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                pytest.fail(
                    f"cell {index} wrote to stderr (nbgrader would zero a test cell):\n{output['text']}"
                )


def test_every_notebook_is_found():
    assert NOTEBOOK_PATHS, "no notebooks found in notebooks/"
