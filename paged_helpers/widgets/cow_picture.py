"""The CowDemo's picture: the static HTML (an export, nbgrader feedback, the stage) and the live widget.

``CowPicture`` is the part of ``CowDemo`` that draws. It reads the demo's state (``history``,
``problem``, ``presented``, ``view``, ``cache_class``) and never changes it; the live layout itself
is ``cow_controls.CowControls``, built on first display and held in ``_face``.
"""

from __future__ import annotations

from typing import Any

from . import display, render


class CowPicture:
    """How a ``CowDemo`` shows itself: ``to_html`` (static), ``widget`` and ``controls`` (live)."""

    def to_html(self, projector: bool = False) -> str:
        """The static picture: the latest step (the earlier ones folded) and the pool (what an HTML export shows).

        ``projector``: as the stage shows it (``BlockTableView.picture_html``): the pool compact,
        no text smaller than the page's, no legend and no table texts (the tiles show the words).
        """
        recent = render.message_lines(self.history, presentation=projector)
        if self.problem:
            body = render.error_box(self.problem)
        else:
            body = self.view.picture_html(projector=projector)
        name = self.cache_class.__name__
        title = f'<div class="ph-cow-title" style="font-weight:700;font-size:1.2em">Copy-on-write with {name}</div>'
        return render.page(title + recent + body, kind="cow-demo", presentation=projector)

    def screen_html(self) -> str:
        """What the live demo shows under its controls: the projector's picture while presented."""
        return self.to_html(projector=self.presented)

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return display.mimebundle(lambda: self.widget, self.to_html(), repr(self))

    @property
    def widget(self) -> Any:
        """The live demo: controls above the picture (built on first use; ``cow_controls``)."""
        if self._face is None:
            from .cow_controls import CowControls

            self._face = CowControls(self)
        return self._face.box

    @property
    def controls(self) -> dict[str, Any]:
        """The live demo's controls by name (create, fork, write, free, reset, tokens, sequence, present)."""
        self.widget  # noqa: B018  (built on first use)
        return self._face.controls

    def _redraw(self) -> None:
        if self._face is not None:
            self._face.redraw()
        self._update_snapshots()
