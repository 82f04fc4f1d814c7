"""The course as a website, built from the learner's release: `make site` (.site/html/index.html).

    .venv/bin/python website/build.py [--out .site/html] [--work .site/work] [--jobs 2]

1. The student release of every notebook, by nbgrader, exactly as `make lab` makes it
   (`autograde/course.py workspace`): solutions and hidden tests removed.
2. The release check's leak search (`release_check.find_leaks`, as `course.py check-release`)
   on every released notebook.
3. Run All on each released notebook, all of them side by side in a scratch folder outside the
   repository (so no published solution is ever found), as in a learner's fresh workspace: the
   figures the helper package draws appear, and where the learner's code is missing the notebook
   prints its one line ("... is not implemented yet: write it in its cell above"). A traceback,
   or an output that used a published solution, stops the build.
4. Pages with Sphinx and MyST-NB (site/conf.py): every notebook, with a note on how to run it,
   "Start here" from README.md, and the copy-on-write story as `make demo-html` writes it.
5. Every file of the built site is searched for the instructor notebooks' solution, hidden-test
   and rubric lines (website/leak_scan.py); a hit fails the build.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import leak_scan
import nbformat

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NOTEBOOK_NAME = re.compile(r"\d\d_[a-z0-9_]+")
# What the grading guard sets (paged_helpers/running/graded.py): the site shows a learner's run, never a graded one.
GRADED_ENV = "PAGED_HELPERS_GRADED"
PUBLISHED_USED = "using the course's published"
STORY_PAGE = "cow_story.html"


class BuildError(Exception):
    pass


def step(message: str) -> None:
    print(f"site: {message}", flush=True)


def course_notebooks(notebooks: Path) -> list[str]:
    return sorted(p.stem for p in notebooks.glob("*.ipynb") if NOTEBOOK_NAME.fullmatch(p.stem))


# ----- 1, 2: the learner's release, and the release check's leak search ----------------------------


def release(notebooks: Path, work: Path) -> dict[str, Path]:
    """The released notebooks (the learner's workspace, as `make lab` fills it), by name."""
    into = work / "release"
    shutil.rmtree(into, ignore_errors=True)  # a fresh copy: the workspace keeps a changed notebook
    command = [sys.executable, str(REPO / "autograde" / "course.py"), "--notebooks", str(notebooks)]
    command += ["workspace", "--into", str(into), "--build", str(work / "nbgrader")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode:
        raise BuildError(f"the learner's release failed:\n{done.stdout}{done.stderr}")
    released = {name: into / f"{name}.ipynb" for name in course_notebooks(notebooks)}
    missing = [name for name, path in released.items() if not path.is_file()]
    if missing:
        raise BuildError(f"no release of {', '.join(missing)} in {into}")
    return released


def check_release(notebooks: Path, released: dict[str, Path]) -> None:
    check = leak_scan.release_check()
    leaks = [
        f"{name}: {leak.secret!r}"
        for name, path in released.items()
        for leak in check.find_leaks(notebooks / f"{name}.ipynb", path)
    ]
    if leaks:
        raise BuildError("the release leaks (course.py check-release would refuse it):\n  " + "\n  ".join(leaks))


# ----- 3: Run All, as a learner's fresh workspace ----------------------------------------------------


def _published_near(folder: Path) -> Path | None:
    """A published solution that load_from_notebook would find from ``folder`` (notebook_loader.find_published)."""
    for parent in [folder, *list(folder.parents)[:3]]:
        if (parent / "published").exists():
            return parent / "published"
    return None


def _run_all(args: tuple[str, str, str, str, int]) -> str:
    """Run one notebook in ``folder`` and write it, outputs and all, to ``target``; returns its name.

    The kernel talks over Unix sockets named after the notebook (``sockets``): kernels started
    side by side never race for a TCP port. A kernel that dies before its first cell is started
    once more (a loaded machine); any later failure is the notebook's.
    """
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    name, folder, sockets, target, timeout = args
    os.environ.pop(GRADED_ENV, None)
    for attempt in (1, 2):
        notebook = nbformat.read(Path(folder) / f"{name}.ipynb", as_version=4)
        kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / f"{name}-{attempt}"))
        client = NotebookClient(
            notebook,
            km=kernel,
            timeout=timeout,
            allow_errors=True,
            store_widget_state=False,
            resources={"metadata": {"path": folder}},
        )
        try:
            client.execute()
            break
        except RuntimeError as error:  # nbclient's "Kernel died before replying to kernel_info"
            started = any(cell.get("outputs") for cell in notebook.cells)
            if attempt == 2 or started or "before replying" not in str(error):
                raise
        finally:
            if kernel.has_kernel:  # nbclient leaves a kernel it was given running
                kernel.shutdown_kernel(now=False)
    nbformat.write(notebook, target)
    return name


def run_all(released: dict[str, Path], work: Path, jobs: int, timeout: int) -> dict[str, Path]:
    """Each released notebook after Run All (as in a fresh workspace), by name."""
    executed = work / "executed"
    shutil.rmtree(executed, ignore_errors=True)
    executed.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="paged-site-run-") as scratch:
        folder = Path(scratch)
        published = _published_near(folder)
        if published is not None:
            raise BuildError(f"{published} holds published solutions the notebooks would use: run elsewhere (TMPDIR)")
        for path in released.values():
            shutil.copyfile(path, folder / path.name)
        sockets = folder / ".kernels"
        sockets.mkdir()
        tasks = [(name, str(folder), str(sockets), str(executed / f"{name}.ipynb"), timeout) for name in released]
        with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
            for name in pool.map(_run_all, tasks):
                step(f"  ran {name}")
    results = {name: executed / f"{name}.ipynb" for name in released}
    problems = [problem for name, path in results.items() for problem in _run_problems(name, path)]
    if problems:
        raise BuildError("Run All on the learner's release did not go as a learner's does:\n  " + "\n  ".join(problems))
    return results


def _run_problems(name: str, path: Path) -> list[str]:
    problems = []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                problems.append(f"{name} cell {index} raised {output.get('ename')}: {output.get('evalue', '')[:200]}")
            text = output.get("text", "") + str(output.get("data", {}).get("text/plain", ""))
            if PUBLISHED_USED in text:
                problems.append(f"{name} cell {index} used a published solution: {text[:200]}")
    return problems


# ----- 4: the pages -----------------------------------------------------------------------------


def _readme_sections(readme: str) -> dict[str, str]:
    """README.md's top-level sections by heading ("" for the text before the first one)."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in readme.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif not line.startswith("# "):
            sections[current].append(line)
    return {heading: "\n".join(lines).strip() + "\n" for heading, lines in sections.items()}


def _section(sections: dict[str, str], starts: str) -> str:
    if starts in sections:
        return sections[starts]
    for heading, text in sections.items():
        if heading.startswith(starts):
            return text
    raise BuildError(f"README.md has no section '## {starts}...' (the site's Start here and course table)")


def _unlink_repository_files(markdown: str) -> str:
    """Links to the repository's own files become their text (the site has no such pages)."""
    return re.sub(r"\[([^\]]+)\]\((?!https?:|#)[^)]*\)", r"\1", markdown)


def _run_note(name: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_markdown_cell(
        "```{admonition} Run this notebook yourself\n"
        ":class: tip\n"
        f"This page is `{name}.ipynb` as a learner receives it: no solutions and no hidden tests, with\n"
        "`raise NotImplementedError()` where your code goes, shown after Run All before any of it is\n"
        "written. The figures are the ones the course draws for you; where a cell needs your code, it\n"
        "prints a line saying so.\n\n"
        f"To run it: set up the course as in [Start here](start-here.md) (`make lab` in a clone of the\n"
        f"repository), then open `{name}.ipynb` in JupyterLab's file browser (it is in `workspace/`).\n"
        "```"
    )


def _page_notebook(source: Path, target: Path) -> None:
    """The executed notebook with the run note under its title; no widget state (no kernel on a page)."""
    notebook = nbformat.read(source, as_version=4)
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "application/vnd.jupyter.widget-view+json" in data and len(data) > 1:
                del data["application/vnd.jupyter.widget-view+json"]  # its static picture stays
    first = notebook.cells[0] if notebook.cells else None
    titled = first is not None and first.cell_type == "markdown" and first.source.startswith("# ")
    notebook.cells.insert(1 if titled else 0, _run_note(source.stem))
    nbformat.write(notebook, target)


def _index(sections: dict[str, str], names: list[str]) -> str:
    table = [line for line in _section(sections, "The course").splitlines() if line.startswith("|")]
    linked = [re.sub(r"^\| `(\d\d_[a-z0-9_]+)` \|", r"| [`\1`](\1.ipynb) |", row) for row in table]
    toctree = "\n".join(["start-here", *names, "copy-on-write"])
    return (
        "# Paged attention and prefix caching\n\n"
        f"{_unlink_repository_files(sections[''])}\n"
        "```{admonition} What this website is\n"
        ":class: note\n"
        "Every notebook of the course as a learner receives it, with its prose, its figures and its code\n"
        "cells, shown after Run All before any code is written. It is built from nbgrader's student\n"
        "release (`make site`): no solutions, no hidden tests and no rubrics, and the build searches every\n"
        "page for them. To run the notebooks and write the code, see [Start here](start-here.md).\n"
        "```\n\n"
        "## The notebooks\n\n" + "\n".join(linked) + "\n\n"
        "The lecture's [copy-on-write story](copy-on-write.md) walks through notebook 04's fork and\n"
        "copy-on-write one step at a time.\n\n"
        f"```{{toctree}}\n:hidden:\n:maxdepth: 1\n\n{toctree}\n```\n"
    )


def _start_here(sections: dict[str, str]) -> str:
    text = _unlink_repository_files(_section(sections, "Start here"))
    return "# Start here\n\n" + re.sub(r"^###", "##", text, flags=re.M)  # its subsections, one level up


def _story_page(extra: Path, notebooks: Path) -> str:
    """The copy-on-write story as `make demo-html` writes it, and the page that shows it."""
    command = [sys.executable, "-m", "paged_helpers.widgets.lecture", "--html", str(extra / STORY_PAGE)]
    written = subprocess.run(
        [*command, "--notebook", str(notebooks)],
        cwd=extra,  # not the repository: load_from_notebook looks for published/ from here
        capture_output=True,
        text=True,
    )
    if written.returncode:
        raise BuildError(f"the copy-on-write story failed:\n{written.stdout}{written.stderr}")
    return (
        "# The copy-on-write story\n\n"
        "Notebook 04's fork and copy-on-write, one step at a time, as the lecture shows it on a projector\n"
        "(the static page of `make demo-html`; the same story runs live at the end of notebook 04). Each\n"
        "step is announced before it runs, so you can guess what the pool and the block tables will do.\n"
        "It draws the pool and the block tables only, never code.\n\n"
        "Click the right half of the picture to go on and the left half to go back (or click it, then use\n"
        f'the arrow keys or Page Up / Page Down). <a href="{STORY_PAGE}">Open it on a page of its own</a>\n'
        "for a projector.\n\n"
        f'<iframe class="cow-story" src="{STORY_PAGE}" title="The copy-on-write story"\n'
        '  style="width: 100%; aspect-ratio: 4 / 3; border: 1px solid #d0d0d0; border-radius: 4px;"></iframe>\n'
    )


def write_pages(executed: dict[str, Path], source: Path, notebooks: Path) -> None:
    shutil.rmtree(source, ignore_errors=True)
    extra = source / "extra"
    extra.mkdir(parents=True)
    shutil.copyfile(HERE / "conf.py", source / "conf.py")
    (source / "_static").mkdir()
    shutil.copyfile(HERE / "course.css", source / "_static" / "course.css")
    sections = _readme_sections((REPO / "README.md").read_text(encoding="utf-8"))
    for name, path in executed.items():
        _page_notebook(path, source / f"{name}.ipynb")
    (source / "index.md").write_text(_index(sections, list(executed)), encoding="utf-8")
    (source / "start-here.md").write_text(_start_here(sections), encoding="utf-8")
    (source / "copy-on-write.md").write_text(_story_page(extra, notebooks), encoding="utf-8")


def sphinx(source: Path, out: Path, work: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-q", "-W", "--keep-going"]
    command += ["-d", str(work / "doctrees"), str(source), str(out)]
    done = subprocess.run(command, cwd=source)
    if done.returncode:
        raise BuildError(f"sphinx-build failed (exit {done.returncode}); its warnings are above")


# ----- 5: the finished site, searched ----------------------------------------------------------------


def check_site(out: Path, notebooks: Path, released: dict[str, Path]) -> None:
    instructor = [notebooks / f"{name}.ipynb" for name in course_notebooks(notebooks)]
    found = leak_scan.scan_site(out, instructor, list(released.values()))
    if found:
        lines = [f"{hit.where.relative_to(out)}: {hit.secret.text!r} ({hit.secret.notebook})" for hit in found]
        raise BuildError("solution, hidden-test or rubric text in the built site:\n  " + "\n  ".join(lines))


def build(out: Path, work: Path, notebooks: Path, jobs: int = 2, timeout: int = 600) -> Path:
    """The whole site into ``out``; returns its index page."""
    started = time.monotonic()
    times: list[str] = []

    def timed(label: str, since: float) -> None:
        times.append(f"{label} {time.monotonic() - since:.0f} s")

    work.mkdir(parents=True, exist_ok=True)
    step("releasing the notebooks as a learner receives them (nbgrader)")
    since = time.monotonic()
    released = release(notebooks, work)
    step("the release check's leak search")
    check_release(notebooks, released)
    timed("release and its check", since)
    step(f"Run All on {len(released)} notebooks, as a learner's fresh workspace ({jobs} at a time)")
    since = time.monotonic()
    executed = run_all(released, work, jobs, timeout)
    timed("Run All", since)
    step("pages (Sphinx, MyST-NB)")
    since = time.monotonic()
    write_pages(executed, work / "source", notebooks)
    sphinx(work / "source", out, work)
    timed("pages", since)
    step("searching every file of the site for solution, hidden-test and rubric text")
    since = time.monotonic()
    check_site(out, notebooks, released)
    timed("search", since)
    step(f"built {out / 'index.html'} in {time.monotonic() - started:.0f} s ({', '.join(times)})")
    return out / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".site" / "html", help="the website (default: .site/html)")
    parser.add_argument("--work", type=Path, default=REPO / ".site" / "work", help="intermediate files")
    parser.add_argument("--notebooks", type=Path, default=REPO / "notebooks", help="the instructor notebooks")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at a time (default 2)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    try:
        build(args.out.resolve(), args.work.resolve(), args.notebooks.resolve(), args.jobs, args.timeout)
    except BuildError as error:
        print(f"site: FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
