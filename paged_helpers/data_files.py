"""Where the course's data files are: ``data/`` in a clone, package data after ``pip install .``.

The folder holds the tiny Qwen3 checkpoint and its word vocabulary, the course's corpus and
prompts, the request-length traces and the expected figures (CONTRIBUTING.md lists each file
and how it is made). This module only finds them, and imports nothing of the package; the files
are built by ``paged_helpers.course_data`` (``python -m paged_helpers.course_data build``), which
builds on the model, the tokenizer and the checkpoint writer, all of which read data from here.
"""

from __future__ import annotations

from pathlib import Path

TINY_QWEN3 = "tiny-qwen3"  # the checkpoint folder: config.json, model.safetensors, vocab.json
CHECKSUMS = "SHA256SUMS"  # the built files' sha256, one "digest  relative/path" per line
# pyproject installs the repository's data/ as this subpackage's folder (see setup.py).
INSTALLED_NAME = "files"


def data_dir() -> Path:
    """The course's data folder: the clone's ``data/`` first, else the installed copy."""
    package = Path(__file__).resolve().parent / "course_data"
    candidates = (package.parent.parent / "data", package / INSTALLED_NAME)
    for candidate in candidates:
        if (candidate / CHECKSUMS).is_file():
            return candidate
    raise FileNotFoundError(
        f"the course's data folder is missing: looked for {CHECKSUMS} in {', '.join(map(str, candidates))}; "
        "reinstall paged_helpers (pip install .) or run from a clone of the course"
    )


def data_path(*parts: str) -> Path:
    """A file or folder inside the data folder; FileNotFoundError naming it when it is absent."""
    path = data_dir().joinpath(*parts)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the course's data folder")
    return path


def expected_figures() -> dict:
    """data/expected_figures.json: the chapter's figures and the course's reference numbers."""
    import json

    return json.loads(data_path("expected_figures.json").read_text())


def course_prompts() -> dict:
    """data/prompts.json: the course's prompts as text (a system prompt, questions, a prompt to fork, examples)."""
    import json

    return json.loads(data_path("prompts.json").read_text())
