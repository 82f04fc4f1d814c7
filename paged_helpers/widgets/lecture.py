"""The lecture's demos, loaded from a chosen notebook: what the presentation notebook shows.

    lecture = ph.widgets.lecture.load()                    # the instructor's 04 (and 05)
    lecture = ph.widgets.lecture.load("~/alice/04_fork_and_copy_on_write.ipynb")   # a learner's
    lecture.story()             # fork and copy-on-write, step by step (Present for a projector)
    lecture.block_tables()      # ten sequences in one pool: every block table
    lecture.prefix_cache()      # ten requests sharing a system prompt: hits, misses, LRU order
    lecture.free_play()         # the CowDemo, every button (Present for a projector)

The classes come from the notebooks through ``load_from_notebook`` (never from this package,
which holds no cache): ``PagedKVCache`` from 04, ``PrefixCache`` from 05 in the same folder if
it is there. ``load()`` with no argument reads ``$PH_DEMO_NOTEBOOK`` (what ``make demo
NOTEBOOK=...`` sets) and falls back to the course's own ``notebooks/``.

As a command, it writes the story as a static page for a room without a kernel:

    python -m paged_helpers.widgets.lecture --html cow_story.html [--notebook PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..notebook_loader import NotebookLoadError, load_from_notebook
from .block_table_view import BlockTableView
from .cow_demo import CowDemo
from .cow_story import Story
from .prefix_cache_view import PrefixCacheView

COW_NOTEBOOK = "04_fork_and_copy_on_write"
PREFIX_NOTEBOOK = "05_prefix_caching"
NOTEBOOK_VARIABLE = "PH_DEMO_NOTEBOOK"
# Free play's bounds. At 20 px type a 1280x720 projector holds 36 lines and a 1024x768 one is 51
# em wide: the controls, the step's line, two rows of tiles and the tables fit when the pool has
# 8 blocks (the largest prompt is then 32 tokens, every table at most 8 entries) and at most 4
# sequences live (the story's A to D; four name chips fill one line of a tile). A small pool
# also runs out within a few clicks, and "the pool is full" is a lesson of its own.
FREE_PLAY = {"num_blocks": 8, "max_sequences": 4}
# The instructor's notebooks, when this package is used from a checkout of the course.
COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@dataclass
class Lecture:
    """The classes the demos run, and where they came from (shown in the story's title)."""

    PagedKVCache: type
    PrefixCache: type | None
    notebook: Path

    def story(self, **options: Any) -> Story:
        """The default copy-on-write story on a tiny cache of the notebook's class."""
        return Story(self.PagedKVCache, source=self.notebook.name, **options)

    def free_play(self, **options: Any) -> CowDemo:
        """The copy-on-write demo with every button; Present puts it on a stage fitted to the screen.

        Its bounds (``FREE_PLAY``, overridden by ``options``) are what a projector holds at 20 px
        at every step, whatever the instructor clicks (tests/test_browser_projector.py).
        """
        return CowDemo(self.PagedKVCache, **{**FREE_PLAY, **options})

    def block_tables(self, sequences: int = 10, seed: int = 0) -> BlockTableView:
        """A 64-block pool holding ``sequences`` sequences: prompts, forks and copied blocks."""
        torch.manual_seed(seed)
        cache = self.PagedKVCache(1, 64, 4, 2, 4, device="cpu", dtype=torch.float32)
        names = [chr(ord("A") + i) for i in range(sequences)]
        for index, name in enumerate(names):
            if index % 3 == 0:  # a new prompt of 5 to 13 tokens
                cache.create(name)
                _prefill(cache, name, 5 + 4 * (index % 3) + index)
            else:  # a fork of the latest prompt, which then writes a token of its own
                cache.fork(names[index - index % 3], name)
                _prefill(cache, name, 1)
        return BlockTableView(cache, presentation=True, compact=True)

    def prefix_cache(
        self,
        requests: int = 10,
        system_tokens: int = 12,
        own_tokens: int = 3,
        token_text: Callable[[int], str] = str,
    ) -> PrefixCacheView:
        """``requests`` requests sharing a ``system_tokens``-token prompt, served one after another
        through the view (attach, prefill the rest, remember); the first four then finish."""
        if self.PrefixCache is None:
            raise NotebookLoadError(
                f"no {PREFIX_NOTEBOOK}.ipynb next to {self.notebook.name}: the prefix-cache demo needs it"
            )
        cache = self.PagedKVCache(1, 56, 4, 2, 4, device="cpu", dtype=torch.float32)
        view = PrefixCacheView(self.PrefixCache(cache), presentation=True, compact=True, token_text=token_text)
        system = list(range(1000, 1000 + system_tokens))
        for index in range(requests):
            name = chr(ord("A") + index)
            prompt = system + [2000 + own_tokens * index + i for i in range(own_tokens)]
            reused = view.attach(name, prompt)
            _prefill(cache, name, len(prompt) - reused)
            view.remember(name, prompt)
        for index in range(min(4, requests)):
            cache.free(chr(ord("A") + index))
        view.refresh()
        return view


def _prefill(cache: Any, seq: str, count: int) -> None:
    """Reserve ``count`` positions of seq and write random keys and values there (one layer)."""
    start = int(cache.lengths[seq])
    cache.reserve(seq, count)
    cache.set_batch([seq])
    keys = torch.randn(1, 2, count, 4)  # [B, H, T, D]
    cache.update(0, keys, torch.randn(1, 2, count, 4), torch.arange(start, start + count))


def load(notebook: str | Path | None = None) -> Lecture:
    """The lecture's classes from ``notebook`` (a 04 notebook, or the folder holding it).

    Default: ``$PH_DEMO_NOTEBOOK``, else the course's ``notebooks/``. Unfinished classes are
    refused with a NotebookLoadError that says which notebook to finish.
    """
    chosen = notebook if notebook is not None else os.environ.get(NOTEBOOK_VARIABLE) or COURSE_NOTEBOOKS
    path = Path(chosen).expanduser()
    if path.is_dir():
        path = path / f"{COW_NOTEBOOK}.ipynb"
    if not path.is_file():
        raise NotebookLoadError(
            f"no notebook {path}: pass the copy-on-write notebook (04) or the folder holding it, for example "
            f"make demo NOTEBOOK=~/course/{COW_NOTEBOOK}.ipynb"
        )
    folder = path.parent
    PagedKVCache = load_from_notebook(path.stem, "PagedKVCache", search=[folder], allow_unimplemented=False)
    PrefixCache = None
    if (folder / f"{PREFIX_NOTEBOOK}.ipynb").is_file():
        PrefixCache = load_from_notebook(PREFIX_NOTEBOOK, "PrefixCache", search=[folder], allow_unimplemented=False)
    return Lecture(PagedKVCache, PrefixCache, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the copy-on-write story as one static HTML page.")
    parser.add_argument("--html", type=Path, required=True, help="the page to write")
    parser.add_argument("--notebook", help="a 04 notebook (or its folder) to take PagedKVCache from")
    args = parser.parse_args(argv)
    try:
        lecture = load(args.notebook)
    except NotebookLoadError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    story = lecture.story()
    written = story.export_html(args.html)
    print(f"wrote {written}: {story.total + 1} frames of the copy-on-write story from {lecture.notebook.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
