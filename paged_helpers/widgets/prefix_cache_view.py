"""PrefixCacheView: which blocks each request reused, and the prefix cache's LRU order.

    view = ph.widgets.PrefixCacheView(prefix_cache)
    view                                             # displays in the notebook
    reused = view.attach("r1", prompt)               # = prefix_cache.attach("r1", prompt), recorded
    ... prefill ...
    view.remember("r1", prompt)                      # = prefix_cache.remember(...), recorded
    view.evict(4)                                    # = prefix_cache.evict(4), recorded

Calling the prefix cache through the view is what lets it show per-request results: for every
full block of a prompt that attach may look up, a hit (and the block reused) or a miss; a full
block holding the prompt's last token is marked as never looked up, because attach always leaves
that token to prefill. ``token_text`` (a callable token id -> label, ``str`` by default) labels
the prompt tokens the picture quotes, for example with the words of a tokenizer. Calls made
on the prefix cache directly still show up in the pool and the LRU list after ``refresh()``,
but not as request rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import traitlets

from ..prefix_interface import cached_entries
from . import display, render
from .block_table_view import BlockTableView


class PrefixCacheView(display.ShowsItself, traitlets.HasTraits):
    """A picture of a PrefixCache (the interface of ``paged_helpers.prefix_interface``).

    Traits (plain JSON, sequences named by ``str(seq)``):
      ``entries``   the cached prefixes in LRU order, least recently used first:
                    {"tokens": [...the whole prefix...], "block": b, "refs": refcount};
      ``requests``  one per ``attach`` made through the view: {"seq", "prompt_tokens", "reused",
                    "blocks": [{"logical": i, "kind": "hit"|"miss"|"last", "block": b or None}]};
      ``events``    one line per call made through the view.
    ``view`` is the BlockTableView of the underlying cache, with blocks held only by the prefix
    cache shown as such. The wrappers pass exceptions from the prefix cache through unchanged.
    """

    entries = traitlets.List()
    requests = traitlets.List()
    events = traitlets.List()
    presentation = traitlets.Bool(False)

    def __init__(
        self,
        prefix_cache: Any,
        *,
        presentation: bool = False,
        compact: bool | None = None,
        token_text: Callable[[int], str] = str,
    ):
        super().__init__()
        if not callable(token_text):
            raise TypeError(f"token_text must be a callable token id -> label, got {type(token_text).__name__}")
        self.prefix_cache = prefix_cache
        self.token_text = token_text
        self.view = BlockTableView(
            prefix_cache.cache, prefix_cache=prefix_cache, presentation=presentation, compact=compact
        )
        self._screen: Any = None
        self._widget: Any = None
        self.presentation = presentation
        self.refresh()

    # ----- wrapped calls ------------------------------------------------------------------------

    def attach(self, seq: Any, prompt: list[int]) -> int:
        """``prefix_cache.attach(seq, prompt)``, recording which prompt blocks hit. Returns tokens reused."""
        reused = self.prefix_cache.attach(seq, prompt)
        self.record_attach(seq, prompt, reused)
        return reused

    def record_attach(self, seq: Any, prompt: list[int], reused: int) -> None:
        """Record an attach made elsewhere (its result and the table it left) as a request row."""
        size = self.prefix_cache.cache.block_size
        table = list(self.prefix_cache.cache.tables[seq])
        hits = reused // size
        lookable = max(len(prompt) - 1, 0) // size  # full blocks that leave at least one token to prefill
        blocks = [
            {
                "logical": i,
                "kind": "hit" if i < hits else "miss",
                "block": table[i] if i < hits and i < len(table) else None,
            }
            for i in range(lookable)
        ]
        blocks += [{"logical": i, "kind": "last", "block": None} for i in range(lookable, len(prompt) // size)]
        self.requests = [
            *self.requests,
            {"seq": str(seq), "prompt_tokens": len(prompt), "reused": int(reused), "blocks": blocks},
        ]
        self._event(f"attach {seq}: reused {reused} of {len(prompt)} prompt tokens ({hits} block hit(s))")

    def remember(self, seq: Any, tokens: list[int]) -> None:
        """``prefix_cache.remember(seq, tokens)``, recording which blocks were published."""
        before = {key for key, _ in cached_entries(self.prefix_cache)}
        self.prefix_cache.remember(seq, tokens)
        published = [block for key, block in cached_entries(self.prefix_cache) if key not in before]
        self._event(f"remember {seq}: published {len(published)} block(s) {published}")

    def evict(self, blocks_wanted: int) -> None:
        """``prefix_cache.evict(blocks_wanted)``, recording which cached blocks were dropped."""
        before = cached_entries(self.prefix_cache)
        self.prefix_cache.evict(blocks_wanted)
        after = {key for key, _ in cached_entries(self.prefix_cache)}
        dropped = [block for key, block in before if key not in after]
        self._event(f"evict({blocks_wanted}): dropped {len(dropped)} block(s) {dropped}")

    # ----- state and display --------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the prefix cache and the pool again, and redraw."""
        refs = self.prefix_cache.cache.allocator.refs
        self.entries = [
            {"tokens": list(key), "block": block, "refs": int(refs[block])}
            for key, block in cached_entries(self.prefix_cache)
        ]
        self.view.refresh()
        self._redraw()

    def _event(self, line: str) -> None:
        self.events = [*self.events, line]
        self.refresh()

    @traitlets.observe("presentation")
    def _presentation_changed(self, change: dict) -> None:
        self.view.presentation = change["new"]
        self._redraw()

    def to_html(self) -> str:
        """The static picture: requests, LRU order, then the pool."""
        colours = self.view.colours
        body = (
            render.request_rows(self.requests, colours)
            + render.lru_list(self.entries, self.token_text)
            + self.view.picture_html()
        )
        return render.page(body, kind="prefix-cache-view", presentation=self.presentation)

    def _repr_html_(self) -> str:
        return self.to_html()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return display.mimebundle(lambda: self.widget, self.to_html(), repr(self))

    def __repr__(self) -> str:
        return f"PrefixCacheView: {len(self.entries)} cached blocks, {len(self.requests)} requests recorded"

    def _redraw(self) -> None:
        if self._screen is not None:
            self._screen.value = self.to_html()
        self._update_snapshots()

    @property
    def widget(self) -> Any:
        """The live widget: the picture and a Refresh button (built on first use)."""
        if self._widget is None:
            import ipywidgets

            from .kernel_watch import KernelWatch

            self._screen = ipywidgets.HTML(self.to_html())
            button = ipywidgets.Button(description="Refresh", icon="refresh", tooltip="Read the prefix cache again")
            button.on_click(lambda _button: self.refresh())
            self._widget = ipywidgets.VBox([KernelWatch(), self._screen, button])
            self._widget.add_class("ph-prefix-cache-view-widget")
        return self._widget
