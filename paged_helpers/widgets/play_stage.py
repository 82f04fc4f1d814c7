"""PlayStage: the free-play demo over the whole window, for a projector (``frontend/play_stage.js``).

A CowDemo puts one in its controls: its "Present" button is the demo's one presentation mode.
It stages the demo it sits in: the demo covers the window and its type is fitted like the
story's (the largest size between ``stage.js``'s MIN_FONT_PX and MAX_FONT_PX at which the whole
demo fits, refitted after every step and every resize); Esc or "Leave" puts it back. ``staged``
says whether it is on the stage (the browser sets it), so the demo can draw its picture for a
projector meanwhile; the demo's Python object stays the only owner of what is shown.
"""

from __future__ import annotations

import anywidget
import traitlets

from . import stage


class PlayStage(anywidget.AnyWidget):
    _esm = stage.widget_module("play_stage.js")

    staged = traitlets.Bool(False).tag(sync=True)
