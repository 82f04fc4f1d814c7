"""Static HTML pictures of the pool, the block tables and the prefix cache.

The live widgets show exactly these pictures (inside an ``ipywidgets.HTML``), and the same
HTML is each widget's ``text/html`` fallback, so a notebook exported to HTML, or nbgrader's
feedback, shows the same picture without a running kernel.

Everything is inline-styled HTML (JupyterLab's sanitiser keeps inline styles where it would
drop a <style> element), sized in em so presentation mode scales it with one font size.
Elements carry ``ph-*`` classes and ``data-*`` attributes (block, refs, seq, copy-of) so tests
and a browser can find a block without parsing text.

Presentation pictures (``presentation=True``) never shrink text below the page's font size:
secondary text that is smaller in a notebook is full size on a projector. A *compact* pool draws
only the blocks in use and one tile counting the free ones, so a pool of any size fits a screen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape

from . import palette
from .palette import SequenceColours
from .state import BlockState, Copy, PoolState

NORMAL_FONT_PX = 14
PRESENTATION_FONT_PX = 24
# Secondary text (notes, the fill bar, the legend) in a notebook; full size in presentation mode.
NORMAL_SMALL = "0.9em"


def small(presentation: bool) -> str:
    return "1em" if presentation else NORMAL_SMALL


def page(body: str, *, kind: str, presentation: bool = False) -> str:
    """The root element every picture sits in: theme colours, font, and the presentation scale."""
    size = PRESENTATION_FONT_PX if presentation else NORMAL_FONT_PX
    mode = " ph-presentation" if presentation else ""
    return (
        f'<div class="ph-widget ph-{kind}{mode}" style="font-family:{palette.FONT};font-size:{size}px;'
        f'color:{palette.TEXT};line-height:1.35;padding:0.3em 0;white-space:normal;overflow-wrap:anywhere">'
        f"{body}</div>"
    )


def chip(label: str, colour: str, *, pattern: str = "solid", title: str = "") -> str:
    """A sequence's name on its colour (and pattern): it reads without colour vision too."""
    tip = f' title="{escape(title)}"' if title else ""
    return (
        f'<span class="ph-chip" data-seq="{escape(label)}" data-pattern="{pattern}"{tip} '
        f'style="display:inline-block;min-width:1.3em;'
        f"padding:0 0.3em;margin:0.1em 0.15em 0.1em 0;border-radius:0.3em;text-align:center;"
        f"background:{palette.background(colour, pattern)};color:{palette.text_on(colour)};"
        f'font-weight:700">{escape(label)}</span>'
    )


def sequence_chip(label: str, colours: SequenceColours, title: str = "") -> str:
    return chip(label, colours(label), pattern=colours.pattern(label), title=title)


def _holder_chips(block: BlockState, colours: SequenceColours) -> str:
    chips = [sequence_chip(label, colours, title=f"sequence {label}") for label in block.users]
    if block.cached:
        chips.append(chip("cache", palette.PREFIX_CACHE_COLOUR, title="held by the prefix cache"))
    if block.others:
        chips.append(chip(f"+{block.others}", palette.OTHER_HOLDER_COLOUR, title="references held elsewhere"))
    return "".join(chips)


def _fill_bar(filled: int, block_size: int, presentation: bool = False) -> str:
    percent = 100 * filled / block_size if block_size else 0
    return (
        f'<div class="ph-fill" data-filled="{filled}" title="{filled} of {block_size} slots written" '
        f'style="display:flex;align-items:center;gap:0.3em;font-size:{small(presentation)};'
        f'color:{palette.MUTED_TEXT}">'
        f'<span style="flex:1;height:0.5em;border:1px solid {palette.BORDER};border-radius:0.2em">'
        f'<span style="display:block;height:100%;width:{percent:.0f}%;'
        f'background:{palette.TEXT}"></span></span>'
        f"{filled}/{block_size}</div>"
    )


EMPTY_SLOT = "\u00b7"  # a slot no sequence's tokens reach


def _slot_words(words: Sequence[tuple[str, ...]], presentation: bool = False) -> str:
    """The token in each slot of a block, in slot order (a dot for an empty slot, every word of a clash)."""
    spans = []
    for slot, labels in enumerate(words):
        clash = len(labels) > 1
        colour = palette.WARNING if clash else (palette.TEXT if labels else palette.MUTED_TEXT)
        weight = "font-weight:700;" if clash else ""
        text = " / ".join(escape(label) for label in labels) if labels else EMPTY_SLOT
        spans.append(
            f'<span class="ph-slot{" ph-clash" if clash else ""}" data-slot="{slot}" '
            f'style="display:inline-block;margin-right:0.3em;color:{colour};{weight}">{text}</span>'
        )
    return (
        f'<div class="ph-words" style="font-family:{palette.MONO};font-size:{small(presentation)};'
        f'line-height:1.25;margin-top:0.15em;overflow-wrap:anywhere">{"".join(spans)}</div>'
    )


def block_tile(
    block: BlockState,
    colours: SequenceColours,
    block_size: int,
    copied_from: int | None,
    presentation: bool = False,
    words: Sequence[tuple[str, ...]] | None = None,
) -> str:
    """One physical block: number, refcount, holders, fill, its slots' words if known, what is special."""
    classes = ["ph-block"]
    notes: list[tuple[str, str]] = []  # (kind, text)
    border = f"1px solid {palette.BORDER}"
    if block.free and block.refs == 0:
        classes.append("ph-free")
        border = f"1px dashed {palette.BORDER}"
        notes.append(("free", "free"))
    if block.shared:
        classes.append("ph-shared")
        border = f"3px solid {palette.TEXT}"
        notes.append(("shared", f"shared by {block.refs}"))
    if block.cached_only:
        classes.append("ph-cached-only")
        notes.append(("cached-only", "cached only"))
    if copied_from is not None:
        classes.append("ph-copy")
        border = f"4px double {palette.TEXT}"
        notes.insert(0, ("copy", f"copy of {copied_from}"))
    if block.problem:
        classes.append("ph-problem")
        border = f"3px solid {palette.WARNING}"
        notes.append(("problem", f"\u26a0 {block.problem}"))
    copy_attr = f' data-copy-of="{copied_from}"' if copied_from is not None else ""
    muted = f"color:{palette.MUTED_TEXT};" if "ph-free" in classes else ""
    # One line per note, each with its kind (a projector's dense tile leaves "shared by N" to the border and ref N).
    note_html = "".join(f'<div class="ph-note-{kind}">{escape(text)}</div>' for kind, text in notes) or "&nbsp;"
    # Presentation tiles are a little wider, for their larger name chips.
    width = "8.4em" if presentation else "7.2em"
    return (
        f'<div class="{" ".join(classes)}" data-block="{block.index}" data-refs="{block.refs}"{copy_attr} '
        f'style="box-sizing:border-box;flex:none;width:{width};min-height:6.2em;padding:0.3em;border:{border};'
        f'border-radius:0.35em;background:{palette.TILE};{muted}">'
        f'<div style="display:flex;justify-content:space-between;align-items:baseline">'
        f'<span class="ph-block-number" style="font-weight:700;font-size:1.15em">{block.index}</span>'
        f'<span class="ph-refs" style="font-family:{palette.MONO}">ref {block.refs}</span></div>'
        f'<div class="ph-holders" style="min-height:1.5em">{_holder_chips(block, colours)}</div>'
        f"{_fill_bar(block.filled, block_size, presentation)}"
        f"{_slot_words(words, presentation) if words else ''}"
        f'<div class="ph-note" style="font-size:{small(presentation)};margin-top:0.15em">{note_html}</div></div>'
    )


def block_ranges(blocks: Iterable[int], most: int = 4) -> str:
    """Block numbers as ranges, "1, 4\u201315"; past ``most`` ranges, "\u2026" says there are more."""
    ordered = sorted(set(blocks))
    ranges: list[tuple[int, int]] = []
    for block in ordered:
        if ranges and block == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], block)
        else:
            ranges.append((block, block))
    words = [str(a) if a == b else f"{a}\u2013{b}" for a, b in ranges]
    return ", ".join(words[:most]) + (", \u2026" if len(words) > most else "")


def block_word(blocks: Sequence[int]) -> str:
    """ "block 3", "blocks 1 and 2", "blocks 1, 2 and 5"."""
    if len(blocks) == 1:
        return f"block {blocks[0]}"
    return "blocks " + ", ".join(str(b) for b in blocks[:-1]) + f" and {blocks[-1]}"


def free_tile(state: PoolState, presentation: bool = False) -> str:
    """A compact pool's stand-in for every free block: how many, and which."""
    free = [b.index for b in state.blocks if b.free and b.refs == 0 and not b.problem]
    width = "8.4em" if presentation else "7.2em"
    which = f"<br>{block_ranges(free)}" if free else ""
    return (
        f'<div class="ph-free-count" data-free="{len(free)}" '
        f'style="box-sizing:border-box;flex:none;min-width:{width};min-height:6.2em;padding:0.3em;'
        f"border:1px dashed {palette.BORDER};border-radius:0.35em;color:{palette.MUTED_TEXT};"
        f'display:flex;flex-direction:column;justify-content:center;text-align:center">'
        f'<span style="font-weight:700;font-size:1.15em">{len(free)} free</span>'
        f'<span style="font-size:{small(presentation)}">block{"s" if len(free) != 1 else ""}{which}</span></div>'
    )


def _table_entry(logical: int, block: int, shared: bool, copied: bool) -> str:
    classes = "ph-entry" + (" ph-shared" if shared else "") + (" ph-copy" if copied else "")
    border = f"4px double {palette.TEXT}" if copied else f"{3 if shared else 1}px solid {palette.BORDER}"
    if shared and not copied:
        border = f"3px solid {palette.TEXT}"
    return (
        f'<span class="{classes}" data-logical="{logical}" data-block="{block}" '
        f'style="display:inline-block;margin:0.1em 0.2em 0.1em 0;padding:0.05em 0.4em;border:{border};'
        f'border-radius:0.3em;font-family:{palette.MONO}">{logical}\u2192{block}</span>'
    )


def block_tables(
    state: PoolState, colours: SequenceColours, copies: Sequence[Copy], texts: Mapping[str, str] | None = None
) -> str:
    """Each sequence's block table as a row of logical -> physical entries, and its text if known."""
    copied = {(c.seq, c.logical) for c in copies}
    shared = set(state.shared)
    rows = []
    for label, table in state.tables.items():
        entries = (
            "".join(
                _table_entry(logical, block, block in shared, (label, logical) in copied)
                for logical, block in enumerate(table)
            )
            or f'<span style="color:{palette.MUTED_TEXT}">(no blocks yet)</span>'
        )
        tokens = state.lengths.get(label, 0)
        rows.append(
            f'<div class="ph-table" data-seq="{escape(label)}" style="margin:0.15em 0">'
            f"{sequence_chip(label, colours)}"
            f'<span style="display:inline-block;min-width:5.5em;color:{palette.MUTED_TEXT}">'
            f"{tokens} token{'s' if tokens != 1 else ''}</span>{entries}{_sequence_text(texts, label)}</div>"
        )
    if not rows:
        rows.append(f'<div style="color:{palette.MUTED_TEXT}">no sequences</div>')
    return '<div class="ph-tables">' + "".join(rows) + "</div>"


def _sequence_text(texts: Mapping[str, str] | None, label: str) -> str:
    if not texts or label not in texts:
        return ""
    return (
        f'<div class="ph-text" style="margin:0.05em 0 0.2em 1.5em;color:{palette.MUTED_TEXT};'
        f'font-family:{palette.MONO}">{escape(texts[label])}</div>'
    )


def summary_line(state: PoolState) -> str:
    summary = (
        f"{state.num_blocks} blocks of {state.block_size} slots \u00b7 {state.num_free} free \u00b7 "
        f"{len(state.shared)} shared \u00b7 "
        f"{len(state.tables)} sequence{'s' if len(state.tables) != 1 else ''}"
    )
    if state.cached_only:
        summary += f" \u00b7 {len(state.cached_only)} held only by the prefix cache"
    return summary


def pool_picture(
    state: PoolState,
    colours: SequenceColours,
    copies: Sequence[Copy] = (),
    columns: int = 8,
    *,
    compact: bool = False,
    presentation: bool = False,
    show_legend: bool = True,
    words: Mapping[int, Sequence[tuple[str, ...]]] | None = None,
    texts: Mapping[str, str] | None = None,
) -> str:
    """The pool as tiles (``columns`` a row at most), a summary, the tables and a legend.

    ``compact`` draws only the blocks in use (or with broken bookkeeping) and one tile counting
    the free ones, so the picture's size follows the work in the pool, not the pool's size.
    """
    for label in state.tables:  # colours follow creation order, not the order tiles are drawn in
        colours(label)
    copied_from = {c.target: c.source for c in copies}
    shown = [b for b in state.blocks if not compact or not (b.free and b.refs == 0 and not b.problem)]
    tiles = "".join(
        block_tile(
            block, colours, state.block_size, copied_from.get(block.index), presentation, (words or {}).get(block.index)
        )
        for block in shown
    )
    if compact:
        tiles += free_tile(state, presentation)
    tile_em = 8.4 if presentation else 7.2
    # A wrapping flex row, not a grid: its narrowest size is one tile, so a narrow output area
    # (or presentation mode's large type) wraps the tiles instead of widening the whole output.
    problems = "".join(
        f'<div class="ph-problem-line" style="color:{palette.WARNING}">\u26a0 {escape(p)}</div>' for p in state.problems
    )
    return (
        f'<div class="ph-summary" data-free="{state.num_free}" style="font-weight:600;margin-bottom:0.3em">'
        f"{summary_line(state)}</div>{problems}"
        f'<div class="ph-pool{" ph-compact" if compact else ""}" style="display:flex;flex-wrap:wrap;gap:0.35em;'
        f'max-width:{columns * tile_em + (columns - 1) * 0.35:.2f}em">'
        f"{tiles}</div>"
        '<div class="ph-tables-heading" style="margin-top:0.5em;font-weight:600">'
        "Block tables (logical \u2192 physical)</div>"
        f"{block_tables(state, colours, copies, texts)}{legend(presentation) if show_legend else ''}"
    )


def legend(presentation: bool = False) -> str:
    items = [
        "ref N: how many tables (and caches) point at the block",
        "thick border: shared",
        "double border: just copied by copy-on-write",
        "dashed: free",
        "bar: slots written",
    ]
    return (
        f'<div class="ph-legend" style="margin-top:0.4em;font-size:{small(presentation)};'
        f'color:{palette.MUTED_TEXT}">' + " \u00b7 ".join(items) + "</div>"
    )


def message_lines(lines: Iterable[str], latest_first: bool = True, presentation: bool = False) -> str:
    """The demo's step log: the latest step large; the earlier ones folded under it, newest first.

    Only the latest line takes room: however many steps have run, the picture below it stays
    where it is (a projector's screen holds the demo after any number of clicks). The earlier
    steps are a ``<details>`` list, closed, that a click on "earlier steps (N)" opens.
    """
    lines = list(lines)
    if not lines:
        return ""
    ordered = list(reversed(lines)) if latest_first else lines
    latest, earlier = ordered[0], ordered[1:]
    text = (
        f'<div class="ph-message" role="status" aria-live="polite" '
        f'style="font-size:1.1em;font-weight:600;margin:0.3em 0">{escape(latest)}</div>'
    )
    if not earlier:
        return text
    style = f"font-size:{small(presentation)};color:{palette.MUTED_TEXT}"
    return (
        text
        + f'<details class="ph-history" style="{style};margin:0 0 0.3em 0">'
        + f'<summary style="cursor:pointer">earlier steps ({len(earlier)})</summary>'
        + "".join(f'<div class="ph-earlier">{escape(line)}</div>' for line in earlier)
        + "</details>"
    )


def error_box(text: str) -> str:
    """A problem the learner must fix, in place of a traceback."""
    return (
        f'<div class="ph-error" role="alert" style="border-left:0.3em solid {palette.WARNING};'
        f'padding:0.3em 0.6em;margin:0.3em 0;background:{palette.TILE}">{escape(text)}</div>'
    )


def token_words(tokens: Sequence[int], token_text: Callable[[int], str] = str) -> str:
    """Tokens as the reader sees them: ``token_text`` turns an id into a label (ids by default)."""
    return " ".join(str(token_text(int(t))) for t in tokens)


def _prefix_key(tokens: Sequence[int], token_text: Callable[[int], str] = str) -> str:
    return f"{len(tokens)} tokens (\u2026 {token_words(tokens[-3:], token_text)})"


def lru_list(entries: Sequence[dict], token_text: Callable[[int], str] = str) -> str:
    """Cached prefixes from least to most recently used: the next eviction candidate comes first."""
    if not entries:
        return f'<div class="ph-lru" style="color:{palette.MUTED_TEXT}">the prefix cache is empty</div>'
    items = []
    for rank, entry in enumerate(entries):
        in_use = entry["refs"] > 1
        status = "in use" if in_use else "evictable"
        items.append(
            f'<li class="ph-lru-entry" data-block="{entry["block"]}" data-rank="{rank}" '
            f'data-in-use="{int(in_use)}" '
            f'style="margin:0.1em 0">prefix of {escape(_prefix_key(entry["tokens"], token_text))} \u2192 block '
            f'<b>{entry["block"]}</b> <span style="color:{palette.MUTED_TEXT}">'
            f"(ref {entry['refs']}, {status})</span>"
            "</li>"
        )
    return (
        '<div class="ph-lru"><div style="font-weight:600">Cached prefixes, least recently used first '
        "(evict walks this order, skipping blocks in use)</div>"
        f'<ol style="margin:0.2em 0;padding-left:1.6em">{"".join(items)}</ol></div>'
    )


def _lookup_cell(item: dict) -> str:
    kind = item["kind"]
    text = {
        "hit": f"hit \u2192 {item.get('block')}",
        "miss": "miss",
        "last": "holds last token",
    }[kind]
    border = f"3px solid {palette.TEXT}" if kind == "hit" else f"1px dashed {palette.BORDER}"
    return (
        f'<span class="ph-lookup ph-{kind}" data-logical="{item["logical"]}" data-kind="{kind}" '
        f'style="display:inline-block;margin:0.1em 0.2em 0.1em 0;padding:0.05em 0.4em;border:{border};'
        f'border-radius:0.3em;font-family:{palette.MONO}">{item["logical"]}: {text}</span>'
    )


def request_rows(requests: Sequence[dict], colours: SequenceColours) -> str:
    """Per request: which of its full prompt blocks hit the cache, which missed, what was reused."""
    if not requests:
        return (
            f'<div class="ph-requests" style="color:{palette.MUTED_TEXT}">no requests recorded: attach them '
            "through the view (view.attach(seq, prompt)) to see each prompt block's hit or miss</div>"
        )
    rows = []
    for request in requests:
        label = request["seq"]
        cells = "".join(_lookup_cell(item) for item in request["blocks"])
        rows.append(
            f'<div class="ph-request" data-seq="{escape(label)}" data-reused="{request["reused"]}" '
            f'style="margin:0.15em 0">{sequence_chip(label, colours)}{cells}'
            f'<span style="color:{palette.MUTED_TEXT}"> reused {request["reused"]} of '
            f"{request['prompt_tokens']} prompt tokens</span></div>"
        )
    return (
        '<div class="ph-requests"><div style="font-weight:600">Requests: prompt blocks found in the cache'
        "</div>" + "".join(rows) + "</div>"
    )


def story_frame(*, title: str, position: int, total: int, done: str, upcoming: str, picture: str) -> str:
    """One frame of a story: what just happened, what comes next, and the pool, for a projector.

    Sized in em only: whoever shows the frame sets one font size (the presentation stage fits
    it to the screen). No text in it is smaller than that size.
    """
    return (
        f'<div class="ph-story-frame" data-position="{position}" data-total="{total}" '
        f'style="font-family:{palette.FONT};color:{palette.TEXT};line-height:1.3">'
        f'<div style="display:flex;justify-content:space-between;align-items:baseline;gap:1em;font-weight:700">'
        f'<span class="ph-story-title">{escape(title)}</span>'
        f'<span class="ph-step-counter" style="white-space:nowrap">step {position} of {total}</span></div>'
        f'<div class="ph-done" role="status" style="margin-top:0.3em"><b>Just now:</b> {escape(done)}</div>'
        f'<div class="ph-next" style="margin-top:0.2em;padding-left:0.4em;border-left:0.25em solid {palette.TEXT}">'
        f"<b>Next:</b> {escape(upcoming)}</div>"
        f'<div class="ph-story-picture" style="margin-top:0.5em">{picture}</div>'
        f'<div class="ph-story-keys" style="margin-top:0.4em;color:{palette.MUTED_TEXT}">'
        "PageDown or \u2192: next \u00b7 PageUp or \u2190: back \u00b7 Home: start again</div></div>"
    )
