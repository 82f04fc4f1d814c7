"""The course's data files: where they are (``paged_helpers.data_files``, re-exported here) and how
the built ones are made.

``python -m paged_helpers.course_data build`` remakes the built files (``build.py``);
``... check`` compares them with ``SHA256SUMS``. CONTRIBUTING.md lists each file and how it is made.
"""

from __future__ import annotations

from ..data_files import (
    CHECKSUMS,
    INSTALLED_NAME,
    TINY_QWEN3,
    course_prompts,
    data_dir,
    data_path,
    expected_figures,
)

__all__ = ["CHECKSUMS", "INSTALLED_NAME", "TINY_QWEN3", "course_prompts", "data_dir", "data_path", "expected_figures"]
