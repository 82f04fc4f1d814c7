"""Colours for the widgets: colour-blind safe, and readable on JupyterLab's light and dark themes.

Sequences get the Okabe-Ito colours (Okabe & Ito, 2008), which stay distinguishable under the
common forms of colour blindness. Seven colours are not enough for a room full of sequences, so
the eighth to fourteenth sequences get the same colours striped, the next seven dotted: every
sequence up to the 21st has a colour-and-pattern pair of its own. Colour is never the only cue:
every chip also carries the sequence's name, and shared, copied, free and cached blocks are told
apart by text and border style as well.

Page colours (text, tile background, borders) come from JupyterLab's CSS variables, so the
pictures follow the theme; each has a light-theme fallback for places without those variables
(an exported HTML file, nbgrader's feedback). Chip text is black or white, whichever contrasts
more with the chip's own colour (WCAG relative luminance), so it reads the same on any theme.
"""

from __future__ import annotations

OKABE_ITO = {
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
    "black": "#000000",
}

# Black is left out: it would vanish on a dark theme.
SEQUENCE_COLOURS = tuple(colour for name, colour in OKABE_ITO.items() if name != "black")

# Chips for holders that are not sequences: the prefix cache, and references nobody accounts for.
PREFIX_CACHE_COLOUR = "#BBBBBB"
OTHER_HOLDER_COLOUR = "#888888"

# Theme-following page colours, with light-theme fallbacks.
TEXT = "var(--jp-ui-font-color1, #1f1f1f)"
MUTED_TEXT = "var(--jp-ui-font-color2, #5f5f5f)"
PAGE = "var(--jp-layout-color1, #ffffff)"
TILE = "var(--jp-layout-color2, #eeeeee)"
BORDER = "var(--jp-border-color1, #9e9e9e)"
WARNING = "var(--jp-warn-color1, #D55E00)"
FONT = "var(--jp-ui-font-family, system-ui, sans-serif)"
MONO = "var(--jp-code-font-family, monospace)"


def _luminance(colour: str) -> float:
    """WCAG relative luminance of a #RRGGBB colour."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(first: str, second: str) -> float:
    """WCAG contrast ratio between two #RRGGBB colours (1 to 21)."""
    light, dark = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def text_on(background: str) -> str:
    """Black or white, whichever is easier to read on ``background``."""
    return "#000000" if contrast(background, "#000000") >= contrast(background, "#FFFFFF") else "#FFFFFF"


PATTERNS = ("solid", "stripes", "dots")


def blend(colour: str, other: str, amount: float) -> str:
    """``colour`` moved ``amount`` (0 to 1) of the way towards ``other``, as #RRGGBB."""
    mixed = [
        round(int(colour[i : i + 2], 16) * (1 - amount) + int(other[i : i + 2], 16) * amount) for i in (1, 3, 5)
    ]
    return "#" + "".join(f"{channel:02X}" for channel in mixed)


def pattern_partner(colour: str) -> str:
    """The second colour of a striped or dotted chip: the chip colour moved away from its text
    colour, so the text contrasts with both colours at least as well as with the plain chip."""
    return blend(colour, "#FFFFFF" if text_on(colour) == "#000000" else "#000000", 0.55)


def background(colour: str, pattern: str) -> str:
    """CSS ``background`` for a chip of ``colour`` drawn with ``pattern`` (one of PATTERNS)."""
    if pattern == "solid":
        return colour
    partner = pattern_partner(colour)
    if pattern == "stripes":
        return f"repeating-linear-gradient(135deg,{colour} 0 0.22em,{partner} 0.22em 0.44em)"
    if pattern == "dots":
        return f"radial-gradient(circle,{partner} 0.12em,{colour} 0.14em) 0 0/0.42em 0.42em,{colour}"
    raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")


class SequenceColours:
    """Gives each sequence a colour and a pattern the first time it is seen, and keeps them.

    A view owns one of these, so a sequence keeps its look while others are created and freed
    around it. The n-th sequence seen gets colour n mod 7 and pattern n // 7 (solid, stripes,
    dots): 21 distinct looks, after which they repeat (the names still differ).
    """

    def __init__(self) -> None:
        self._assigned: dict[str, int] = {}

    def _rank(self, label: str) -> int:
        if label not in self._assigned:
            self._assigned[label] = len(self._assigned)
        return self._assigned[label]

    def __call__(self, label: str) -> str:
        """The sequence's colour (#RRGGBB); text on it is ``text_on`` of this colour."""
        return SEQUENCE_COLOURS[self._rank(label) % len(SEQUENCE_COLOURS)]

    def pattern(self, label: str) -> str:
        return PATTERNS[(self._rank(label) // len(SEQUENCE_COLOURS)) % len(PATTERNS)]

    def background(self, label: str) -> str:
        """The CSS background of the sequence's chip: its colour in its pattern."""
        return background(self(label), self.pattern(label))
