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

The class is in parts, each with one job: this module holds the demo's state (its traits, the
cache, the names and the helpers every step shares); ``cow_steps`` its steps and their lines;
``cow_picture`` its static and live picture; ``cow_calls`` calls the cache class and words its
mistakes; ``cow_words`` picks the prompts' and writes' words; ``cow_controls`` is the live layout
(controls, picture, stage).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import torch
import traitlets

from . import display
from .block_table_view import BlockTableView
from .cow_calls import StepFailed, call
from .cow_picture import CowPicture
from .cow_steps import CowSteps
from .cow_words import DemoWords

MAX_SEQUENCES = 8


def _names() -> Any:
    """A, B, ..., Z, A2, B2, ...: short names that read well on a projector."""
    round_ = 1
    while True:
        for letter in string.ascii_uppercase:
            yield letter if round_ == 1 else f"{letter}{round_}"
        round_ += 1


class CowDemo(CowSteps, CowPicture, display.ShowsItself, traitlets.HasTraits):
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

    # ----- the state every step shares (the steps: ``cow_steps``) --------------------------

    def _restart(self) -> None:
        """Names from A again, the seed's generator, no sequences, no history, no words yet."""
        self._names = _names()
        self.upcoming = next(self._names)
        self._generator = torch.Generator().manual_seed(self.seed)
        self.sequences, self.selected, self.history, self.problem = [], "", [], ""
        self.tokens.clear()
        self.words.restart()

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

    def _say(self, line: str) -> None:
        self.history = [*self.history, line]
        self.message = line
        if self.cache is not None:
            self.view.refresh()
        self._redraw()

    # ----- display (the picture: ``cow_picture``) -------------------------------------------

    @traitlets.observe("presented")
    def _presented_changed(self, change: dict) -> None:
        if self._face is not None:  # only the live picture changes: exports keep the notebook's
            self._face.redraw()

    def __repr__(self) -> str:
        return f"CowDemo({self.cache_class.__name__}): {self.message}"
