"""The CowDemo's live layout: the controls row, the picture under it, and its stage for a projector.

``CowControls(demo)`` builds the ipywidgets (only when the demo is first displayed) and keeps them
in step with the demo's state; it holds no state of its own. The row: prompt tokens and
**Create prompt**, the **sequence** the next three buttons act on, **Fork**, **Write a token**,
**Free**, **Reset**, and **Present** (a ``PlayStage``): the one presentation mode. Present puts
the whole demo on a stage over the window, the type fitted to it (``frontend/play_stage.js``);
while it is there the demo draws its picture for a projector (``demo.presented``: the pool
compact, no text smaller than the stage's type) and hides what a room need not read (the title,
the folded earlier steps).

Every size on the stage is in em of the one font size the stage fits, so the picture and the
controls grow and shrink together. ipywidgets 8 gives text fields and dropdowns no font-size
style, hence the style sheet (``STAGE_CSS``), which only applies to a staged demo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DEMO = ".ph-cow-demo-widget.ph-staged"
BESIDE = f'{DEMO}[data-layout^="beside"] .ph-cow-demo'
DENSE = f"{DEMO}[data-dense]"
TILE_EM, GAP_EM = 8.4, 0.35  # render's presentation tile and the gap between tiles


def _pool_width(tiles: int) -> str:
    return f"{tiles * TILE_EM + (tiles - 1) * GAP_EM:.2f}em"


STAGE_CSS = (
    f"{DEMO} :is(input, select, label, button, .widget-html, .widget-html-content, .ph-widget)"
    "{font-size:1em !important}"
    f"{DEMO} :is(input, select, button, .widget-label, .widget-inline-hbox)"
    "{height:auto !important;line-height:1.3 !important}"
    f"{DEMO} button{{padding:0.15em 0.6em !important}}"
    f"{DEMO} .ph-prompt-tokens{{width:10.5em !important}}"
    f"{DEMO} .ph-sequence{{width:9.5em !important}}"
    f"{DEMO} :is(.ph-play-stage, .ph-play-present){{width:auto !important}}"
    # Block tables a little tighter, so a table of the pool's every block stays on one line.
    f"{DEMO} .ph-entry{{padding:0.05em 0.25em !important}}"
    # The stage is a flex column of fixed height: its rows must not shrink (a shrunk row clips
    # its controls and hides the overflow the fitting measures).
    f"{DEMO}>*{{flex-shrink:0 !important}}"
    f"{DEMO} .widget-box{{overflow:visible !important}}"
    # The picture spans the stage: no ipywidgets margin beside a 100% width.
    f"{DEMO} .ph-cow-screen{{width:auto !important;margin-left:0 !important;margin-right:0 !important}}"
    # What the room need not read: the title, the folded earlier steps, a tile saying "0 free".
    f'{DEMO} :is(.ph-cow-title, .ph-history, .ph-free-count[data-free="0"]){{display:none !important}}'
    # The layouts play_stage.js chooses between: the tables under the pool ("below"), or beside
    # a pool at most N tiles wide ("beside-N").
    f"{BESIDE}{{display:grid;grid-template-columns:auto minmax(12em,1fr);column-gap:1.2em;align-items:start}}"
    f"{BESIDE}>*{{grid-column:1/-1}}"
    f"{BESIDE}>.ph-pool{{grid-column:1;grid-row:span 2}}"
    f"{BESIDE}>:is(.ph-tables-heading,.ph-tables){{grid-column:2}}"
    + "".join(f'{DEMO}[data-layout="beside-{n}"] .ph-pool{{max-width:{_pool_width(n)} !important}}' for n in (4, 5, 6))
    # Four name chips on one line of a tile.
    + f"{DEMO} .ph-block .ph-chip{{padding:0 0.15em !important}}"
    # Dense, only where nothing else fits at the smallest type: a tile that shows its slots' words
    # (a dot for an empty slot) leaves out the fill bar, and "shared by N" is left to the thick
    # border and "ref N".
    + f"{DENSE} .ph-block:has(.ph-words) .ph-fill{{display:none !important}}"
    + f"{DENSE} .ph-note-shared{{display:none}}"
    + f"{DENSE} .ph-note:not(:has(:not(.ph-note-shared))){{display:none}}"
)

BUTTONS = (
    # name, label, tooltip, icon
    ("create", "Create prompt", "A new sequence with this many prompt tokens", "plus"),
    ("fork", "Fork", "A child that shares the selected sequence's blocks", "code-branch"),
    ("write", "Write a token", "reserve(seq, 1), then write its keys and values", "pen"),
    ("free", "Free", "Release the selected sequence's blocks", "trash"),
    ("reset", "Reset", "Start again with an empty cache", "undo"),
)


class CowControls:
    """The demo's ipywidgets: ``box`` (what the notebook shows), ``controls`` by name, ``screen``."""

    def __init__(self, demo: Any):
        import ipywidgets as w

        from .kernel_watch import KernelWatch
        from .play_stage import PlayStage

        self.demo = demo
        self._syncing = False
        actions: dict[str, Callable[[], Any]] = {
            "create": lambda: demo.create(self.controls["tokens"].value),
            "fork": demo.fork,
            "write": demo.write,
            "free": demo.free,
            "reset": demo.reset,
        }
        self.controls: dict[str, Any] = {}
        for name, label, tip, icon in BUTTONS:
            button = w.Button(description=label, tooltip=tip, icon=icon, layout=w.Layout(width="auto"))
            button.add_class(f"ph-do-{name}")  # ph-do-free: not the tiles' ph-free
            button.on_click(lambda _button, action=actions[name]: action())
            self.controls[name] = button
        tokens = w.BoundedIntText(
            value=demo.prompt_tokens,
            min=1,
            max=demo.sizes["num_blocks"] * demo.sizes["block_size"],
            description="prompt tokens",
            layout=w.Layout(width="11em"),
            style={"description_width": "initial"},
        )
        tokens.add_class("ph-prompt-tokens")
        choice = w.Dropdown(
            description="sequence",
            options=demo.sequences,
            style={"description_width": "initial"},
            layout=w.Layout(width="11em"),
        )
        choice.add_class("ph-sequence")
        choice.observe(self._choice_changed, names="value")
        self.stage = PlayStage()
        # On the stage the demo draws its picture for a projector; back in the notebook, as before.
        self.stage.observe(lambda change: setattr(demo, "presented", change["new"]), names="staged")
        self.controls.update(tokens=tokens, sequence=choice, present=self.stage)
        row = w.HBox(
            [tokens, self.controls["create"], choice, *(self.controls[n] for n in ("fork", "write", "free", "reset"))]
            + [self.stage],
            layout=w.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.screen = w.HTML(demo.screen_html(), layout=w.Layout(width="100%"))
        self.screen.add_class("ph-cow-screen")
        self.box = w.VBox([w.HTML(f"<style>{STAGE_CSS}</style>"), KernelWatch(), row, self.screen])
        self.box.add_class("ph-cow-demo-widget")
        self.sync()

    def redraw(self) -> None:
        self.screen.value = self.demo.screen_html()
        self.sync()

    def _choice_changed(self, change: dict) -> None:
        if not self._syncing:
            self.demo.selected = change["new"] or ""

    def sync(self) -> None:
        """Controls follow the state: the sequence list and what can be pressed."""
        demo, controls = self.demo, self.controls
        choice = controls["sequence"]
        self._syncing = True  # setting options would otherwise select the first one for us
        try:
            if list(choice.options) != demo.sequences:
                choice.options = demo.sequences
            if demo.selected in demo.sequences and choice.value != demo.selected:
                choice.value = demo.selected
        finally:
            self._syncing = False
        no_target = demo.cache is None or not demo.selected
        for name in ("fork", "write", "free"):
            controls[name].disabled = no_target
        controls["create"].disabled = demo.cache is None
