"""The student release of an instructor notebook, made with nbgrader's own preprocessors.

``release_definition(tmp_path, "03_paged_kv_cache", "PagedKVCache", finished=["02_block_allocator"])``
clears the solutions and hidden tests of notebook 03 exactly as ``nbgrader generate_assignment``
does, writes it to tmp_path beside the *instructor* copies of the ``finished`` notebooks (an
earlier notebook the learner has completed), and loads ``name`` from it, unfinished methods and all.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests, ClearSolutions

from paged_helpers.notebook_loader import load_from_notebook

from conftest import NOTEBOOKS


def write_release(notebook: str, folder: Path) -> Path:
    source = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    released, _ = ClearSolutions().preprocess(source, {"language": "python"})
    released, _ = ClearHiddenTests().preprocess(released, {})
    path = folder / f"{notebook}.ipynb"
    nbformat.write(released, path)
    return path


def release_definition(tmp_path: Path, notebook: str, name: str, finished: tuple[str, ...] = ()):
    for earlier in finished:
        shutil.copy(NOTEBOOKS / f"{earlier}.ipynb", tmp_path / f"{earlier}.ipynb")
    write_release(notebook, tmp_path)
    return load_from_notebook(notebook, name, search=[tmp_path], allow_unimplemented=True)
