"""CowDemo: the instructor's on-screen demonstration of fork and copy-on-write.

    demo = ph.widgets.CowDemo(PagedKVCache)    # the learner's class, or the instructor's
    demo

It builds a tiny cache from the class it is given (1 layer, 2 KV heads, head_dim 4, blocks
of 4 slots, 16 blocks) and offers buttons: create a prompt, fork the selected sequence, write
one token into it, free it, reset. Each step says in one line what happened, for example
"block 1 was shared by 3 tables: copied to block 2 before writing C's token 6 ("sea")".
Prompts are words of the course's fork prompt (``data/prompts.json``) and each write adds a
word, so every slot in the picture shows its word (``words=False``: numbers only); without
copy-on-write, the shared slot shows both sequences' words, flagged. Everything runs through
the class's own methods: writing a token is ``reserve(seq, 1)`` followed by ``set_batch`` and
``update`` with small random keys and values, so any copy happens inside the learner's
``reserve``; the demo finds it by comparing the block tables before and after.

Mistakes in the class are explained, not raised: a method that still raises
NotImplementedError, a write into a shared block without a copy, a copy that lost the keys or
values, an old block not released after its copy, a child table that is the parent's list.

Every control is a native button, select or number field, so the demo works from the keyboard
(Tab to move, Enter or Space to press). Presentation mode enlarges everything for a projector
and draws the pool compactly (blocks in use, and a count of the free ones); for a lecture, the
``Story`` walks the same demo step by step on a stage fitted to the screen.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable
from typing import Any

import torch
import traitlets

from ..data_files import course_prompts
from ..unfinished import unfinished_stub
from ..words import split_words, tokenizer
from . import display, render
from .block_table_view import BlockTableView
from .state import find_copies, read_tables


def _not_implemented(what: str, error: NotImplementedError) -> str:
    """The line for unfinished code: where the stub that raised is (notebook 03's, when 04 inherits it)."""
    stub = unfinished_stub(error)
    if stub is not None and stub.notebook is not None:
        return (
            f"{what} is not implemented yet: `{stub.name}` in {stub.notebook} still raises NotImplementedError. "
            f"Finish it in {stub.notebook} and save it, then run this notebook's cell that loads it "
            "(`ph.load_from_notebook`), the cells after it, and the demo's cell again."
        )
    return (
        f"{what} is not implemented yet (it, or something it calls, raises NotImplementedError). "
        "Finish it in its cell, run that cell, then run the demo's cell again."
    )


class _StepFailed(Exception):
    """A call into the cache class failed; the message is the line the demo shows."""


def _names() -> Any:
    """A, B, ..., Z, A2, B2, ...: short names that read well on a projector."""
    round_ = 1
    while True:
        for letter in string.ascii_uppercase:
            yield letter if round_ == 1 else f"{letter}{round_}"
        round_ += 1


def _step(method: Callable[..., Any]) -> Callable[..., Any]:
    """A public step never raises for the class's mistakes: anything unexpected becomes a line."""

    @functools.wraps(method)
    def guarded(self: CowDemo, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:  # e.g. a cache without `lengths`: explain, keep the demo alive
            self._say(f"{method.__name__} could not run: {type(error).__name__}: {error}")
            return None

    return guarded


def _list_blocks(blocks: list[int]) -> str:
    if len(blocks) == 1:
        return f"block {blocks[0]}"
    return "blocks " + ", ".join(str(b) for b in blocks[:-1]) + f" and {blocks[-1]}"


class CowDemo(display.ShowsItself, traitlets.HasTraits):
    """Fork and copy-on-write, step by step, on a tiny cache built from ``cache_class``.

    ``cache_class`` is constructed as ``cache_class(layers, num_blocks, block_size, kv_heads,
    head_dim, device="cpu", dtype=torch.float32)`` and must offer create, reserve, fork, free,
    set_batch and update (the chapter's PagedKVCache). The steps are methods too, so a cell
    can drive the demo: ``create()``, ``fork()``, ``write()``, ``free()``, ``reset()``; each
    acts on the selected sequence unless given one, and never raises for the class's mistakes.

    Traits: ``sequences`` (live names, in creation order), ``selected``, ``history`` (one line
    per step, oldest first), ``message`` (the latest line), ``problem`` (non-empty while the
    class cannot run the demo at all), ``presentation``. ``view`` is the BlockTableView of the
    cache; its traits hold the pool's state. ``upcoming`` is the name the next created or forked
    sequence will get (a Story announces it before the step). ``tokens`` holds each live
    sequence's token ids (the demo's own record: the cache stores keys and values, not tokens).
    """

    sequences = traitlets.List()
    selected = traitlets.Unicode("")
    history = traitlets.List()
    message = traitlets.Unicode("")
    problem = traitlets.Unicode("")
    presentation = traitlets.Bool(False)

    def __init__(
        self,
        cache_class: type,
        *,
        layers: int = 1,
        num_blocks: int = 16,
        block_size: int = 4,
        kv_heads: int = 2,
        head_dim: int = 4,
        prompt_tokens: int = 6,
        seed: int = 0,
        presentation: bool = False,
        words: bool = True,
    ):
        super().__init__()
        if not isinstance(cache_class, type):
            raise TypeError(
                f"CowDemo takes the cache class itself (CowDemo(PagedKVCache)), got {type(cache_class).__name__}"
            )
        self.cache_class = cache_class
        self.sizes = dict(
            layers=layers, num_blocks=num_blocks, block_size=block_size, kv_heads=kv_heads, head_dim=head_dim
        )
        self.prompt_tokens = prompt_tokens
        self.seed = seed
        self.cache: Any = None
        self.tokens: dict[str, list[int]] = {}
        self.tokenizer = tokenizer() if words else None
        # The prompts' words, and the words a write draws from: the course's fork prompt.
        fork_text = course_prompts()["fork_prompt"] if words else ""
        self._prompt_ids = self.tokenizer.encode(fork_text) if self.tokenizer else []
        self._word_choices = [
            self.tokenizer.encode(piece)[0] for piece in dict.fromkeys(split_words(fork_text)) if piece.isalpha()
        ]
        self.view = BlockTableView(
            None,
            presentation=presentation,
            compact=presentation or None,
            tokens=self.tokens if words else None,
            token_text=self.tokenizer.token_text if self.tokenizer else str,
        )
        self._controls: dict[str, Any] = {}
        self._screen: Any = None
        self._widget: Any = None
        self._box: Any = None
        self._syncing = False
        self.presentation = presentation
        self.reset()

    # ----- the steps -----------------------------------------------------------------------

    @_step
    def reset(self) -> None:
        """A fresh, empty cache built from the class."""
        self._names = _names()
        self.upcoming = next(self._names)
        self._generator = torch.Generator().manual_seed(self.seed)
        self.sequences, self.selected, self.history, self.problem = [], "", [], ""
        self.tokens.clear()
        self._prompts_made = 0
        try:
            self.cache = self._call(
                "__init__", self.cache_class, *self.sizes.values(), device="cpu", dtype=torch.float32
            )
        except _StepFailed as failure:
            self.cache = None
            self.problem = str(failure)
            self._say(str(failure))
            return
        self.view.set_cache(self.cache)
        s = self.sizes
        self._say(
            f"new cache: {s['num_blocks']} blocks of {s['block_size']} slots, all free. Create a prompt to begin."
        )

    @_step
    def create(self, tokens: int | None = None) -> str | None:
        """Create a new sequence and prefill a prompt of ``tokens`` tokens. Returns its name."""
        tokens = self.prompt_tokens if tokens is None else int(tokens)
        if not self._ready():
            return None
        seq = self._take_name()
        try:
            self._call("create", self.cache.create, seq)
            self.sequences = [*self.sequences, seq]
            self._call("reserve", self.cache.reserve, seq, tokens)
            self._write_kv(seq, start=0, count=tokens)
            self.tokens[seq] = self._prompt(tokens)
        except _StepFailed as failure:
            return self._after_failure(failure)
        self.selected = seq
        table = list(self.cache.tables[seq])
        size = self.sizes["block_size"]
        last = tokens - (len(table) - 1) * size if table else 0
        tail = f" (the last holds {last} of {size} slots)" if table and last < size else ""
        self._say(
            f"created {seq} with a {tokens}-token prompt{self._quoted(self.tokens[seq])}: {_list_blocks(table)}{tail}"
            if table
            else f"created {seq} with an empty prompt"
        )
        return seq

    @_step
    def fork(self, parent: str | None = None) -> str | None:
        """Fork ``parent`` (default: the selected sequence) into a new child. Returns the child's name."""
        parent = self._target(parent)
        if parent is None:
            return None
        child = self._take_name()
        try:
            self._call("fork", self.cache.fork, parent, child)
        except _StepFailed as failure:
            return self._after_failure(failure)
        self.sequences = [*self.sequences, child]
        self.selected = child
        self.tokens[child] = list(self.tokens.get(parent, []))
        table = list(self.cache.tables[child])
        refs = self.cache.allocator.refs
        counts = ", ".join(f"{b}\u2192{refs[b]}" for b in dict.fromkeys(table))
        line = f"forked {child} from {parent}: {child}'s table {table} points at {parent}'s blocks"
        line += "; nothing copied"
        line += f" (refcounts now {counts})" if table else ""
        if self.cache.tables[child] is self.cache.tables[parent]:
            line += (
                f". But {child}'s table is the very same list as {parent}'s: a block appended to one "
                "appears in both. Fork must copy the list"
            )
        self._say(line)
        return child

    @_step
    def write(self, seq: str | None = None) -> None:
        """Write one token into ``seq`` (default: the selected sequence): reserve, then update."""
        seq = self._target(seq)
        if seq is None:
            return
        size = self.sizes["block_size"]
        before = read_tables(self.cache)
        refs_before = list(self.cache.allocator.refs)
        position = int(self.cache.lengths[seq])
        logical, slot = divmod(position, size)
        try:
            self._call("reserve", self.cache.reserve, seq, 1)
            after = read_tables(self.cache)
            self._write_kv(seq, start=position, count=1)
        except _StepFailed as failure:
            self._after_failure(failure)
            return
        token = self._next_word()
        self.tokens.setdefault(seq, []).append(token)
        said = f"token {position}{self._quoted([token], brackets=True)}"
        copies = [c for c in find_copies(before, after) if c.seq == seq]
        if copies:
            lines = [
                self._describe_copy(c, refs_before[c.source], slot if c.logical == logical else size, said)
                for c in copies
            ]
            self._say("; ".join(lines))
        elif logical < len(before[seq]):
            block = before[seq][logical]
            if refs_before[block] > 1:
                self._say(
                    f"{seq} wrote {said} into block {block} "
                    f"while {refs_before[block]} tables shared it: "
                    "the others now see this token too. Copy-on-write is missing in reserve"
                )
            else:
                self._say(f"{seq} wrote {said} into its own block {block}, slot {slot}: no copy needed")
        elif logical < len(after[seq]):
            self._say(f"{seq}'s last block was full: block {after[seq][logical]} allocated for {said}")
        else:
            self._say(f"{seq} wrote {said}, but reserve gave its table no block for it")

    @_step
    def free(self, seq: str | None = None) -> None:
        """Free ``seq`` (default: the selected sequence) and say where each of its blocks went."""
        seq = self._target(seq)
        if seq is None:
            return
        released = list(dict.fromkeys(self.cache.tables[seq]))
        try:
            self._call("free", self.cache.free, seq)
        except _StepFailed as failure:
            self._after_failure(failure)
            return
        self.sequences = [s for s in self.sequences if s != seq]
        self.selected = self.sequences[-1] if self.sequences else ""
        self.tokens.pop(seq, None)
        refs = self.cache.allocator.refs
        returned = [b for b in released if refs[b] == 0]
        kept = [b for b in released if refs[b] > 0]
        parts = []
        if returned:
            parts.append(f"{_list_blocks(returned)} back on the free list")
        if kept:
            parts.append(", ".join(f"block {b} still used (ref {refs[b]})" for b in kept))
        self._say(f"freed {seq}: " + ("; ".join(parts) if parts else "it held no blocks"))

    # ----- helpers ---------------------------------------------------------------------------

    def _take_name(self) -> str:
        """The name the next created or forked sequence gets (``upcoming``), then the one after."""
        name, self.upcoming = self.upcoming, next(self._names)
        return name

    def _ready(self) -> bool:
        if self.cache is None:
            self._say(self.problem or "no cache: press Reset")
            return False
        return True

    def _target(self, seq: str | None) -> str | None:
        if not self._ready():
            return None
        seq = seq or self.selected
        if not seq or seq not in self.cache.tables:
            self._say("no sequence selected: create a prompt first" if not seq else f"there is no sequence {seq}")
            return None
        return seq

    def _call(self, method: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the class's code; turn any exception into the line the demo shows."""
        name = self.cache_class.__name__
        what = f"{name}.{method}"
        try:
            return function(*args, **kwargs)
        except NotImplementedError as error:
            raise _StepFailed(_not_implemented(what, error)) from None
        except MemoryError:
            raise _StepFailed(f"{what} ran out of blocks: the pool is full. Free a sequence or press Reset.") from None
        except Exception as error:  # the class's bug, shown as a line instead of a traceback
            raise _StepFailed(f"{what} raised {type(error).__name__}: {error}") from None

    def _prompt(self, count: int) -> list[int]:
        """The next ``count`` words of the course's fork prompt (each new prompt starts further on)."""
        if not self._prompt_ids:
            return [0] * count
        text = self._prompt_ids
        start = (self._prompts_made * count) % len(text)
        self._prompts_made += 1
        return [text[(start + index) % len(text)] for index in range(count)]

    def _next_word(self) -> int:
        """A word to write: drawn (seeded) from the words of the course's fork prompt."""
        if not self._word_choices:
            return 0
        index = int(torch.randint(len(self._word_choices), (1,), generator=self._generator))
        return self._word_choices[index]

    def _quoted(self, ids: list[int], brackets: bool = False) -> str:
        """' "tell me a short story"' (or ' ("sea")') when the demo shows words; "" otherwise."""
        if self.tokenizer is None or not ids:
            return ""
        text = f'"{self.tokenizer.decode(ids)}"'
        return f" ({text})" if brackets else f" {text}"

    def _after_failure(self, failure: _StepFailed) -> None:
        self.sequences = [s for s in self.sequences if s in self.cache.tables]
        if self.selected not in self.sequences:
            self.selected = self.sequences[-1] if self.sequences else ""
        self._say(str(failure))
        return None

    def _write_kv(self, seq: str, start: int, count: int) -> None:
        """Write random keys and values for positions [start, start + count) of seq, every layer."""
        if count == 0:
            return
        heads, dim = self.sizes["kv_heads"], self.sizes["head_dim"]
        positions = torch.arange(start, start + count)
        self._call("set_batch", self.cache.set_batch, [seq])
        for layer in range(self.sizes["layers"]):
            keys = torch.randn(1, heads, count, dim, generator=self._generator)  # [B, H, T, D]
            values = torch.randn(1, heads, count, dim, generator=self._generator)
            self._call("update", self.cache.update, layer, keys, values, positions)

    def _describe_copy(self, copy: Any, sharers: int, slots_to_check: int, said: str) -> str:
        """One line for one copy, plus what went wrong with it, if anything did."""
        line = (
            f"block {copy.source} was shared by {sharers} tables: copied to block {copy.target} "
            f"before writing {copy.seq}'s {said}"
        )
        lost = [
            name
            for name, pools in (("keys", self.cache.k_pool), ("values", self.cache.v_pool))
            if not all(
                torch.equal(pool[copy.target][:, :slots_to_check], pool[copy.source][:, :slots_to_check])
                for pool in pools
            )
        ]
        if lost:
            line += f". But the {' and '.join(lost)} were not copied: {copy.seq} lost its earlier tokens"
        if self.cache.allocator.refs[copy.source] != sharers - 1:
            line += (
                f". But block {copy.source} still has ref {self.cache.allocator.refs[copy.source]}: "
                "the old block must be released after the copy"
            )
        return line

    def _say(self, line: str) -> None:
        self.history = [*self.history, line]
        self.message = line
        if self.cache is not None:
            self.view.refresh()
        self._redraw()

    # ----- display ---------------------------------------------------------------------------

    @traitlets.observe("presentation")
    def _presentation_changed(self, change: dict) -> None:
        # On a projector the pool shrinks to the blocks in use (and a count of the free ones).
        with self.view.hold_trait_notifications():
            self.view.presentation = change["new"]
            self.view.compact = True if change["new"] else None
        self._redraw()

    def to_html(self) -> str:
        """The static picture: the latest step (the earlier ones folded) and the pool (what an HTML export shows)."""
        recent = render.message_lines(self.history, presentation=self.presentation)
        body = render.error_box(self.problem) if self.problem else self.view.picture_html()
        name = self.cache_class.__name__
        title = f'<div class="ph-cow-title" style="font-weight:700;font-size:1.2em">Copy-on-write with {name}</div>'
        return render.page(title + recent + body, kind="cow-demo", presentation=self.presentation)

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return display.mimebundle(lambda: self.widget, self.to_html(), repr(self))

    def __repr__(self) -> str:
        return f"CowDemo({self.cache_class.__name__}): {self.message}"

    @property
    def widget(self) -> Any:
        """The live demo: controls above the picture (built on first use)."""
        if self._widget is None:
            self._widget = self._build_widget()
        return self._widget

    def _build_widget(self) -> Any:
        import ipywidgets as w

        from .kernel_watch import KernelWatch
        from .play_stage import PlayStage

        def button(name: str, label: str, tip: str, action: Callable[[], Any], icon: str = "") -> Any:
            control = w.Button(description=label, tooltip=tip, icon=icon, layout=w.Layout(width="auto"))
            control.add_class(f"ph-do-{name}")  # ph-do-free: not the tiles' ph-free
            control.on_click(lambda _control: action())
            self._controls[name] = control
            return control

        tokens = w.BoundedIntText(
            value=self.prompt_tokens,
            min=1,
            max=self.sizes["num_blocks"] * self.sizes["block_size"],
            description="prompt tokens",
            layout=w.Layout(width="11em"),
            style={"description_width": "initial"},
        )
        tokens.add_class("ph-prompt-tokens")
        self._controls["tokens"] = tokens
        choice = w.Dropdown(
            description="sequence",
            options=self.sequences,
            style={"description_width": "initial"},
            layout=w.Layout(width="11em"),
        )
        choice.add_class("ph-sequence")
        choice.observe(self._choice_changed, names="value")
        self._controls["sequence"] = choice
        presentation = w.ToggleButton(
            value=self.presentation,
            description="Presentation",
            icon="desktop",
            tooltip="Large type for a projector",
            layout=w.Layout(width="auto"),
        )
        presentation.add_class("ph-presentation-toggle")
        presentation.observe(lambda change: setattr(self, "presentation", change["new"]), names="value")
        self._controls["presentation"] = presentation
        row = w.HBox(
            [
                tokens,
                button(
                    "create",
                    "Create prompt",
                    "A new sequence with this many prompt tokens",
                    lambda: self.create(tokens.value),
                    "plus",
                ),
                choice,
                button(
                    "fork",
                    "Fork",
                    "A child that shares the selected sequence's blocks",
                    self.fork,
                    "code-branch",
                ),
                button(
                    "write",
                    "Write a token",
                    "reserve(seq, 1), then write its keys and values",
                    self.write,
                    "pen",
                ),
                button("free", "Free", "Release the selected sequence's blocks", self.free, "trash"),
                button("reset", "Reset", "Start again with an empty cache", self.reset, "undo"),
                presentation,
            ],
            layout=w.Layout(flex_flow="row wrap", align_items="center"),
        )
        self._screen = w.HTML(self.to_html(), layout=w.Layout(width="100%"))
        # Text fields and dropdowns have no font-size style in ipywidgets 8, so presentation mode
        # reaches them through a CSS class on the whole demo.
        # On the stage (PlayStage's Present) every size follows the one font size the stage fits:
        # controls and picture in em, the title left out (the stage is the demo alone).
        demo = ".ph-cow-demo-widget"
        large_inputs = w.HTML(
            f"<style>{demo}.ph-presentation :is(input, select, label)"
            f"{{font-size:{render.PRESENTATION_FONT_PX}px !important;height:auto !important}}"
            f"{demo}.ph-presentation .ph-play-present{{font-size:{render.PRESENTATION_FONT_PX}px;height:2.6em}}"
            f"{demo}.ph-staged :is(input, select, label, button, .widget-html, .widget-html-content, .ph-widget)"
            "{font-size:1em !important}"
            f"{demo}.ph-staged :is(.ph-prompt-tokens, .ph-sequence){{width:12em !important}}"
            f"{demo}.ph-staged .ph-cow-title{{display:none}}"
            # A table's text beside its entries; on a wide window the tables beside the pool.
            f"{demo}.ph-staged .ph-text{{display:inline-block;margin:0 0 0 0.8em !important}}"
            "@media (min-width: 1200px) {"
            f"{demo}.ph-staged .ph-cow-demo{{display:grid;grid-template-columns:auto minmax(12em,1fr);"
            "column-gap:1.2em;align-items:start}"
            f"{demo}.ph-staged .ph-cow-demo>*{{grid-column:1/-1}}"
            f"{demo}.ph-staged .ph-cow-demo>.ph-pool{{grid-column:1;grid-row:span 2}}"
            f"{demo}.ph-staged .ph-cow-demo>:is(.ph-tables-heading,.ph-tables){{grid-column:2}}}}</style>"
        )
        row.children = (*row.children, PlayStage())
        box = w.VBox([large_inputs, KernelWatch(), row, self._screen])
        box.add_class("ph-cow-demo-widget")
        self._box = box
        self._sync_controls()
        return box

    def _choice_changed(self, change: dict) -> None:
        if not self._syncing:
            self.selected = change["new"] or ""

    def _redraw(self) -> None:
        if self._screen is not None:
            self._screen.value = self.to_html()
            self._sync_controls()
        self._update_snapshots()

    def _sync_controls(self) -> None:
        """Controls follow the state: the sequence list, what can be pressed, the type size."""
        controls = self._controls
        choice = controls["sequence"]
        self._syncing = True  # setting options would otherwise select the first one for us
        try:
            if list(choice.options) != self.sequences:
                choice.options = self.sequences
            if self.selected in self.sequences and choice.value != self.selected:
                choice.value = self.selected
        finally:
            self._syncing = False
        no_target = self.cache is None or not self.selected
        for name in ("fork", "write", "free"):
            controls[name].disabled = no_target
        controls["create"].disabled = self.cache is None
        controls["presentation"].value = self.presentation
        size = f"{render.PRESENTATION_FONT_PX if self.presentation else render.NORMAL_FONT_PX}px"
        height = "2.6em" if self.presentation else ""
        for name in ("create", "fork", "write", "free", "reset", "presentation"):
            controls[name].style.font_size = size
            controls[name].layout.height = height
        # Widths are in the notebook's normal em: room for the enlarged label and the field.
        controls["tokens"].layout.width = "26em" if self.presentation else "11em"
        controls["sequence"].layout.width = "20em" if self.presentation else "11em"
        if self.presentation:
            self._box.add_class("ph-presentation")
        else:
            self._box.remove_class("ph-presentation")
