"""Which packages `pip install .` installs (everything else is in pyproject.toml).

The repository's top-level data/ folder (the course's checkpoint, vocabulary, traces and expected
figures) is installed inside the package as paged_helpers/course_data/files, where
paged_helpers.data_files.data_dir() finds it when there is no clone around. The grader's own
package, autograde/paged_grading, is installed as ``paged_grading`` with its subpackages: nbgrader's
configuration (autograde/nbgrader_config.py names its preprocessors), course.py and the tests import it by name.
pyproject.toml's tables cannot map folders outside the package while also discovering
subpackages, hence this file.
"""

from setuptools import find_packages, setup

DATA_PACKAGE = "paged_helpers.course_data.files"
GRADER_PACKAGE = "paged_grading"

setup(
    packages=[
        *find_packages(include=["paged_helpers", "paged_helpers.*"]),
        DATA_PACKAGE,
        *find_packages("autograde", include=[GRADER_PACKAGE, f"{GRADER_PACKAGE}.*"]),
    ],
    package_dir={DATA_PACKAGE: "data", GRADER_PACKAGE: "autograde/paged_grading"},
    package_data={"paged_helpers": ["py.typed", "widgets/frontend/*.js"], DATA_PACKAGE: ["*.*", "SHA256SUMS", "*/*"]},
)
