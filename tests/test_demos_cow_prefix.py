"""`python run.py cow` and `python run.py prefix`: the chapter's figures, from the classes in --impl DIR."""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

import run
from paged_helpers.course_data import expected_figures
from paged_helpers.demos.cow import fork_block_counts
from paged_helpers.demos.prefix import shared_prompt_run

from conftest import NOTEBOOKS, solution

# The chapter's figures, kept in data/expected_figures.json.
COW_FIGURE = expected_figures()["chapter"]["cow"]
PREFIX_FIGURE = expected_figures()["chapter"]["prefix"]


def run_demo(capsys, *argv):
    assert run.main(list(argv)) == 0
    out = capsys.readouterr()
    assert out.err == ""
    return json.loads(out.out.splitlines()[-1])  # a demo's last line is its JSON (notes may come first)


def test_run_cow_prints_the_chapters_figure(capsys):
    assert run_demo(capsys, "cow") == COW_FIGURE


def test_run_prefix_prints_the_chapters_figure(capsys):
    assert run_demo(capsys, "prefix") == PREFIX_FIGURE


def test_cow_counts_follow_the_arguments():
    cache = solution("04_fork_and_copy_on_write", "PagedKVCache")
    # A prompt of whole blocks: nothing to copy, but each sample still needs a fresh block.
    assert fork_block_counts(cache, prompt_tokens=32, block_size=16, forks=2) == {
        "parent_blocks": 2,
        "new_blocks_after_2_forks": 0,
        "new_blocks_after_each_sample_writes_a_token": 2,
    }


def test_cow_demo_measures_the_class_it_is_given():
    right = solution("04_fork_and_copy_on_write", "PagedKVCache")
    notebook_03 = right.__bases__[0]
    no_copy = type(
        "NoCopyOnWrite", (right,), {"reserve": lambda self, seq, n: notebook_03.reserve(self, seq, n)}
    )
    assert fork_block_counts(no_copy)["new_blocks_after_each_sample_writes_a_token"] == 0


def test_prefix_run_keeps_the_caches_for_the_widget():
    result = shared_prompt_run(
        solution("05_prefix_caching", "PrefixCache"), solution("05_prefix_caching", "PagedKVCache")
    )
    assert result.figures == PREFIX_FIGURE
    assert len(result.prefix_cache.entries) == 6  # the system prompt's six full blocks
    assert result.prefix_cache.cache is result.cache


@pytest.fixture
def impl_without_sharing(tmp_path):
    """A learner's folder whose PrefixCache never reuses anything and whose notebook 04 cache never
    copies on write (notebooks 02-03 are the course's)."""
    for earlier in ("02_block_allocator", "03_paged_kv_cache"):
        shutil.copy(NOTEBOOKS / f"{earlier}.ipynb", tmp_path)
    notebook_04 = nbformat.read(NOTEBOOKS / "04_fork_and_copy_on_write.ipynb", as_version=4)
    notebook_04.cells.append(
        new_code_cell(
            "class PagedKVCache(PagedKVCache):\n"
            "    def reserve(self, seq, new_tokens):\n"
            "        PagedKVCache03.reserve(self, seq, new_tokens)\n"
        )
    )
    nbformat.write(notebook_04, tmp_path / "04_fork_and_copy_on_write.ipynb")
    source = (
        "class PrefixCache:\n"
        "    def __init__(self, cache):\n"
        "        self.cache = cache\n"
        "    def attach(self, seq, prompt):\n"
        "        self.cache.create(seq)\n"
        "        return 0\n"
        "    def remember(self, seq, tokens):\n"
        "        pass\n"
        "    def evict(self, blocks_wanted):\n"
        "        pass\n"
    )
    nbformat.write(new_notebook(cells=[new_code_cell(source)]), tmp_path / "05_prefix_caching.ipynb")
    return tmp_path


def test_impl_folder_supplies_the_classes(capsys, impl_without_sharing):
    figures = run_demo(capsys, "prefix", "--impl", str(impl_without_sharing))
    assert figures == {**PREFIX_FIGURE, "tokens_prefilled": 832, "blocks_in_use": 56}
    figures = run_demo(capsys, "cow", "--impl", str(impl_without_sharing))
    assert figures == {**COW_FIGURE, "new_blocks_after_each_sample_writes_a_token": 0}


def test_missing_impl_folder_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no such folder"):
        run.main(["cow", "--impl", str(tmp_path / "nowhere")])


def test_lookup_timing_and_plot():
    import matplotlib

    matplotlib.use("Agg")
    from paged_helpers.plots import prefix_lookup

    def make(prompt):
        return lambda: len(prompt)

    seconds = prefix_lookup.time_lookups({"length": make}, [16, 64])
    assert list(seconds) == ["length"] and len(seconds["length"]) == 2
    assert all(s >= 0 for s in seconds["length"])
    figure = prefix_lookup.plot_lookup_times([16, 64], seconds)
    assert figure.axes[0].get_xscale() == "log"
    with pytest.raises(ValueError, match="lengths"):
        prefix_lookup.time_lookups({"length": make}, [])
