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
(Tab to move, Enter or Space to press). For a projector, **Present** puts the demo on a stage
over the whole window, its type fitted to the screen, its pool drawn compactly (blocks in use,
and a count of the free ones); for a lecture, the ``Story`` walks the same demo step by step on
a stage of the same kind. At most ``max_sequences`` sequences live at once (8 by default, the
lecture's free play 4): each is a chip on every tile it shares and a row of the tables, and a
projector has room for only so many (docs/widgets.md, "Fitting a projector").

The class is in parts, each with one job: this module holds the demo's state and its steps;
``cow_calls`` calls the cache class and words its mistakes; ``cow_words`` picks the prompts'
and writes' words; ``cow_controls`` is the live layout (controls, picture, stage).
"""

from __future__ import annotations

import functools
import string
from collections.abc import Callable
from typing import Any

import torch
import traitlets

from . import display, render
from .block_table_view import BlockTableView
from .cow_calls import StepFailed, call, describe_copy, list_blocks
from .cow_words import DemoWords
from .state import find_copies, read_tables

MAX_SEQUENCES = 8


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


class CowDemo(display.ShowsItself, traitlets.HasTraits):
    """Fork and copy-on-write, step by step, on a tiny cache built from ``cache_class``.

    ``cache_class`` is constructed as ``cache_class(layers, num_blocks, block_size, kv_heads,
    head_dim, device="cpu", dtype=torch.float32)`` and must offer create, reserve, fork, free,
    set_batch and update (the chapter's PagedKVCache). The steps are methods too, so a cell
    can drive the demo: ``create()``, ``fork()``, ``write()``, ``free()``, ``reset()``; each
    acts on the selected sequence unless given one, and never raises for the class's mistakes.
    ``max_sequences`` live sequences at most: a create or fork beyond them is refused with a line.

    Traits: ``sequences`` (live names, in creation order), ``selected``, ``history`` (one line
    per step, oldest first), ``message`` (the latest line), ``problem`` (non-empty while the
    class cannot run the demo at all), ``presented`` (on the stage: Present; the picture is then
    drawn for a projector). ``view`` is the BlockTableView of the cache; its traits hold the
    pool's state. ``upcoming`` is the name the next created or forked sequence will get (a Story
    announces it before the step). ``tokens`` holds each live sequence's token ids (the demo's
    own record: the cache stores keys and values, not tokens).
    """

    sequences = traitlets.List()
    selected = traitlets.Unicode("")
    history = traitlets.List()
    message = traitlets.Unicode("")
    problem = traitlets.Unicode("")
    presented = traitlets.Bool(False)

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
        words: bool = True,
        max_sequences: int = MAX_SEQUENCES,
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
        self.max_sequences = max_sequences
        self.cache: Any = None
        self.tokens: dict[str, list[int]] = {}
        self.words = DemoWords(words)
        self.view = BlockTableView(None, tokens=self.tokens if words else None, token_text=self.words.token_text)
        self._face: Any = None  # the CowControls, once displayed
        self.reset()

    @property
    def tokenizer(self) -> Any:
        """The course's tokenizer (None with ``words=False``)."""
        return self.words.tokenizer

    # ----- the steps -----------------------------------------------------------------------

    @_step
    def reset(self) -> None:
        """A fresh, empty cache built from the class."""
        self._names = _names()
        self.upcoming = next(self._names)
        self._generator = torch.Generator().manual_seed(self.seed)
        self.sequences, self.selected, self.history, self.problem = [], "", [], ""
        self.tokens.clear()
        self.words.restart()
        try:
            self.cache = self._call(
                "__init__", self.cache_class, *self.sizes.values(), device="cpu", dtype=torch.float32
            )
        except StepFailed as failure:
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
        if not self._ready() or not self._room_for_one_more():
            return None
        seq = self._take_name()
        try:
            self._call("create", self.cache.create, seq)
            self.sequences = [*self.sequences, seq]
            self._call("reserve", self.cache.reserve, seq, tokens)
            self._write_kv(seq, start=0, count=tokens)
            self.tokens[seq] = self.words.prompt(tokens)
        except StepFailed as failure:
            return self._after_failure(failure)
        self.selected = seq
        table = list(self.cache.tables[seq])
        size = self.sizes["block_size"]
        last = tokens - (len(table) - 1) * size if table else 0
        tail = f" (the last holds {last} of {size} slots)" if table and last < size else ""
        quoted = self.words.quoted(self.tokens[seq])
        self._say(
            f"created {seq} with a {tokens}-token prompt{quoted}: {list_blocks(table)}{tail}"
            if table
            else f"created {seq} with an empty prompt"
        )
        return seq

    @_step
    def fork(self, parent: str | None = None) -> str | None:
        """Fork ``parent`` (default: the selected sequence) into a new child. Returns the child's name."""
        parent = self._target(parent)
        if parent is None or not self._room_for_one_more():
            return None
        child = self._take_name()
        try:
            self._call("fork", self.cache.fork, parent, child)
        except StepFailed as failure:
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
        except StepFailed as failure:
            self._after_failure(failure)
            return
        token = self.words.next_word(self._generator)
        self.tokens.setdefault(seq, []).append(token)
        said = f"token {position}{self.words.quoted([token], brackets=True)}"
        copies = [c for c in find_copies(before, after) if c.seq == seq]
        if copies:
            lines = [
                describe_copy(self.cache, c, refs_before[c.source], slot if c.logical == logical else size, said)
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
        except StepFailed as failure:
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
            parts.append(f"{list_blocks(returned)} back on the free list")
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

    def _room_for_one_more(self) -> bool:
        if len(self.sequences) < self.max_sequences:
            return True
        self._say(
            f"the demo holds at most {self.max_sequences} sequences at once (so that its picture fits a "
            "projector): free one first"
        )
        return False

    def _target(self, seq: str | None) -> str | None:
        if not self._ready():
            return None
        seq = seq or self.selected
        if not seq or seq not in self.cache.tables:
            self._say("no sequence selected: create a prompt first" if not seq else f"there is no sequence {seq}")
            return None
        return seq

    def _call(self, method: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call the class's code; any exception becomes a StepFailed carrying the demo's line."""
        return call(self.cache_class.__name__, method, function, *args, **kwargs)

    def _after_failure(self, failure: StepFailed) -> None:
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

    def _say(self, line: str) -> None:
        self.history = [*self.history, line]
        self.message = line
        if self.cache is not None:
            self.view.refresh()
        self._redraw()

    # ----- display ---------------------------------------------------------------------------

    @traitlets.observe("presented")
    def _presented_changed(self, change: dict) -> None:
        if self._face is not None:  # only the live picture changes: exports keep the notebook's
            self._face.redraw()

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

    def __repr__(self) -> str:
        return f"CowDemo({self.cache_class.__name__}): {self.message}"

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
