"""The words the CowDemo's prompts and writes use: the course's fork prompt (``data/prompts.json``).

The cache stores keys and values, not tokens, so the demo keeps each sequence's token ids itself
and hands them to the picture: every slot then shows its word. A prompt is the next run of words
of the fork prompt; a write draws one of its words (seeded, so a replayed story draws the same).
``DemoWords(words=False)``: ids 0 only, and no quoted words in the demo's lines.
"""

from __future__ import annotations

import torch

from ..data_files import course_prompts
from ..words import split_words, tokenizer


class DemoWords:
    def __init__(self, words: bool = True):
        self.tokenizer = tokenizer() if words else None
        fork_text = course_prompts()["fork_prompt"] if words else ""
        self._prompt_ids = self.tokenizer.encode(fork_text) if self.tokenizer else []
        self._choices = [
            self.tokenizer.encode(piece)[0] for piece in dict.fromkeys(split_words(fork_text)) if piece.isalpha()
        ]
        self._prompts_made = 0

    @property
    def token_text(self):
        """Token id -> the word the picture shows (``str``: the id, without words)."""
        return self.tokenizer.token_text if self.tokenizer else str

    def restart(self) -> None:
        """The next prompt starts at the fork prompt's beginning again (a reset demo)."""
        self._prompts_made = 0

    def prompt(self, count: int) -> list[int]:
        """The next ``count`` words of the course's fork prompt (each new prompt starts further on)."""
        if not self._prompt_ids:
            return [0] * count
        text = self._prompt_ids
        start = (self._prompts_made * count) % len(text)
        self._prompts_made += 1
        return [text[(start + index) % len(text)] for index in range(count)]

    def next_word(self, generator: torch.Generator) -> int:
        """A word to write: drawn with ``generator`` from the words of the course's fork prompt."""
        if not self._choices:
            return 0
        index = int(torch.randint(len(self._choices), (1,), generator=generator))
        return self._choices[index]

    def quoted(self, ids: list[int], brackets: bool = False) -> str:
        """' "tell me a short story"' (or ' ("sea")') when the demo shows words; "" otherwise."""
        if self.tokenizer is None or not ids:
            return ""
        text = f'"{self.tokenizer.decode(ids)}"'
        return f" ({text})" if brackets else f" {text}"
