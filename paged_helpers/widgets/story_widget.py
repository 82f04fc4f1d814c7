"""StoryWidget: the live face of a Story in JupyterLab (an anywidget).

The kernel keeps the story; the browser shows ``frame`` and sends requests ({"action":
"next" | "back" | "restart" | "end", "request": n}) from its buttons and keys. The widget
answers each request by running it and then raising ``served`` to n, which is how the browser
knows the kernel is alive: a request left unanswered, or a widget JupyterLab marks as
disconnected (kernel restarted, dead or shut down), puts a warning on the widget.
"""

from __future__ import annotations

from typing import Any

import anywidget
import traitlets

from . import stage


class StoryWidget(anywidget.AnyWidget):
    _esm = stage.widget_module("story_widget.js")

    frame = traitlets.Unicode("").tag(sync=True)
    position = traitlets.Int(0).tag(sync=True)
    total = traitlets.Int(0).tag(sync=True)
    served = traitlets.Int(0).tag(sync=True)

    def __init__(self, story: Any):
        super().__init__()
        self.story = story
        self.add_class("ph-story-widget")
        story.observe(self._follow, names=["frame", "position", "total"])
        self._follow()
        self.on_msg(self._handle)

    def _follow(self, change: Any = None) -> None:
        with self.hold_sync():
            self.frame = self.story.frame
            self.position = self.story.position
            self.total = self.story.total

    def _handle(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        action = content.get("action")
        steps = {
            "next": self.story.forward,
            "back": self.story.back,
            "restart": self.story.restart,
            "end": lambda: self.story.go(self.story.total),
        }
        if action in steps:
            steps[action]()
        self.served = max(self.served, int(content.get("request", 0)))
