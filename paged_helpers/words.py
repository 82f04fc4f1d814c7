"""A word-level tokenizer for the tiny Qwen3: prompts written and shown as words, ids underneath.

The vocabulary (``data/tiny-qwen3/vocab.json``) is a list of ``vocab_size`` strings; a token's id
is its index. It is built from the course's own corpus (``data/corpus.txt``): ``<unk>`` first,
then the corpus's words and punctuation, most frequent first. Every id the model can emit has
a text, so any token sequence (also a random one) can be shown as words.

Text is lowercase words split on spaces; punctuation marks are tokens of their own and sit
against the word before them. A text written that way round-trips:
``decode(encode(text)) == text`` (the course's prompts are, tests/test_course_data.py).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

UNKNOWN = "<unk>"
# A word (letters and digits, with an optional 's / 't style ending) or one punctuation mark.
PIECE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")
# Punctuation that decode writes without a space before it.
CLOSING = frozenset(".,;:?!")


def split_words(text: str) -> list[str]:
    """The pieces of ``text`` (lowercased): words and single punctuation marks."""
    return PIECE.findall(text.lower())


def build_vocabulary(corpus: str, size: int, required: Iterable[str] = ()) -> list[str]:
    """``<unk>`` then the corpus's ``size - 1`` most frequent pieces (ties alphabetical).

    ``required`` pieces (the course's prompts) must make the cut; the build stops otherwise.
    """
    counts = Counter(split_words(corpus))
    ranked = sorted(counts, key=lambda piece: (-counts[piece], piece))
    if len(ranked) < size - 1:
        raise ValueError(f"the corpus has {len(ranked)} distinct words; a vocabulary of {size} needs {size - 1}")
    vocabulary = [UNKNOWN, *ranked[: size - 1]]
    kept = set(vocabulary)
    dropped = sorted({piece for piece in required if piece not in kept})
    if dropped:
        raise ValueError(
            f"the words {dropped[:10]} of the course's prompts are too rare in the corpus to make the "
            f"{size}-word vocabulary: use them more often in corpus.txt"
        )
    return vocabulary


class WordTokenizer:
    """encode: text -> ids; decode: ids -> text; token_text: one id -> its word."""

    def __init__(self, vocabulary: Sequence[str]) -> None:
        if len(set(vocabulary)) != len(vocabulary) or not vocabulary or vocabulary[0] != UNKNOWN:
            raise ValueError(f"vocabulary must be distinct strings starting with {UNKNOWN!r}")
        self.vocabulary = list(vocabulary)
        self.ids = {piece: index for index, piece in enumerate(self.vocabulary)}

    @classmethod
    def from_file(cls, path: str | Path) -> WordTokenizer:
        return cls(json.loads(Path(path).read_text()))

    @property
    def vocab_size(self) -> int:
        return len(self.vocabulary)

    def __len__(self) -> int:
        return len(self.vocabulary)

    def encode(self, text: str, unknown: str = "error") -> list[int]:
        """Token ids of ``text``. A word outside the vocabulary raises ValueError naming it, or
        becomes ``<unk>`` (id 0) with ``unknown="unk"``."""
        if unknown not in ("error", "unk"):
            raise ValueError(f"unknown must be 'error' or 'unk', got {unknown!r}")
        pieces = split_words(text)
        missing = sorted({piece for piece in pieces if piece not in self.ids})
        if missing and unknown == "error":
            raise ValueError(
                f"the word(s) {missing[:10]} are not in the tiny model's {self.vocab_size}-word vocabulary; "
                "use other words (tokenizer.vocabulary lists them) or pass unknown='unk'"
            )
        return [self.ids.get(piece, 0) for piece in pieces]

    def token_text(self, token_id: int) -> str:
        """The word of one id (for labels: a block-table slot, a reused prefix)."""
        if not isinstance(token_id, int) and not hasattr(token_id, "__index__"):
            raise TypeError(f"token_id must be an integer id, got {type(token_id).__name__}")
        index = int(token_id)
        if not 0 <= index < self.vocab_size:
            raise ValueError(f"token_id must lie in [0, {self.vocab_size}), got {index}")
        return self.vocabulary[index]

    def tokens(self, ids: Iterable[int]) -> list[str]:
        """The word of each id, in order."""
        return [self.token_text(token_id) for token_id in ids]

    def decode(self, ids: Iterable[int]) -> str:
        """Words joined by spaces, punctuation against the word before it."""
        text = ""
        for piece in self.tokens(ids):
            text += piece if (not text or piece in CLOSING) else " " + piece
        return text


def tokenizer() -> WordTokenizer:
    """The tiny Qwen3's tokenizer, read from ``data/tiny-qwen3/vocab.json``."""
    from .data_files import TINY_QWEN3, data_path

    return WordTokenizer.from_file(data_path(TINY_QWEN3, "vocab.json"))
