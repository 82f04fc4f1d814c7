"""Headless tests of the widgets: their traitlet state follows the cache, their static picture
shows the right blocks and counts, the copy-on-write demo explains what the class did (right or
wrong), and nothing is built or written to stderr while nbgrader executes a notebook.

Right classes come from the instructor notebooks (conftest.solution); wrong ones are small
subclasses of them, each a mistake a learner makes.
"""

from __future__ import annotations

import re
from html import escape
from html.parser import HTMLParser

import ipywidgets
import pytest
import torch

from paged_helpers.widgets import DEFAULT_STORY, BlockTableView, CowDemo, PrefixCacheView, Step, Story, palette, render
from paged_helpers.widgets.display import NBGRADER_VARIABLE
from paged_helpers.widgets.kernel_watch import KernelWatch

from browser_support import solution_snippets
from conftest import NOTEBOOKS, solution


@pytest.fixture(scope="module")
def PagedKVCache():
    return solution("04_fork_and_copy_on_write", "PagedKVCache")


@pytest.fixture(autouse=True)
def not_grading(monkeypatch):
    monkeypatch.delenv(NBGRADER_VARIABLE, raising=False)


def make_cache(cls, num_blocks=16):
    return cls(1, num_blocks, 4, 2, 4, device="cpu", dtype=torch.float32)


def write(cache, seq, count):
    """Reserve and write ``count`` tokens of random K/V into seq, as a forward pass would."""
    start = cache.lengths[seq]
    cache.reserve(seq, count)
    cache.set_batch([seq])
    keys = torch.randn(1, 2, count, 4)  # [B, H, T, D]
    cache.update(0, keys, keys.clone(), torch.arange(start, start + count))


class _Elements(HTMLParser):
    """Every element's attributes, so a test can pick elements by class and read data-*."""

    def __init__(self, html: str):
        super().__init__()
        self.found: list[dict[str, str]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.found.append(dict(attrs, tag=tag))


def elements(html: str, css_class: str) -> list[dict[str, str]]:
    return [e for e in _Elements(html).found if css_class in e.get("class", "").split()]


def assert_view_matches(view: BlockTableView, cache) -> None:
    """The view's traits are exactly what the cache holds, and its picture draws that."""
    assert view.error == ""
    assert view.num_blocks == cache.k_pool[0].shape[0]
    assert view.block_size == cache.block_size
    assert view.tables == {str(s): list(t) for s, t in cache.tables.items()}
    assert view.lengths == {str(s): n for s, n in cache.lengths.items()}
    assert view.refs == list(cache.allocator.refs)
    assert view.free == list(cache.allocator.free)
    assert view.shared == [b for b, r in enumerate(cache.allocator.refs) if r > 1]
    html = view.to_html()
    tiles = elements(html, "ph-block")
    assert [int(t["data-block"]) for t in tiles] == list(range(view.num_blocks))
    assert [int(t["data-refs"]) for t in tiles] == list(cache.allocator.refs)
    assert {int(t["data-block"]) for t in elements(html, "ph-free")} == set(cache.allocator.free)
    assert {int(t["data-block"]) for t in elements(html, "ph-shared") if "ph-block" in t["class"]} == set(view.shared)
    assert int(elements(html, "ph-summary")[0]["data-free"]) == cache.allocator.num_free
    drawn: dict[str, list[int]] = {}
    for element in _Elements(html).found:  # entries follow their row's opening tag
        classes = element.get("class", "").split()
        if "ph-table" in classes:
            row = drawn.setdefault(element["data-seq"], [])
        elif "ph-entry" in classes:
            row.append(int(element["data-block"]))
    assert drawn == {str(s): list(t) for s, t in cache.tables.items()}
    assert view.problems == []


# ----- BlockTableView --------------------------------------------------------------------------


def test_view_follows_every_operation(PagedKVCache):
    torch.manual_seed(0)
    cache = make_cache(PagedKVCache)
    view = BlockTableView(cache)
    assert_view_matches(view, cache)
    steps = [
        lambda: cache.create("A"),
        lambda: write(cache, "A", 6),  # blocks [0, 1], the last half full
        lambda: cache.fork("A", "B"),
        lambda: cache.fork("B", "C"),
        lambda: write(cache, "C", 1),  # copy-on-write of the shared half-full block
        lambda: write(cache, "A", 3),
        lambda: cache.free("B"),
        lambda: cache.truncate("A", 2),
        lambda: cache.free("A"),
        lambda: cache.free("C"),
    ]
    for step in steps:
        step()
        view.refresh()
        assert_view_matches(view, cache)
    assert view.free and len(view.free) == 16 and view.tables == {}


def test_view_marks_the_copy_and_forgets_it_on_the_next_refresh(PagedKVCache):
    cache = make_cache(PagedKVCache)
    cache.create("A")
    write(cache, "A", 6)
    cache.fork("A", "B")
    cache.fork("A", "C")
    view = BlockTableView(cache)
    shared_last = cache.tables["A"][1]
    assert view.refs[shared_last] == 3 and view.copies == []
    write(cache, "B", 1)
    view.refresh()
    copied_to = cache.tables["B"][1]
    assert view.copies == [{"seq": "B", "logical": 1, "source": shared_last, "target": copied_to}]
    html = view.to_html()
    copy_tiles = [e for e in elements(html, "ph-copy") if "ph-block" in e["class"]]
    assert [(int(e["data-block"]), int(e["data-copy-of"]), int(e["data-refs"])) for e in copy_tiles] == [
        (copied_to, shared_last, 1)
    ]
    assert f"copy of {shared_last}" in html
    shared_tile = next(e for e in elements(html, "ph-block") if int(e["data-block"]) == shared_last)
    assert shared_tile["data-refs"] == "2" and "ph-shared" in shared_tile["class"]
    view.refresh()
    assert view.copies == [] and not elements(view.to_html(), "ph-copy")


def test_view_flags_broken_bookkeeping_instead_of_raising(PagedKVCache):
    class ForkWithoutSharing(PagedKVCache):
        def fork(self, parent, child):
            self.create(child)
            self.tables[child] = list(self.tables[parent])
            self.lengths[child] = self.lengths[parent]

    cache = make_cache(ForkWithoutSharing)
    cache.create("A")
    write(cache, "A", 4)
    cache.fork("A", "B")
    view = BlockTableView(cache)
    block = cache.tables["A"][0]
    assert view.problems == [f"block {block}: refcount 1 but 2 holders point here"]
    assert elements(view.to_html(), "ph-problem")[0]["data-block"] == str(block)


def test_view_of_something_that_is_not_a_cache_says_so():
    view = BlockTableView(object())
    assert "has no `tables`" in view.error
    assert "has no `tables`" in view.to_html() and elements(view.to_html(), "ph-error")


def test_view_shows_blocks_held_only_by_a_prefix_cache(PagedKVCache):
    class HeldByCache:  # only what the view reads of a prefix cache: its entries
        def __init__(self, entries):
            self.entries = entries

    cache = make_cache(PagedKVCache)
    cache.create("A")
    write(cache, "A", 8)
    kept = cache.tables["A"][0]
    cache.allocator.share(kept)  # the prefix cache's own reference
    cache.free("A")
    view = BlockTableView(cache, prefix_cache=HeldByCache({(1, 2, 3, 4): kept}))
    assert view.cached_only == [kept] and view.problems == []
    tile = next(e for e in elements(view.to_html(), "ph-cached-only"))
    assert tile["data-block"] == str(kept) and tile["data-refs"] == "1"
    assert BlockTableView(cache).cached_only == []  # without it, the reference is "held elsewhere"


# ----- CowDemo -----------------------------------------------------------------------------------


def test_demo_state_follows_create_fork_write_free(PagedKVCache):
    demo = CowDemo(PagedKVCache)
    assert demo.create() == "A"
    assert demo.fork() == "B" and demo.fork() == "C"
    cache = demo.cache
    shared = cache.tables["A"][1]
    assert cache.allocator.refs[shared] == 3
    demo.write()  # into C, the selected sequence
    copied = cache.tables["C"][1]
    word = demo.tokenizer.token_text(demo.tokens["C"][-1])
    assert demo.message == (
        f'block {shared} was shared by 3 tables: copied to block {copied} before writing C\'s token 6 ("{word}")'
    )
    assert demo.view.copies == [{"seq": "C", "logical": 1, "source": shared, "target": copied}]
    assert_view_matches(demo.view, cache)
    demo.write("A")
    assert demo.message.startswith(f"block {shared} was shared by 2 tables")
    demo.write("A")
    assert "no copy needed" in demo.message
    demo.free("B")
    assert demo.sequences == ["A", "C"] and demo.message.startswith("freed B:")
    assert_view_matches(demo.view, cache)
    demo.reset()
    assert demo.sequences == [] and demo.cache is not cache and demo.view.free == list(range(16))


def test_view_labels_every_slot_and_row_with_words(PagedKVCache):
    """With each sequence's tokens, every written slot shows its word and each row its text by block."""
    from paged_helpers import tokenizer

    words = tokenizer()
    cache = make_cache(PagedKVCache)
    tokens = {"A": words.encode("the cat sat by the window.")}
    cache.create("A")
    write(cache, "A", len(tokens["A"]))
    view = BlockTableView(cache, tokens=tokens, token_text=words.token_text)
    first, second = cache.tables["A"]
    assert view.words == {
        str(first): [["the"], ["cat"], ["sat"], ["by"]],
        str(second): [["the"], ["window"], ["."], []],
    }
    assert view.texts == {"A": "the cat sat by | the window ."}
    cache.fork("A", "B")
    tokens["B"] = tokens["A"] + words.encode("and")
    write(cache, "B", 1)  # copy-on-write: B's last block is a copy holding its own fourth word
    view.refresh()
    copy = cache.tables["B"][1]
    assert view.words[str(copy)] == [["the"], ["window"], ["."], ["and"]] and view.words[str(second)][3] == []
    slots = elements(view.to_html(), "ph-slot")
    assert [slot["data-slot"] for slot in slots[:4]] == ["0", "1", "2", "3"]
    assert "the cat sat by | the window . and" in view.to_html() and view.problems == []
    with pytest.raises(TypeError, match="tokens must map"):
        BlockTableView(cache, tokens=[1, 2])


def test_demo_shows_both_words_where_copy_on_write_is_missing(PagedKVCache):
    """Without copy-on-write two sequences' tokens land in one slot: the picture shows both, flagged."""
    NoCopy = type("NoCopy", (PagedKVCache,), {"blocks_to_copy": lambda self, seq, new_tokens: []})
    demo = CowDemo(NoCopy)
    demo.create()
    demo.fork()
    demo.write("B")
    demo.write("A")
    shared = demo.cache.tables["A"][1]
    both = demo.view.words[str(shared)][2]
    assert len(both) == 2 and "Copy-on-write is missing" in demo.message
    assert any(f"block {shared}, slot 2" in problem and "overwritten" in problem for problem in demo.view.problems)
    assert elements(demo.view.to_html(), "ph-clash")


def test_demo_without_words_shows_numbers_only(PagedKVCache):
    demo = CowDemo(PagedKVCache, words=False)
    demo.create()
    assert demo.view.words == {} and '"' not in demo.message and not elements(demo.view.to_html(), "ph-words")


def test_demo_buttons_drive_the_same_steps(PagedKVCache):
    demo = CowDemo(PagedKVCache)
    widget = demo.widget
    controls = demo.controls
    assert controls["fork"].disabled and controls["write"].disabled  # nothing to act on yet
    controls["create"].click()
    controls["fork"].click()
    controls["fork"].click()
    assert controls["sequence"].options == ("A", "B", "C") and controls["sequence"].value == "C"
    controls["sequence"].value = "B"
    controls["write"].click()
    assert "copied to block" in demo.message and "B's token" in demo.message
    screen = widget.children[-1].value
    assert elements(screen, "ph-copy") and escape(demo.message) in screen
    controls["free"].click()
    assert controls["sequence"].options == ("A", "C")
    # One presentation mode: Present (the browser sets the stage's `staged`); no other toggle.
    assert not any(isinstance(child, ipywidgets.ToggleButton) for child in widget.children[2].children)
    assert set(controls) == {"create", "fork", "write", "free", "reset", "tokens", "sequence", "present"}
    controls["present"].staged = True
    assert demo.presented and elements(widget.children[-1].value, "ph-free-count")  # compact on a projector
    assert not elements(widget.children[-1].value, "ph-legend") and not elements(demo.to_html(), "ph-free-count")
    controls["present"].staged = False  # Leave: the notebook's picture again
    assert not demo.presented and not elements(widget.children[-1].value, "ph-free-count")
    controls["reset"].click()
    assert controls["sequence"].options == () and controls["write"].disabled


class _Mistakes:
    """Realistic wrong classes, built on the right one, each with the words the demo must say."""

    @staticmethod
    def no_copy_on_write(right):
        class NoCopy(right):
            def blocks_to_copy(self, seq, new_tokens):
                return []

        return NoCopy, "Copy-on-write is missing in reserve"

    @staticmethod
    def values_not_copied(right):
        class KeysOnly(right):
            def reserve(self, seq, new_tokens):
                before = list(self.tables[seq])
                super().reserve(seq, new_tokens)
                for old, new in zip(before, self.tables[seq], strict=False):
                    if old != new:
                        for pool in self.v_pool:
                            pool[new].zero_()

        return KeysOnly, "the values were not copied"

    @staticmethod
    def old_block_kept(right):
        class KeepsOld(right):
            def reserve(self, seq, new_tokens):
                before = list(self.tables[seq])
                super().reserve(seq, new_tokens)
                for old, new in zip(before, self.tables[seq], strict=False):
                    if old != new:
                        self.allocator.share(old)

        return KeepsOld, "the old block must be released after the copy"

    @staticmethod
    def aliased_table(right):
        class Aliased(right):
            def fork(self, parent, child):
                super().fork(parent, child)
                self.tables[child] = self.tables[parent]

        return Aliased, "the very same list"


@pytest.mark.parametrize("mistake", ["no_copy_on_write", "values_not_copied", "old_block_kept", "aliased_table"])
def test_demo_explains_the_learners_mistake(PagedKVCache, mistake):
    wrong, words = getattr(_Mistakes, mistake)(PagedKVCache)
    demo = CowDemo(wrong)
    demo.create()
    demo.fork()
    demo.write()
    assert any(words in line for line in demo.history), demo.history


def test_demo_says_not_implemented_instead_of_a_traceback(PagedKVCache, capsys):
    class Unfinished(PagedKVCache):
        def fork(self, parent, child):
            raise NotImplementedError()

    demo = CowDemo(Unfinished)
    demo.create()
    assert demo.fork() is None
    assert demo.message.startswith("Unfinished.fork is not implemented yet")

    class NoConstructor(PagedKVCache):
        def __init__(self, *args, **kwargs):
            raise NotImplementedError()

    broken = CowDemo(NoConstructor)
    assert broken.problem.startswith("NoConstructor.__init__ is not implemented yet")
    broken.create()
    broken.write()
    assert broken.widget is not None and broken.controls["create"].disabled
    assert elements(broken.to_html(), "ph-error")
    assert capsys.readouterr().err == ""


def test_demo_names_the_earlier_notebook_whose_stub_raised(tmp_path):
    """In 04 the constructor is notebook 03's: the line sends the learner there, not to "its cell"."""
    from student_release import release_definition

    unfinished03 = release_definition(tmp_path, "03_paged_kv_cache", "PagedKVCache", finished=("02_block_allocator",))

    class PagedKVCache(unfinished03):  # notebook 04's class, adding fork and copy-on-write
        pass

    demo = CowDemo(PagedKVCache)
    where = "`PagedKVCache.__init__` in 03_paged_kv_cache.ipynb"
    assert demo.problem.startswith(f"PagedKVCache.__init__ is not implemented yet: {where}")
    assert "Finish it in 03_paged_kv_cache.ipynb" in demo.problem
    assert "in its cell" not in demo.problem


def test_demo_reports_a_full_pool(PagedKVCache):
    demo = CowDemo(PagedKVCache, num_blocks=4)
    demo.create(12)
    demo.create(8)
    assert "ran out of blocks" in demo.message
    assert demo.view.free == list(demo.cache.allocator.free)


def test_demo_holds_at_most_max_sequences(PagedKVCache):
    """Past ``max_sequences`` a create or fork is refused with a line; no name is spent on it."""
    demo = CowDemo(PagedKVCache, max_sequences=3)
    demo.create()
    demo.fork()
    demo.fork()
    tables = {seq: list(table) for seq, table in demo.cache.tables.items()}
    assert demo.fork() is None and demo.create() is None
    assert "at most 3 sequences" in demo.message and "free one first" in demo.message
    assert demo.sequences == ["A", "B", "C"] and demo.cache.tables == tables and len(demo.history) == 6
    demo.free("B")
    assert demo.fork() == "D"  # room again; the refused steps took no name


def test_free_play_is_bounded_to_fit_a_projector(PagedKVCache):
    from paged_helpers.widgets import lecture

    shown = lecture.Lecture(PagedKVCache, None, NOTEBOOKS / "04_fork_and_copy_on_write.ipynb").free_play()
    assert shown.sizes["num_blocks"] == lecture.FREE_PLAY["num_blocks"] == 8
    assert shown.max_sequences == lecture.FREE_PLAY["max_sequences"] == 4
    assert shown.controls["tokens"].max == 32  # the largest prompt fills the pool, no more
    assert not shown.presented and not elements(shown.to_html(), "ph-free-count")  # the notebook's picture


def test_demo_refuses_an_instance():
    with pytest.raises(TypeError, match="cache class itself"):
        CowDemo(object())


# ----- static fallback and grading ----------------------------------------------------------------


def test_bundle_has_widget_and_picture(PagedKVCache):
    demo = CowDemo(PagedKVCache)
    bundle = demo._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"} <= set(bundle)
    assert bundle["text/html"] == demo.to_html() == demo._repr_html_()


def test_nothing_live_is_built_while_nbgrader_executes(PagedKVCache, monkeypatch, capsys):
    monkeypatch.setenv(NBGRADER_VARIABLE, "autograde")
    demo = CowDemo(PagedKVCache)
    demo.create()
    view = BlockTableView(demo.cache)
    for shown in (demo, view):
        bundle = shown._repr_mimebundle_()
        assert set(bundle) == {"text/html", "text/plain"}
        assert elements(bundle["text/html"], "ph-block")
    assert demo._face is None and view._widget is None and view._picture is None
    assert capsys.readouterr().err == ""


# ----- PrefixCacheView ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def PrefixCache():
    return solution("05_prefix_caching", "PrefixCache")


def test_prefix_view_records_hits_misses_and_lru_order(PagedKVCache, PrefixCache):
    cache = make_cache(PagedKVCache, num_blocks=16)
    prefix_cache = PrefixCache(cache)
    view = PrefixCacheView(prefix_cache)
    prompt = list(range(100, 110))  # 10 tokens: blocks 0 and 1 full, 2 tokens in block 2
    assert view.attach("r1", prompt) == 0
    write(cache, "r1", len(prompt))
    view.remember("r1", prompt)
    # remember touches a prompt's entries tail first, so its root is the most recently used.
    assert [e["block"] for e in view.entries] == cache.tables["r1"][1::-1]

    other = prompt[:4] + [7, 7, 7, 7, 7]  # same first block, different second
    reused = view.attach("r2", other)
    assert reused == 4
    first = cache.tables["r1"][0]
    assert view.requests[-1]["blocks"] == [
        {"logical": 0, "kind": "hit", "block": first},
        {"logical": 1, "kind": "miss", "block": None},
    ]
    assert view.requests[-1]["reused"] == 4
    # The hit moved block 0's entry to the most recently used end.
    assert [e["block"] for e in view.entries] == [cache.tables["r1"][1], first]
    assert view.requests[0]["blocks"] == [
        {"logical": 0, "kind": "miss", "block": None},
        {"logical": 1, "kind": "miss", "block": None},
    ]
    html = view.to_html()
    assert [e["data-kind"] for e in elements(html, "ph-lookup")] == ["miss", "miss", "hit", "miss"]
    assert [int(e["data-block"]) for e in elements(html, "ph-lru-entry")] == [e["block"] for e in view.entries]

    cache.free("r1")
    cache.free("r2")
    view.evict(16)
    assert view.entries == [] and "dropped 2 block(s)" in view.events[-1]
    assert_view_matches(view.view, cache)


def test_prefix_view_marks_the_block_holding_the_last_prompt_token(PagedKVCache, PrefixCache):
    cache = make_cache(PagedKVCache)
    view = PrefixCacheView(PrefixCache(cache))
    prompt = list(range(8))  # two full blocks; the second holds the last token, never looked up
    view.attach("r1", prompt)
    assert [b["kind"] for b in view.requests[-1]["blocks"]] == ["miss", "last"]


# ----- palette ----------------------------------------------------------------------------------------


def test_chip_text_is_readable_on_every_colour():
    for colour in (*palette.SEQUENCE_COLOURS, palette.PREFIX_CACHE_COLOUR, palette.OTHER_HOLDER_COLOUR):
        assert palette.contrast(colour, palette.text_on(colour)) >= 4.5, colour
    assert len(set(palette.SEQUENCE_COLOURS)) == 7


def test_colours_stay_with_their_sequence(PagedKVCache):
    cache = make_cache(PagedKVCache)
    view = BlockTableView(cache)
    for seq in "ABC":
        cache.create(seq)
    view.refresh()
    html = view.to_html()
    colour_of_c = view.colours("C")
    cache.free("A")
    view.refresh()
    assert view.colours("C") == colour_of_c
    assert html.count(f"background:{colour_of_c}") >= 1


def test_ten_sequences_get_ten_distinct_looks_and_readable_text():
    colours = palette.SequenceColours()
    labels = [chr(ord("A") + i) for i in range(21)]
    looks = [(colours(label), colours.pattern(label)) for label in labels]
    assert len(set(looks[:10])) == 10 and len(set(looks)) == 21
    for colour in palette.SEQUENCE_COLOURS:  # the text reads on both colours of a patterned chip
        text = palette.text_on(colour)
        assert palette.contrast(palette.pattern_partner(colour), text) >= palette.contrast(colour, text) >= 4.5
    chips = elements(render.chip("H", palette.SEQUENCE_COLOURS[0], pattern="stripes"), "ph-chip")
    assert chips[0]["data-pattern"] == "stripes" and "repeating-linear-gradient" in chips[0]["style"]
    with pytest.raises(ValueError, match="pattern must be one of"):
        palette.background("#000000", "plaid")


# ----- compact pools and presentation sizes -----------------------------------------------------


def test_a_large_pool_is_drawn_compactly(PagedKVCache):
    cache = make_cache(PagedKVCache, num_blocks=64)
    cache.create("A")
    write(cache, "A", 10)
    cache.fork("A", "B")
    view = BlockTableView(cache)
    assert view.drawn_compact  # more than COMPACT_ABOVE blocks
    html = view.to_html()
    in_use = [b for b, r in enumerate(cache.allocator.refs) if r > 0]
    assert [int(t["data-block"]) for t in elements(html, "ph-block")] == in_use
    (free,) = elements(html, "ph-free-count")
    assert int(free["data-free"]) == 64 - len(in_use) == cache.allocator.num_free
    assert f"{64 - len(in_use)} free" in html and f"{len(in_use)}\u201363" in html
    view.compact = False
    assert len(elements(view.to_html(), "ph-block")) == 64
    assert not BlockTableView(make_cache(PagedKVCache)).drawn_compact


def _font_sizes(html: str) -> list[str]:
    return [size.strip() for size in re.findall(r"font-size:\s*([^;\"]+)", html)]


def test_presentation_pictures_never_shrink_text(PagedKVCache, PrefixCache):
    demo = CowDemo(PagedKVCache)
    demo.create()
    demo.fork()
    demo.write()
    view = PrefixCacheView(PrefixCache(make_cache(PagedKVCache)), presentation=True)
    view.attach("r1", list(range(10)))
    for html in (demo.to_html(projector=True), view.to_html(), Story(PagedKVCache).frame):
        for size in _font_sizes(html):
            if size.endswith("em"):
                assert float(size[:-2]) >= 1, (size, html[:200])
            else:
                assert size == f"{render.PRESENTATION_FONT_PX}px", size
    normal = CowDemo(PagedKVCache).to_html()
    smallest = min(float(s[:-2]) for s in _font_sizes(normal) if s.endswith("em"))
    assert smallest * render.NORMAL_FONT_PX >= 12  # notes in a notebook are readable too


# ----- Story ---------------------------------------------------------------------------------------


def test_story_announces_each_step_before_it_runs(PagedKVCache):
    story = Story(PagedKVCache)
    assert story.position == 0 and story.total == len(DEFAULT_STORY) == 9
    said = []
    while story.position < story.total:
        said.append((story.announcement, story.frame))
        story.forward()
        said[-1] += (story.message,)
    announced = [a for a, _, _ in said]
    assert announced[0].startswith("create A with a 6-token prompt")
    assert announced[1].startswith("fork A into B") and announced[3].startswith("fork A into D")
    assert "which 4 tables share. Watch for the copy" in announced[4]
    assert said[4][2].startswith("block 1 was shared by 4 tables: copied to block 2 before writing D's token 6 (")
    assert "which 3 tables share" in announced[5] and "A's own" in announced[6]
    assert "no copy needed" in said[6][2]
    assert announced[8].startswith("free C: block 1, held by C alone, goes back to the free list")
    assert said[8][2].startswith("freed C: block 1 back on the free list")
    for announcement, frame, _ in said:  # the frame on screen carries the announcement
        assert escape(f"{announcement}") in frame
    assert "that was the story" in story.announcement
    story.forward()  # past the end: nothing happens
    assert story.position == story.total


def test_story_goes_back_to_the_very_same_frame(PagedKVCache):
    story = Story(PagedKVCache)
    seen = [story.frame]
    for _ in range(story.total):
        story.forward()
        seen.append(story.frame)
    for position in range(story.total, 0, -1):
        assert story.frame == seen[position]
        story.back()
    assert story.position == 0 and story.frame == seen[0]
    story.back()  # before the start: nothing happens
    assert story.position == 0
    story.go(5)
    assert story.frame == seen[5] and story.demo.view.copies  # the copy is marked after a replay too
    assert story.frames() == seen and story.position == 5  # frames() leaves the story where it was
    story.restart()
    assert story.frame == seen[0]
    with pytest.raises(ValueError, match="between 0 and 9"):
        story.go(10)


def test_story_of_an_unfinished_class_says_so(PagedKVCache):
    class Unfinished(PagedKVCache):
        def fork(self, parent, child):
            raise NotImplementedError()

    story = Story(Unfinished)
    story.go(2)
    assert story.message.startswith("Unfinished.fork is not implemented yet")
    assert escape(story.message) in story.frame


def test_steps_refuse_bad_input():
    with pytest.raises(ValueError, match="action must be one of"):
        Step("copy", "A")
    with pytest.raises(ValueError, match="tokens >= 1"):
        Step("create")
    with pytest.raises(ValueError, match="needs the sequence"):
        Step("fork")
    with pytest.raises(TypeError, match="non-empty sequence of Step"):
        Story(object, steps=[])


def test_static_export_holds_every_frame_in_order(PagedKVCache, tmp_path):
    story = Story(PagedKVCache, source="04_fork_and_copy_on_write.ipynb")
    frames = story.frames()
    page = story.export_html(tmp_path / "story.html").read_text()
    slides = elements(page, "ph-slide")
    assert [int(s["data-step"]) for s in slides] == list(range(story.total + 1))
    positions = 0
    for frame in frames:
        positions = page.index(frame, positions)  # verbatim, and in order
    assert "<script>" in page and "fitText" in page and "PageDown" in page
    assert "http" not in page.replace("http-equiv", "")  # nothing to fetch: works offline


def test_story_shows_no_solution_code(PagedKVCache, tmp_path):
    story = Story(PagedKVCache)
    page = story.export_html(tmp_path / "story.html").read_text()
    snippets = solution_snippets(NOTEBOOKS / "04_fork_and_copy_on_write.ipynb")
    assert snippets and not [s for s in snippets if s in page or escape(s) in page]


def test_story_widget_answers_requests(PagedKVCache):
    story = Story(PagedKVCache)
    widget = story.widget
    assert widget.frame == story.frame and widget.total == 9 and widget.served == 0
    widget._handle(widget, {"action": "next", "request": 1}, [])
    widget._handle(widget, {"action": "next", "request": 2}, [])
    assert story.position == widget.position == 2 and widget.served == 2 and widget.frame == story.frame
    widget._handle(widget, {"action": "back", "request": 3}, [])
    assert widget.position == 1 and widget.served == 3
    widget._handle(widget, {"action": "end", "request": 4}, [])
    assert widget.position == 9
    widget._handle(widget, {"action": "restart", "request": 5}, [])
    widget._handle(widget, {"action": "format the disk", "request": 6}, [])
    assert widget.position == 0 and widget.served == 6  # an unknown request is answered, not run
    assert "ph-story-stage" in widget._esm and "jupyter-widgets-disconnected" in widget._esm
    bundle = story._repr_mimebundle_()
    assert {"application/vnd.jupyter.widget-view+json", "text/html", "text/plain"} <= set(bundle)
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == widget.model_id


def test_every_live_widget_watches_its_kernel(PagedKVCache, PrefixCache):
    cache = make_cache(PagedKVCache)
    for shown in (CowDemo(PagedKVCache), BlockTableView(cache), PrefixCacheView(PrefixCache(cache))):
        assert any(isinstance(child, KernelWatch) for child in shown.widget.children), shown
    assert "KERNEL_GONE" in KernelWatch._esm and "jupyter-widgets-disconnected" in KernelWatch._esm


def test_story_is_static_while_nbgrader_executes(PagedKVCache, monkeypatch):
    monkeypatch.setenv(NBGRADER_VARIABLE, "autograde")
    story = Story(PagedKVCache)
    assert set(story._repr_mimebundle_()) == {"text/html", "text/plain"} and story._widget is None


def test_prefix_view_labels_tokens_with_token_text(PagedKVCache, PrefixCache):
    cache = make_cache(PagedKVCache)
    prefix_cache = PrefixCache(cache)
    view = PrefixCacheView(prefix_cache, token_text=lambda token: f"w{token}")
    prompt = list(range(9))
    view.attach("r1", prompt)
    write(cache, "r1", len(prompt))
    view.remember("r1", prompt)
    assert "w5 w6 w7" in view.to_html()
    assert "5 6 7" in PrefixCacheView(prefix_cache).to_html()  # ids by default
    with pytest.raises(TypeError, match="token_text must be a callable"):
        PrefixCacheView(PrefixCache(cache), token_text="words")


# ----- the lecture demo --------------------------------------------------------------------------

DEMO_NOTEBOOK = NOTEBOOKS.parent / "demo" / "copy_on_write.ipynb"


def test_presentation_notebook_is_no_assignment_and_shows_no_code():
    import json

    notebook = json.loads(DEMO_NOTEBOOK.read_text())
    assert DEMO_NOTEBOOK.parent != NOTEBOOKS  # not an nbgrader assignment, not a checked notebook
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert code and all(cell["metadata"].get("jupyter", {}).get("source_hidden") for cell in code)
    assert not any("nbgrader" in cell["metadata"] for cell in notebook["cells"])
    assert not any(cell.get("outputs") or cell.get("execution_count") for cell in code)
    source = "".join("".join(cell["source"]) for cell in code)
    for part in ("lectures.load()", "lecture.story()", "lecture.block_tables()", "lecture.prefix_cache()"):
        assert part in source


def test_lecture_loads_a_learners_folder_and_says_what_to_do_otherwise(tmp_path, monkeypatch):
    import shutil

    from paged_helpers.notebook_loader import NotebookLoadError
    from paged_helpers.widgets import lecture

    for stem in ("02_block_allocator", "03_paged_kv_cache", "04_fork_and_copy_on_write"):
        shutil.copy(NOTEBOOKS / f"{stem}.ipynb", tmp_path / f"{stem}.ipynb")
    monkeypatch.setenv(lecture.NOTEBOOK_VARIABLE, str(tmp_path / "04_fork_and_copy_on_write.ipynb"))
    learners = lecture.load()
    assert learners.notebook == tmp_path / "04_fork_and_copy_on_write.ipynb"
    assert learners.PrefixCache is None  # no 05 beside it: the prefix-cache scene says so
    with pytest.raises(NotebookLoadError, match="the prefix-cache demo needs it"):
        learners.prefix_cache()
    story = learners.story()
    story.go(story.total)
    assert "04_fork_and_copy_on_write.ipynb" in story.title and "freed C" in story.message
    assert lecture.load(tmp_path).notebook == learners.notebook  # the folder will do
    with pytest.raises(NotebookLoadError, match="make demo NOTEBOOK="):
        lecture.load(tmp_path / "missing.ipynb")
    monkeypatch.setenv(lecture.NOTEBOOK_VARIABLE, "")
    assert lecture.load().notebook == NOTEBOOKS / "04_fork_and_copy_on_write.ipynb"  # the default


def test_lecture_scenes_show_ten_sequences_compactly(PagedKVCache, PrefixCache, tmp_path, capsys):
    from paged_helpers.widgets import lecture

    shown = lecture.Lecture(PagedKVCache, PrefixCache, NOTEBOOKS / "04_fork_and_copy_on_write.ipynb")
    tables = shown.block_tables()
    assert len(tables.tables) == 10 and tables.drawn_compact and tables.presentation
    assert len({(tables.colours(s), tables.colours.pattern(s)) for s in tables.tables}) == 10
    assert tables.problems == []
    prefix = shown.prefix_cache()
    assert len(prefix.requests) == 10 and prefix.view.drawn_compact
    assert [r["reused"] for r in prefix.requests] == [0] + [12] * 9  # the system prompt's 3 blocks
    assert elements(prefix.to_html(), "ph-free-count")
    assert lecture.main(["--html", str(tmp_path / "story.html"), "--notebook", str(NOTEBOOKS)]) == 0
    assert "10 frames" in capsys.readouterr().out and (tmp_path / "story.html").stat().st_size > 10_000
