"""Which packages `pip install .` installs (everything else is in pyproject.toml).

The repository's top-level data/ folder (the course's checkpoint, vocabulary, traces and expected
figures) is installed inside the package as paged_helpers/course_data/files, where
paged_helpers.course_data.data_dir() finds it when there is no clone around. pyproject.toml's
tables cannot map a folder outside the package while also discovering subpackages, hence this file.
"""

from setuptools import find_packages, setup

DATA_PACKAGE = "paged_helpers.course_data.files"

setup(
    packages=[*find_packages(include=["paged_helpers", "paged_helpers.*"]), DATA_PACKAGE],
    package_dir={DATA_PACKAGE: "data"},
    package_data={"paged_helpers": ["py.typed", "widgets/frontend/*.js"], DATA_PACKAGE: ["*.*", "SHA256SUMS", "*/*"]},
)
