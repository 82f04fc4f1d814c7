"""BlockTableView: a live picture of a paged cache's pool and block tables.

    view = ph.widgets.BlockTableView(cache)       # displays in the notebook
    cache.fork("A", "B"); view.refresh()          # the picture above follows

Given each sequence's tokens (``tokens``, label -> ids, read at every refresh and never changed)
and ``token_text`` (an id -> its word, e.g. ``ph.tokenizer().token_text``), every slot of a tile
shows its token's word, and each table row the sequence's text, block by block:

    tokens = {"A": tok.encode("the cat sat by the window")}
    view = ph.widgets.BlockTableView(cache, tokens=tokens, token_text=tok.token_text)

The pool is a grid of physical blocks; each tile shows the sequences using the block (a
coloured chip with the name), its reference count, how many slots are written, and whether it
is free or held only by the prefix cache. A pool of more than ``COMPACT_ABOVE`` blocks is drawn
compactly (the blocks in use, and one tile counting the free ones) unless ``compact`` says
otherwise. Under it, each sequence's block table as a row of
logical -> physical entries. Shared blocks have a thick border; a block that copy-on-write has
just copied has a double border and says "copy of N". Bookkeeping that breaks the chapter's
invariants (a refcount below the number of tables pointing at a block, a used block on the free
list, a leaked block, two sequences' different tokens in one slot) is flagged on the tile instead
of raising, so a learner sees the bug.

``pool_traits`` turns a read pool into the view's traits (plain JSON) and ``sequence_texts`` words
each sequence's blocks; the class holds the traits, reads the cache at each refresh, and draws.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import traitlets

from . import display, render
from .palette import SequenceColours
from .state import Copy, PoolState, SlotWords, UnreadableCache, find_copies, read_pool, slot_words

# Pools up to this many blocks are drawn whole; larger ones compactly, unless told otherwise.
COMPACT_ABOVE = 24


class BlockTableView(display.ShowsItself, traitlets.HasTraits):
    """A picture of ``cache`` (and, optionally, which blocks ``prefix_cache`` holds).

    The traits below hold what was read at the last ``refresh()`` as plain JSON, sequences
    named by ``str(seq)``; they are the widget's state, and tests compare them to the cache.
    The view never changes the cache and never keeps a reference to its lists.

    ``copies`` lists the table entries that changed block since the previous refresh, which in
    the chapter's cache only copy-on-write does: {"seq", "logical", "source", "target"}.
    With ``tokens``, ``words`` maps each block (as a string) to its slots' words (a list per
    slot: one word, none, or several where sequences disagree) and ``texts`` each sequence to
    its text, blocks separated by " | ".

    Display it as a cell's last expression (or with ``display``); use ``.widget`` to put it
    inside another ipywidgets layout, and ``to_html()`` for a static picture.
    """

    num_blocks = traitlets.Int(0)
    block_size = traitlets.Int(0)
    tables = traitlets.Dict()
    lengths = traitlets.Dict()
    refs = traitlets.List()
    free = traitlets.List()
    shared = traitlets.List()
    cached_only = traitlets.List()
    copies = traitlets.List()
    problems = traitlets.List()
    error = traitlets.Unicode("")
    presentation = traitlets.Bool(False)
    compact = traitlets.Bool(None, allow_none=True)
    words = traitlets.Dict()
    texts = traitlets.Dict()

    def __init__(
        self,
        cache: Any,
        prefix_cache: Any = None,
        *,
        presentation: bool = False,
        columns: int = 8,
        compact: bool | None = None,
        tokens: Mapping[str, Sequence[int]] | None = None,
        token_text: Callable[[int], str] = str,
    ):
        super().__init__()
        if tokens is not None and not isinstance(tokens, Mapping):
            raise TypeError(f"tokens must map each sequence to its token ids, got {type(tokens).__name__}")
        if not callable(token_text):
            raise TypeError(f"token_text must be a callable token id -> word, got {type(token_text).__name__}")
        self.tokens = tokens
        self.token_text = token_text
        self.cache = cache
        self.prefix_cache = prefix_cache
        self.columns = columns
        self.colours = SequenceColours()
        self.state: PoolState | None = None
        self._previous_tables: dict[str, list[int]] | None = None
        self._picture: Any = None
        self._widget: Any = None
        self.presentation = presentation
        self.compact = compact
        self.refresh()

    def set_cache(self, cache: Any, prefix_cache: Any = None) -> None:
        """Show another cache from now on (forgets the previous tables, so no copies are marked)."""
        self.cache, self.prefix_cache = cache, prefix_cache
        self.colours = SequenceColours()
        self._previous_tables = None
        self.refresh()

    def refresh(self) -> None:
        """Read the cache again and redraw. Returns None, so a cell ending in it displays nothing new."""
        try:
            state = read_pool(self.cache, self.prefix_cache)
        except UnreadableCache as error:
            self._show_error(str(error))
            return
        except Exception as error:  # a half-written learner cache: say what broke, draw nothing
            self._show_error(f"could not read the cache ({type(error).__name__}: {error})")
            return
        copies = find_copies(self._previous_tables, state.tables) if self._previous_tables is not None else []
        self._previous_tables = {label: list(table) for label, table in state.tables.items()}
        self.state = state
        words = slot_words(state, labelled_tokens(self.tokens), self.token_text) if self.tokens is not None else None
        for label in state.tables:  # colours follow creation, whether or not this state is drawn
            self.colours(label)
        texts = sequence_texts(state, labelled_tokens(self.tokens), self.token_text) if words else {}
        with self.hold_trait_notifications():
            self.error = ""
            for name, value in pool_traits(state, copies, words, texts).items():
                setattr(self, name, value)
        self._redraw()

    def _show_error(self, text: str) -> None:
        self.state = None
        self.error = text
        self._redraw()

    @property
    def drawn_compact(self) -> bool:
        """Whether the picture draws only the blocks in use (``compact``, or a large pool)."""
        if self.compact is not None:
            return self.compact
        return self.num_blocks > COMPACT_ABOVE

    @traitlets.observe("presentation", "compact")
    def _presentation_changed(self, change: dict) -> None:
        self._redraw()

    def picture_html(self, *, projector: bool = False) -> str:
        """The picture without its page wrapper, for widgets that compose it with more.

        ``projector``: drawn for a stage, this once, whatever the view's traits say: compact, no
        text smaller than the page's, and without what the tiles already say (each table's text:
        every slot shows its word) or what the room need not read (the legend).
        """
        if self.state is None:
            return render.error_box(self.error)
        copies = [Copy(**copy) for copy in self.copies]
        return render.pool_picture(
            self.state,
            self.colours,
            copies,
            self.columns,
            compact=True if projector else self.drawn_compact,
            presentation=projector or self.presentation,
            show_legend=not projector,
            words={int(block): [tuple(labels) for labels in slots] for block, slots in self.words.items()},
            texts=None if projector else self.texts,
        )

    def to_html(self) -> str:
        """The static picture (what an HTML export or nbgrader feedback shows)."""
        return render.page(self.picture_html(), kind="block-table-view", presentation=self.presentation)

    def _repr_html_(self) -> str:
        return self.to_html()

    def _redraw(self) -> None:
        if self._picture is not None:
            self._picture.value = self.to_html()
        self._update_snapshots()

    @property
    def picture(self) -> Any:
        """The ipywidgets.HTML that shows the picture, kept up to date by refresh()."""
        if self._picture is None:
            import ipywidgets

            self._picture = ipywidgets.HTML(self.to_html())
        return self._picture

    @property
    def widget(self) -> Any:
        """The live widget: the picture and a Refresh button (built on first use)."""
        if self._widget is None:
            import ipywidgets

            from .kernel_watch import KernelWatch

            button = ipywidgets.Button(description="Refresh", icon="refresh", tooltip="Read the cache again")
            button.on_click(lambda _button: self.refresh())
            self._widget = ipywidgets.VBox([KernelWatch(), self.picture, button])
            self._widget.add_class("ph-block-table-view-widget")
        return self._widget

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return display.mimebundle(lambda: self.widget, self.to_html(), self._plain())

    def _plain_text(self) -> str:
        return self._plain()

    def _plain(self) -> str:
        if self.state is None:
            return f"BlockTableView: {self.error}"
        return (
            f"BlockTableView: {self.num_blocks} blocks of {self.block_size}, {len(self.free)} free, "
            f"{len(self.tables)} sequences, shared blocks {self.shared}"
        )

    def __repr__(self) -> str:
        return self._plain()


def pool_traits(state: PoolState, copies: list[Copy], words: SlotWords | None, texts: dict[str, str]) -> dict[str, Any]:
    """The view's traits for ``state``, as plain JSON, in the order the view sets them.

    ``problems`` gathers the pool's, each block's and, with words, each slot where two
    sequences' tokens clash.
    """
    problems = list(state.problems) + [
        f"block {block.index}: {block.problem}" for block in state.blocks if block.problem
    ]
    return {
        "num_blocks": state.num_blocks,
        "block_size": state.block_size,
        "tables": {label: list(table) for label, table in state.tables.items()},
        "lengths": dict(state.lengths),
        "refs": [block.refs for block in state.blocks],
        "free": list(state.free_list),
        "shared": state.shared,
        "cached_only": state.cached_only,
        "copies": [dataclasses.asdict(copy) for copy in copies],
        "problems": problems + list(words.clashes) if words else problems,
        "words": {str(b): [list(labels) for labels in slots] for b, slots in (words.words if words else {}).items()},
        "texts": texts,
    }


def labelled_tokens(tokens: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]]:
    """Each sequence's token ids, keyed by ``str(seq)`` as the traits are."""
    return {str(seq): [int(t) for t in ids] for seq, ids in (tokens or {}).items()}


def sequence_texts(state: PoolState, tokens: dict[str, list[int]], token_text: Callable[[int], str]) -> dict[str, str]:
    """Each sequence's written tokens as words, " | " between blocks."""
    texts, size = {}, state.block_size
    for label, ids in tokens.items():
        if label not in state.tables:
            continue
        written = ids[: state.lengths.get(label, 0)]
        texts[label] = " | ".join(
            " ".join(str(token_text(t)) for t in written[start : start + size])
            for start in range(0, len(written), size)
        )
    return texts
