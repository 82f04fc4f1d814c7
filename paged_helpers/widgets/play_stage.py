"""PlayStage: the free-play demo over the whole window, for a projector (``frontend/play_stage.js``).

A CowDemo puts one in its controls. Its "Present" button stages the demo it sits in: the demo
covers the window and its type is fitted like the story's stage (the largest size between
``stage.js``'s MIN_FONT_PX and MAX_FONT_PX at which the whole demo fits, refitted after every
step); Esc or "Leave" puts it back. It holds no state of its own: the demo's Python object stays
the only owner of what is shown.
"""

from __future__ import annotations

import anywidget

from . import stage


class PlayStage(anywidget.AnyWidget):
    _esm = stage.widget_module("play_stage.js")
