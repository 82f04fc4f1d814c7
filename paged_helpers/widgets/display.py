"""How a widget shows itself: live controls in a notebook, a static picture everywhere else.

Each widget object holds its state in traitlets and builds its ipywidgets only when first
displayed. Its MIME bundle (``mimebundle``) carries both the widget view and a ``text/html``
picture: JupyterLab draws the live widget, while an HTML export, a viewer without the widget
manager, or nbgrader's feedback falls back to the picture.

The picture follows the state (``ShowsItself``). Displayed in a notebook, a widget puts two
outputs in its cell: the live view (the widget view only), and a picture with a display id
(``text/html`` inside ``.ph-static-snapshot``) that is replaced after every change, whether a
button or a later cell made it (IPython's ``update_display``, which JupyterLab, nbclient and
nbgrader's executor all apply to the earlier output). So a saved notebook, its HTML export and
nbgrader's feedback show the last state reached, not the state at display time. While a live
view is on the page, JupyterLab hides the pictures (``SNAPSHOT_HIDING_CSS``, put on the page by
the widgets' KernelWatch), so the picture is never shown twice; a notebook reopened without its
kernel, or exported, has no live view and shows the picture.

While nbgrader executes a notebook (``nbgrader autograde`` sets ``NBGRADER_EXECUTION=autograde``,
``nbgrader validate`` sets it to ``validate``; see nbgrader/converters/autograde.py and
nbgrader/validator.py) no ipywidget is ever created: the picture alone is shown, so grading
opens no comms and runs no callbacks.
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


SNAPSHOT_CLASS = "ph-static-snapshot"
# JupyterLab's output of a picture, hidden while a live widget (its KernelWatch) is on the page.
SNAPSHOT_HIDING_CSS = f".jp-OutputArea-child:has(.{SNAPSHOT_CLASS}){{display:none}}"


class ShowsItself:
    """A widget's display: the live view, and a picture that follows its state (see the module).

    A subclass defines ``widget`` (its live ipywidget), ``to_html()`` (the picture) and may define
    ``_plain_text()``; it calls ``_update_snapshots()`` after every change of what it shows.
    """

    def _plain_text(self) -> str:
        return repr(self)

    def _snapshot_bundle(self) -> dict[str, str]:
        return {"text/plain": self._plain_text(), "text/html": f'<div class="{SNAPSHOT_CLASS}">{self.to_html()}</div>'}

    def _ipython_display_(self) -> None:
        from IPython.display import display

        if not static_only():
            view = self.widget._repr_mimebundle_() or {}
            if isinstance(view, tuple):  # anywidget answers (data, metadata)
                view = view[0] or {}
            # The view alone: its text/plain would be a second copy of the picture's outside Lab.
            display({key: value for key, value in view.items() if key != "text/plain"}, raw=True)
        handle = display(self._snapshot_bundle(), raw=True, display_id=True)
        if handle is not None:
            self.__dict__.setdefault("_snapshots", []).append(handle)

    def _update_snapshots(self) -> None:
        """Replace every displayed picture of this widget with the current one."""
        handles = self.__dict__.get("_snapshots", [])
        if handles:
            bundle = self._snapshot_bundle()
            for handle in handles:
                handle.update(bundle, raw=True)
