"""The presentation stage's JavaScript, and the static page a story exports.

The scripts live in ``frontend/``: ``stage.js`` (fitting a frame to the window, the keys a
clicker sends, the kernel-gone banner) is shared by the live widgets (``story_widget.js``,
``kernel_watch.js``, loaded by anywidget) and by the exported page (``static_story.js``), so a
frame is scaled and walked the same way with and without a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from importlib import resources

from . import palette


def script(name: str) -> str:
    """The text of ``frontend/<name>``."""
    return resources.files(__package__).joinpath("frontend", name).read_text(encoding="utf-8")


def widget_module(name: str) -> str:
    """An anywidget ES module: the shared stage code followed by ``frontend/<name>``."""
    return script("stage.js") + "\n" + script(name)


def static_page(title: str, frames: Sequence[str]) -> str:
    """One self-contained HTML page showing ``frames`` one at a time (no kernel, no network)."""
    slides = "".join(
        f'<section class="ph-slide" data-step="{index}"{" hidden" if index else ""}>{frame}</section>'
        for index, frame in enumerate(frames)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title>"
        f"<style>html,body{{margin:0;height:100%;overflow:hidden;font-family:{palette.FONT}}}</style>"
        '</head><body><div class="ph-story-stage">'
        f'<div class="ph-story-content">{slides}</div></div>'
        "<script>\n"
        + script("stage.js")
        + "\nstyleStage(document.querySelector('.ph-story-stage'));"
        + "\nstyleContent(document.querySelector('.ph-story-content'));\n"
        + script("static_story.js")
        + "</script></body></html>\n"
    )
