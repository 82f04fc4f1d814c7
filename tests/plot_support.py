"""What the figure tests measure on a drawn matplotlib figure: text sizes, boxes, notebook calls."""

from __future__ import annotations

import ast
import json

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402

from conftest import NOTEBOOKS  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    """Import into a test module: every figure a test opens is closed after it."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def drawn_texts(figure) -> list[Text]:
    """Every visible, non-empty Text artist of the figure (titles, labels, ticks, legends, notes), drawn."""
    figure.canvas.draw()
    return [text for text in figure.findobj(Text) if text.get_visible() and text.get_text().strip()]


def smallest_text(figure) -> tuple[float, str]:
    """(points, text) of the figure's smallest visible text."""
    return min((text.get_fontsize(), text.get_text()) for text in drawn_texts(figure))


def overlap(a, b) -> bool:
    """Whether two display boxes (Bbox) share any area."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def legend_box(figure):
    """The figure's one legend (figure-level or on an axes), drawn, and its box in display pixels."""
    legends = list(figure.legends) + [ax.get_legend() for ax in figure.axes if ax.get_legend()]
    assert len(legends) == 1, f"expected one legend, found {len(legends)}"
    figure.canvas.draw()
    return legends[0], legends[0].get_window_extent()


def _code_cells(notebook: str) -> list[ast.Module]:
    """The notebook's code cells, parsed, in order (cells Python cannot parse are left out)."""
    trees = []
    for cell in json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]:
        if cell["cell_type"] == "code":
            try:
                trees.append(ast.parse("".join(cell["source"])))
            except SyntaxError:  # cell magics and the like
                continue
    return trees


def _bind_literals(tree: ast.Module, constants: dict) -> None:
    """Add the literal constants a cell assigns (``NAME = 4``, ``A, B = 4, 2``) to ``constants``."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, bound = node.targets[0], node.value
        pairs = (
            zip(target.elts, bound.elts, strict=False)
            if isinstance(target, ast.Tuple) and isinstance(bound, ast.Tuple)
            else [(target, bound)]
        )
        for name, literal in pairs:
            if isinstance(name, ast.Name):
                try:
                    constants[name.id] = ast.literal_eval(literal)
                except ValueError:
                    pass


def notebook_constants(notebook: str) -> dict:
    """Every literal constant the notebook's code cells bind (the last binding of each name)."""
    constants: dict = {}
    for tree in _code_cells(notebook):
        _bind_literals(tree, constants)
    return constants


def notebook_calls(notebook: str, function: str) -> list[tuple[ast.Call, dict]]:
    """Each call of ``function`` in the notebook's code cells, with the literal constants bound up
    to and including its cell, for reading its arguments with ``value``."""
    constants: dict = {}
    calls = []
    for tree in _code_cells(notebook):
        _bind_literals(tree, constants)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == function:
                calls.append((node, dict(constants)))
    return calls


def value(node: ast.expr, constants: dict):
    """A call argument's value: a literal, or a name the notebook bound to one."""
    if isinstance(node, ast.Name):
        return constants[node.id]
    return ast.literal_eval(node)
