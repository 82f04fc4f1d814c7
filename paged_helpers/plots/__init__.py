"""Matplotlib figures used by the notebooks, one module per topic.

Import the module you need (``from paged_helpers.plots import utilization``); nothing here
runs on import.
"""
