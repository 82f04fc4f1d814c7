"""Widgets that draw the learner's paged cache: live in JupyterLab, static in an HTML export.

    BlockTableView(cache, prefix_cache=None)   the pool and every block table; .refresh()
    CowDemo(PagedKVCache)                      the instructor's fork / copy-on-write demo
    PrefixCacheView(prefix_cache)              hits, misses and LRU order of the prefix cache

Modules: ``state`` reads a cache into plain data, ``render`` draws it as HTML, ``palette``
holds the colour-blind-safe colours, ``display`` decides between live and static (static only
while nbgrader executes a notebook), and one module per widget.
"""

from .block_table_view import BlockTableView
from .cow_demo import CowDemo
from .prefix_cache_view import PrefixCacheView

__all__ = ["BlockTableView", "CowDemo", "PrefixCacheView"]
