"""Make every notebook's Run All reach the end while the learner's code is unfinished.

Re-runnable (a second run changes nothing) and safe to apply again after a merge:

    .venv/bin/python tools/learner_cells.py            # rewrite notebooks/*.ipynb in place
    .venv/bin/python tools/learner_cells.py --check    # exit 1 if a notebook still needs it

Two edits, decided from the notebook itself, never from a list of cells kept by hand:

* A "Try it" cell (not a solution or graded cell, and not one that calls a check: checks
  report unfinished code themselves) that uses a name the learner defines (in a
  solution cell, or loaded from an earlier notebook with ``load_from_notebook``), or a name
  made by an earlier "Try it" cell, is wrapped in ``with ph.try_it(...):`` (a cell that also loads
  from an earlier notebook too: only a cell that does nothing but load is left alone) so that an
  unfinished stub prints one line instead of stopping Run All (see paged_helpers/unfinished.py).
  A cell that ends in a bare expression (a widget, a figure) displays it explicitly, since
  inside a ``with`` block IPython would not. Cells that show a plot, widget or demo name it, so
  the line says what it waits for.
* The visible check call of a graded cell gets ``unfinished="note"``: in the learner's
  workspace it prints "not implemented yet" and Run All goes on; in a graded run it still
  fails (paged_helpers.running.graded.graded_run).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import nbformat

from paged_helpers.unfinished import top_level_names

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
WRAP = "with ph.try_it("

# What a cell shows, recognised by the helper it calls: named in the line it prints while waiting.
SHOWS = {
    "CowDemo(": "The copy-on-write demo",
    "fork_block_counts(": "The block-count demo",
    "BlockTableView(": "The block-table widget",
    "PrefixCacheView(": "The prefix-cache view",
    "shared_prompt_run(": "The shared-prompt demo",
    "benchmark(": "The benchmark",
    "compare_engines(": "The engine comparison",
    "plot_engine_timelines(": "The timeline plot",
}

_CHECK_CALL = re.compile(r"^(check_\w+\(.*)\)\s*$")


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _parse(source: str) -> ast.Module | None:
    kept = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    try:
        return ast.parse(kept)
    except SyntaxError:
        return None


def _used_names(tree: ast.AST, top_level_only: bool = False) -> set[str]:
    """Names a cell reads; ``top_level_only``: only where the cell runs them, not in its function bodies."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if top_level_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _defined_functions(notebook) -> set[str]:
    """Functions the notebook's own cells define (their calls return None, like ``show(...)``)."""
    names: set[str] = set()
    for cell in notebook.cells:
        tree = _parse(cell.source) if cell.cell_type == "code" else None
        if tree is not None:
            names |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def _loads_earlier_notebook(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "load_from_notebook"
        for node in ast.walk(tree)
    )


def _wrapped(source: str, shows: str, quiet_functions: set[str]) -> str:
    """The cell inside ``with ph.try_it(...)``; a final bare expression is displayed explicitly.

    A final call is displayed too (IPython shows what it returns), except a call of print,
    display or a function of the notebook's own (they return None).
    """
    tree = _parse(source)
    lines = source.splitlines()
    last = tree.body[-1] if tree and tree.body else None
    call = last.value if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call) else None
    called = getattr(call.func, "id", None) if call is not None else None
    if (
        isinstance(last, ast.Expr)
        and not lines[last.end_lineno - 1].rstrip().endswith(";")
        and called not in {"print", "display", *quiet_functions}
    ):
        start, end = last.lineno - 1, last.end_lineno - 1
        lines[start] = lines[start][: last.col_offset] + "display(" + lines[start][last.col_offset :]
        lines[end] = lines[end].rstrip() + ")"
    header = f"{WRAP}{shows!r})" if shows else f"{WRAP})"
    body = "\n".join(("    " + line) if line.strip() else "" for line in lines)
    return f"{header}:\n{body}"


def _calls_a_check(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Call) and getattr(node.func, "id", "").startswith("check_") for node in ast.walk(tree)
    )


def _unwrapped(source: str) -> str:
    """Undo ``_wrapped`` (for a cell that no longer needs it)."""
    body = source.splitlines()[1:]
    lines = [line.removeprefix("    ") for line in body]
    last = lines[-1] if lines else ""
    if last.startswith("display(") and last.endswith(")"):
        lines[-1] = last[len("display(") : -1]
    return "\n".join(lines)


def _with_note(source: str) -> str:
    """``unfinished="note"`` on the visible check calls of a graded cell (not its hidden tests)."""
    out, hidden = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("### BEGIN HIDDEN TESTS"):
            hidden = True
        elif stripped.startswith("### END HIDDEN TESTS"):
            hidden = False
        match = _CHECK_CALL.match(line)
        if match and not hidden and "unfinished=" not in line:
            line = f'{match.group(1)}, unfinished="note")'
        out.append(line)
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def learner_notebook(notebook) -> bool:
    """Apply both edits to one notebook; True if anything changed."""
    learner_names: set[str] = set()  # names that hold, or run, the learner's code
    labels: dict[str, str] = {}  # name -> what it shows ("The copy-on-write demo")
    quiet_functions = _defined_functions(notebook)
    changed = False
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        meta = _nbgrader(cell)
        tree = _parse(cell.source)
        if tree is None:
            continue
        if meta.get("solution"):
            learner_names |= top_level_names(tree)
            continue
        if meta.get("grade"):
            new = _with_note(cell.source)
            changed |= new != cell.source
            cell.source = new
            continue
        runs_learner_code = bool(_used_names(tree, top_level_only=True) & learner_names)
        if _loads_earlier_notebook(tree):
            learner_names |= top_level_names(tree)
            if not runs_learner_code:  # only loads: nothing in it can hit a stub
                continue
        made = top_level_names(tree)
        if _used_names(tree) & learner_names:
            learner_names |= made
        if _calls_a_check(tree):  # a check says "not implemented yet" itself (unfinished="note")
            if cell.source.startswith(WRAP):
                cell.source = _unwrapped(cell.source)
                changed = True
            continue
        already = cell.source.startswith(WRAP)
        if already or _used_names(tree, top_level_only=True) & learner_names:
            shows = next((label for needle, label in SHOWS.items() if needle in cell.source), "")
            if not shows and len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):  # `demo`: shows a widget
                shows = next((labels[n] for n in sorted(_used_names(tree) & labels.keys())), "")
            labels.update(dict.fromkeys(made, shows) if shows else {})
            if not already:
                cell.source = _wrapped(cell.source, shows, quiet_functions)
                changed = True
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook needs it")
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    pending = []
    for path in paths:
        notebook = nbformat.read(path, as_version=4)
        if learner_notebook(notebook):
            pending.append(path.name)
            if not args.check:
                nbformat.write(notebook, path)
    verb = "need" if args.check else "updated"
    print(f"{verb}: {', '.join(pending) if pending else 'none'}")
    return 1 if args.check and pending else 0


if __name__ == "__main__":
    sys.exit(main())
