"""A learner's install holds what the course needs and nothing else (issue 40).

Two sets of exact pins:

- ``requirements/learner.txt``: what ``make setup`` installs (``make lab``, ``make demo``,
  ``make publish``, ``make instructor``), and what environment.yml (conda, Binder) installs;
- ``requirements/contributor.txt``: ``-r learner.txt``, ``-r site.txt`` (the website's build tool),
  then the tests', the browser's and the linters' packages (``make test``, ``make lint``, .ci/run).

pyproject.toml says the same split as ranges: ``[project] dependencies`` and the ``course`` extra
are the learner's set, the ``test`` extra (``paged-helpers[course]`` and more) the contributor's.

The imports are read statically (no code of the course runs) and mapped to the distributions that
provide them by ``importlib.metadata.packages_distributions()``; a pin "provides" every
distribution it pulls in, as this environment's installed metadata says (extras and markers
followed). So the test runs in the contributor's environment, where every pin is installed.
"""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

REQUIREMENTS = ROOT / "requirements"
LEARNER = REQUIREMENTS / "learner.txt"
CONTRIBUTOR = REQUIREMENTS / "contributor.txt"

# Never on a learner's machine, not even pulled in by another package.
CONTRIBUTOR_ONLY = {"pytest", "ruff", "playwright", "transformers", "import-linter"}

# What the learner's path runs: the helper package, the grader's code (course.py workspace and
# publish run nbgrader with autograde/nbgrader_config.py, which loads paged_grading), the chapter's
# demos (run.py), the lab's and the demo's Jupyter configuration, and the notebooks' own cells.
LEARNER_CODE = ["paged_helpers", "autograde", "run.py", "config", "demo"]
LEARNER_NOTEBOOKS = ["notebooks", "demo"]
CONTRIBUTOR_CODE = ["tests", "tools", "website"]

# Modules the learner's path imports only where a learner never goes, each with where it comes from.
# psycopg2: only for a shared PostgreSQL gradebook (course.py grade --jobs N on several machines),
# checked for before use (the throwaway server of the parallel-grading tests says what to install).
# procrastinate, psycopg (3) and tqdm: only for grading on many machines (course.py grade --queue,
# worker, status: paged_grading.many_machines), imported by those commands alone.
NOT_FOR_LEARNERS = {
    "psycopg2": "psycopg2-binary",
    "procrastinate": "procrastinate",
    "psycopg": "psycopg",
    "psycopg_pool": "psycopg-pool",
    "tqdm": "tqdm",
}

COMMENT = re.compile(r"\s+#.*$")


def requirement_lines(path: Path) -> list[str]:
    """The lines of a requirements file that say something, comments removed, in order."""
    lines = []
    for raw in path.read_text().splitlines():
        line = COMMENT.sub("", raw).strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def pins(path: Path, *, follow: bool = True) -> dict[str, Requirement]:
    """name -> requirement for every pin in ``path`` (and in the files it includes, if ``follow``)."""
    found: dict[str, Requirement] = {}
    for line in requirement_lines(path):
        if line.startswith(("-r ", "--requirement ")):
            if follow:
                found.update(pins(path.parent / line.split(maxsplit=1)[1]))
            continue
        assert not line.startswith("-"), f"{path.name}: an option where only pins belong: {line!r}"
        requirement = Requirement(line)
        found[canonicalize_name(requirement.name)] = requirement
    return found


def applies(requirement: Requirement, extras: frozenset[str] = frozenset()) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**default_environment(), "extra": e}) for e in extras | {""})


def closure(roots: dict[str, Requirement]) -> set[str]:
    """Every distribution the pins install: the pins and what they require, transitively."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(name, frozenset(r.extras)) for name, r in roots.items() if applies(r)]
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} is pinned but not installed here: run `make contributor` first")
        for line in requires:
            requirement = Requirement(line)
            if applies(requirement, extras):
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return {name for name, _ in seen}


@cache
def module_providers() -> dict[str, set[str]]:
    return {
        module: {canonicalize_name(d) for d in dists} for module, dists in metadata.packages_distributions().items()
    }


def python_files(parts: list[str]) -> list[Path]:
    files = []
    for part in parts:
        path = ROOT / part
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f for f in files if "__pycache__" not in f.parts]


def local_names(parts: list[str]) -> set[str]:
    """Modules that are the repository's own: every .py file and package folder under ``parts``."""
    names = {"paged_helpers", "paged_grading"}
    for path in python_files(parts):
        names.add(path.stem)
        names.update(p.name for p in path.relative_to(ROOT).parents if p.name)
    return names


def imported(source: str) -> set[str]:
    """Top-level names of the absolute imports in ``source``, and of pytest.importorskip("...")."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "importorskip"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(str(node.args[0].value).split(".")[0])
    return names


def notebook_sources(parts: list[str]) -> dict[str, str]:
    sources = {}
    for part in parts:
        for path in sorted((ROOT / part).glob("*.ipynb")):
            for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
                if cell.cell_type == "code":
                    # IPython's magics and shell lines are not Python
                    code = "\n".join(
                        line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))
                    )
                    sources[f"{path.relative_to(ROOT)} cell {i}"] = code
    return sources


def third_party_imports(code: list[str], notebooks: list[str] = ()) -> dict[str, set[str]]:
    """module -> where it is imported, for every module neither the standard library's nor ours."""
    sources = {str(path.relative_to(ROOT)): path.read_text() for path in python_files(code)}
    sources.update(notebook_sources(list(notebooks)))
    ours = local_names(code)
    found: dict[str, set[str]] = {}
    for where, source in sources.items():
        for module in imported(source) - ours - set(sys.stdlib_module_names) - {"__future__"}:
            found.setdefault(module, set()).add(where)
    return found


def unprovided(imports: dict[str, set[str]], provided: set[str]) -> list[str]:
    missing = []
    for module, where in sorted(imports.items()):
        dists = module_providers().get(module, set())
        if not dists & provided:
            missing.append(
                f"{module} (from {', '.join(sorted(dists)) or 'no installed package'}), imported by {sorted(where)[:3]}"
            )
    return missing


def test_the_learner_set_names_no_test_browser_lint_or_site_package():
    learner = pins(LEARNER)
    named = CONTRIBUTOR_ONLY & set(learner)
    assert not named, f"{LEARNER.name} pins {sorted(named)}: they belong in {CONTRIBUTOR.name}"
    contributor_own = set(pins(CONTRIBUTOR, follow=False))
    assert not contributor_own & set(learner), f"pinned in both files: {sorted(contributor_own & set(learner))}"
    pulled = CONTRIBUTOR_ONLY & closure(learner)
    assert not pulled, f"a learner pin pulls in {sorted(pulled)}"


def test_every_learner_pin_is_exact():
    loose = [
        str(r) for r in pins(LEARNER).values() if len(r.specifier) != 1 or next(iter(r.specifier)).operator != "=="
    ]
    assert not loose, f"{LEARNER.name}: exact pins only (torch above all: see the file's comment): {loose}"


def test_the_contributor_file_starts_from_the_learner_file():
    lines = requirement_lines(CONTRIBUTOR)
    assert lines[0] == "-r learner.txt", (
        f"{CONTRIBUTOR.name} must start with `-r learner.txt`, starts with {lines[0]!r}"
    )
    assert "-r site.txt" in lines, f"{CONTRIBUTOR.name} must include the website's pins, `-r site.txt`"
    assert (REQUIREMENTS / "site.txt").is_file()


def test_every_module_the_learner_path_imports_comes_with_a_learner_pin():
    imports = third_party_imports(LEARNER_CODE, LEARNER_NOTEBOOKS)
    assert {"torch", "triton", "nbgrader"} <= set(imports), "the scan found too little: is it reading the code?"
    for module in NOT_FOR_LEARNERS:
        imports.pop(module, None)
    missing = unprovided(imports, closure(pins(LEARNER)))
    assert not missing, "no learner pin provides:\n" + "\n".join(missing)


def test_what_learners_do_without_comes_with_the_contributor_set():
    provided = closure(pins(CONTRIBUTOR))
    for module, dist in NOT_FOR_LEARNERS.items():
        assert dist in provided, f"{module}: {dist} is pinned nowhere"


def test_every_module_the_tests_import_comes_with_a_contributor_pin():
    imports = third_party_imports(CONTRIBUTOR_CODE + LEARNER_CODE)
    assert {"pytest", "transformers", "playwright"} <= set(imports), "the scan found too little"
    missing = unprovided(imports, closure(pins(CONTRIBUTOR)))
    assert not missing, "no contributor pin provides:\n" + "\n".join(missing)


def test_pyproject_says_the_same_split():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's tomllib reads pyproject.toml")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def ranges(lines):
        return {canonicalize_name(r.name): r for r in map(Requirement, lines)}

    package = ranges(project["dependencies"] + extras["course"])
    test = ranges(extras["test"])
    itself = canonicalize_name(project["name"])
    assert itself in test and test.pop(itself).extras == {"course"}, "the test extra starts from paged-helpers[course]"
    learner, contributor_own = pins(LEARNER), pins(CONTRIBUTOR, follow=False)
    assert set(package) == set(learner), f"dependencies + course extra != {LEARNER.name}"
    assert set(test) == set(contributor_own), f"test extra != {CONTRIBUTOR.name}'s own pins"
    for name, pin in {**learner, **contributor_own}.items():
        declared = package.get(name) or test[name]
        assert declared.marker == pin.marker, f"{name}: pyproject's marker {declared.marker} != the pin's {pin.marker}"
        version = next(iter(pin.specifier)).version
        assert declared.specifier.contains(version), f"{name}=={version} is outside pyproject's {declared.specifier}"


INSTALL_FILES = ["Makefile", "environment.yml", "README.md", "CONTRIBUTING.md", ".ci/run", "postBuild"]


@pytest.mark.parametrize("name", INSTALL_FILES)
def test_every_pins_file_named_exists(name):
    text = (ROOT / name).read_text()
    named = set(re.findall(r"requirements/[\w.-]+\.txt", text))
    assert all((ROOT / n).is_file() for n in named), (
        f"{name} names {sorted(n for n in named if not (ROOT / n).is_file())}"
    )


def test_the_learners_install_is_the_learner_set():
    assert "-r requirements/learner.txt" in (ROOT / "environment.yml").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PINS\s*:?=\s*requirements/learner\.txt$", makefile, re.M)
    assert re.search(r"^CONTRIBUTOR_PINS\s*:?=\s*requirements/contributor\.txt$", makefile, re.M)
