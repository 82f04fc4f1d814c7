"""How a widget shows itself: live controls in a notebook, a static picture everywhere else.

Each widget object holds its state in traitlets and builds its ipywidgets only when first
displayed. Its MIME bundle carries both the widget view and a ``text/html`` picture: JupyterLab
draws the live widget, while an HTML export, a viewer without the widget manager, or nbgrader's
feedback falls back to the picture.

While nbgrader executes a notebook (``nbgrader autograde`` sets ``NBGRADER_EXECUTION=autograde``,
``nbgrader validate`` sets it to ``validate``; see nbgrader/converters/autograde.py and
nbgrader/validator.py) no ipywidget is ever created: the bundle holds the picture only, so
grading opens no comms and runs no callbacks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

NBGRADER_VARIABLE = "NBGRADER_EXECUTION"


def static_only() -> bool:
    """True while nbgrader is executing the notebook (autograde or validate)."""
    return bool(os.environ.get(NBGRADER_VARIABLE))


def mimebundle(build_widget: Callable[[], Any], html: str, plain: str) -> dict[str, Any]:
    """The widget's view plus the static picture; the picture alone under nbgrader."""
    bundle: dict[str, Any] = {"text/plain": plain, "text/html": html}
    if not static_only():
        view = build_widget()._repr_mimebundle_() or {}
        if isinstance(view, tuple):  # anywidget answers (data, metadata)
            view = view[0] or {}
        bundle.update({key: value for key, value in view.items() if key != "text/plain"})
    return bundle
