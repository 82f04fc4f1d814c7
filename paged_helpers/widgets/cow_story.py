"""Story: the copy-on-write demo as a fixed walk of steps, forward and back, for a lecture.

    story = ph.widgets.Story(PagedKVCache)     # the default story, on a tiny cache of the class
    story                                      # in a notebook: the live stepper (Present for a projector)
    story.forward(); story.back()              # the same from a cell
    story.export_html("cow_story.html")        # every step as one static page, for a room without a kernel

The default story is the chapter's: a 6-token prompt A (a full block and a half-full one), three
forks of it (B, C, D), a write into D and two into A (the first two copy the shared half-full
block, the third needs no copy), then B and C are freed. Before each step the story *announces*
it from the cache as it stands ("write token 6 into D: slot 2 of block 1, which 4 tables
share"), so the room can guess what will happen; the step then runs the class's own code
through a ``CowDemo`` and the frame shows what the class actually did.

Going back replays the story from an empty cache up to the step before (the demo is seeded, so
the replay draws the same keys and values); nothing in the class has to support undo.

Every frame is drawn for a projector: text at the page's font size or larger, the pool compact
(blocks in use and a count of the free ones), no code on screen. The live widget and the static
page show the very same frame HTML (``frame_html``) and scale it to the screen the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import traitlets

from . import display, render, stage
from .cow_demo import CowDemo
from .state import Copy

ACTIONS = ("create", "fork", "write", "free")


@dataclass(frozen=True)
class Step:
    """One step of a story.

    ``action`` is one of ACTIONS; ``seq`` is the sequence it acts on (the parent, for a fork;
    empty for create, whose sequence gets the next free name); ``tokens`` is create's prompt length.
    """

    action: str
    seq: str = ""
    tokens: int = 0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"Step.action must be one of {ACTIONS}, got {self.action!r}")
        if self.action == "create" and self.tokens < 1:
            raise ValueError(f"a create step needs tokens >= 1, got {self.tokens}")
        if self.action != "create" and not self.seq:
            raise ValueError(f"a {self.action} step needs the sequence it acts on (seq)")


DEFAULT_STORY = (
    Step("create", tokens=6),
    Step("fork", "A"),
    Step("fork", "A"),
    Step("fork", "A"),
    Step("write", "D"),
    Step("write", "A"),
    Step("write", "A"),
    Step("free", "B"),
    Step("free", "C"),
)


class Story(traitlets.HasTraits):
    """A walk through ``steps`` on a ``CowDemo`` of ``cache_class``; ``position`` steps are done.

    Traits: ``position`` (0 to ``total``), ``total``, ``announcement`` (the next step, said
    before it runs; the closing line at the end), ``message`` (what the last step did, in the
    demo's words), ``frame`` (the HTML of the current frame). ``demo`` is the CowDemo doing the
    work; its ``view`` holds the pool's state. ``source`` names where the class came from, for
    the frame's title (for example "04_fork_and_copy_on_write.ipynb").
    """

    position = traitlets.Int(0)
    total = traitlets.Int(0)
    announcement = traitlets.Unicode("")
    message = traitlets.Unicode("")
    frame = traitlets.Unicode("")

    def __init__(self, cache_class: type, steps: Sequence[Step] = DEFAULT_STORY, *, source: str = "", **sizes: Any):
        super().__init__()
        steps = tuple(steps)
        if not steps or not all(isinstance(step, Step) for step in steps):
            raise TypeError("steps must be a non-empty sequence of Step")
        self.steps = steps
        self.source = source
        self.demo = CowDemo(cache_class, **sizes)
        self.total = len(steps)
        self._widget: Any = None
        self._show()

    # ----- walking -------------------------------------------------------------------------------

    def forward(self) -> None:
        """Run the next step (nothing at the end)."""
        if self.position < self.total:
            self._run(self.steps[self.position])
            self.position += 1
            self._show()

    def back(self) -> None:
        """Undo the last step: replay the story up to the one before it."""
        if self.position > 0:
            self.go(self.position - 1)

    def restart(self) -> None:
        self.go(0)

    def go(self, position: int) -> None:
        """The state after the first ``position`` steps, replayed from an empty cache."""
        if not 0 <= position <= self.total:
            raise ValueError(f"position must be between 0 and {self.total}, got {position}")
        self.demo.reset()
        for step in self.steps[:position]:
            self._run(step)
        self.position = position
        self._show()

    def _run(self, step: Step) -> None:
        demo = self.demo
        if step.action == "create":
            demo.create(step.tokens)
        else:
            getattr(demo, step.action)(step.seq)

    # ----- what the room sees --------------------------------------------------------------------

    def announce(self, step: Step) -> str:
        """The next step in words, from the cache as it stands: said before the step runs."""
        demo = self.demo
        cache = demo.cache
        if cache is None:
            return f"{step.action} (the class cannot run yet: {demo.problem})"
        size = demo.sizes["block_size"]
        if step.action == "create":
            blocks = -(-step.tokens // size)
            return (
                f"create {demo.upcoming} with a {step.tokens}-token prompt: reserve {blocks} "
                f"block{'s' if blocks != 1 else ''} of {size} slots and write their keys and values"
            )
        table = list(cache.tables.get(step.seq, []))
        if step.seq not in cache.tables:
            return f"{step.action} {step.seq} (no sequence {step.seq} now)"
        refs = cache.allocator.refs
        if step.action == "fork":
            return (
                f"fork {step.seq} into {demo.upcoming}: {demo.upcoming}'s table will point at "
                f"{step.seq}'s blocks {table} and every refcount goes up by one"
            )
        if step.action == "write":
            position = int(cache.lengths[step.seq])
            logical, slot = divmod(position, size)
            if logical >= len(table):
                return f"write token {position} into {step.seq}: its last block is full, so reserve needs a new one"
            block = table[logical]
            if refs[block] > 1:
                return (
                    f"write token {position} into {step.seq}: slot {slot} of block {block}, which "
                    f"{refs[block]} tables share. Watch for the copy"
                )
            return f"write token {position} into {step.seq}: slot {slot} of block {block}, {step.seq}'s own"
        only = [b for b in dict.fromkeys(table) if refs[b] == 1]
        shared = [b for b in dict.fromkeys(table) if refs[b] > 1]
        parts = []
        if only:
            verb = "goes" if len(only) == 1 else "go"
            parts.append(f"{render.block_word(only)}, held by {step.seq} alone, {verb} back to the free list")
        if shared:
            verb = "keeps" if len(shared) == 1 else "keep"
            parts.append(f"shared {render.block_word(shared)} {verb} one reference fewer")
        return f"free {step.seq}: " + ("; ".join(parts) if parts else "it holds no blocks")

    def _show(self) -> None:
        with self.hold_trait_notifications():
            self.message = self.demo.message if self.position else ""
            self.announcement = (
                self.announce(self.steps[self.position])
                if self.position < self.total
                else "nothing: that was the story. PageUp goes back, Home starts again"
            )
            self.frame = self.frame_html()

    @property
    def title(self) -> str:
        name = self.demo.cache_class.__name__
        return f"Copy-on-write with {name}" + (f" from {self.source}" if self.source else "")

    def frame_html(self) -> str:
        """The current frame: title, step counter, what just happened, what comes next, the pool."""
        demo = self.demo
        view = demo.view
        if demo.problem or view.state is None:
            picture = render.error_box(demo.problem or view.error)
        else:
            picture = render.pool_picture(
                view.state,
                view.colours,
                [Copy(**copy) for copy in view.copies],
                compact=True,
                presentation=True,
                show_legend=False,
            )
        return render.story_frame(
            title=self.title,
            position=self.position,
            total=self.total,
            done=self.message or "nothing yet: an empty cache",
            upcoming=self.announcement,
            picture=picture,
        )

    def frames(self) -> list[str]:
        """Every frame of the story, from the empty cache to the end (the story ends where it was)."""
        here = self.position
        shown = []
        for position in range(self.total + 1):
            self.go(position) if position == 0 else self.forward()
            shown.append(self.frame)
        self.go(here)
        return shown

    def export_html(self, path: str | Path) -> Path:
        """Write every frame as one self-contained HTML page; returns the path.

        The page needs no kernel and no network: PageDown / PageUp (or the arrow keys, or a
        clicker) walk it, and it scales to the window like the live widget's presentation mode.
        """
        target = Path(path)
        target.write_text(stage.static_page(self.title, self.frames()), encoding="utf-8")
        return target

    # ----- display -------------------------------------------------------------------------------

    def to_html(self) -> str:
        """The static picture of the current frame (what an HTML export of the notebook shows)."""
        return render.page(self.frame, kind="story", presentation=True)

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return display.mimebundle(lambda: self.widget, self.to_html(), repr(self))

    def __repr__(self) -> str:
        return f"Story: step {self.position} of {self.total}; next: {self.announcement}"

    @property
    def widget(self) -> Any:
        """The live stepper (an anywidget; built on first use)."""
        if self._widget is None:
            from .story_widget import StoryWidget

            self._widget = StoryWidget(self)
        return self._widget
