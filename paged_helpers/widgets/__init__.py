"""Widgets that draw the learner's paged cache: live in JupyterLab, static in an HTML export.

    BlockTableView(cache, prefix_cache=None)   the pool and every block table; .refresh()
    CowDemo(PagedKVCache)                      the instructor's fork / copy-on-write demo
    PrefixCacheView(prefix_cache)              hits, misses and LRU order of the prefix cache
    Story(PagedKVCache)                        the demo as announced steps, forward and back, for a
                                               projector; .export_html(path) for a room without a kernel
    lecture.load(notebook)                     the presentation notebook's classes and scenes

Modules: ``state`` reads a cache into plain data, ``render`` draws it as HTML, ``palette``
holds the colour-blind-safe colours, ``display`` decides between live and static (static only
while nbgrader executes a notebook), ``stage`` holds the presentation stage's JavaScript (in
``frontend/``) and the static page, ``kernel_watch`` warns when the kernel is gone, and one
module per widget; the CowDemo's parts are ``cow_demo`` (its state), ``cow_steps`` (create, fork,
write, free, and the line each step says), ``cow_picture`` (its static and live picture),
``cow_calls`` (calling the class, wording its mistakes), ``cow_words`` (the prompts' words) and
``cow_controls`` (its live layout and stage); ``cow_story`` is the demo as a lecture's steps.
"""

from .block_table_view import BlockTableView
from .cow_demo import CowDemo
from .cow_story import DEFAULT_STORY, Step, Story
from .prefix_cache_view import PrefixCacheView

__all__ = ["DEFAULT_STORY", "BlockTableView", "CowDemo", "PrefixCacheView", "Step", "Story"]
