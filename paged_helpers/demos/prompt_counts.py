"""The hit rate and the prefill tokens of a serving demo's run, from the two counts it keeps.

A run's result (``radix.ServerRun``, ``route.RouteRun``) counts ``prompt_tokens``, every prompt
token it served, and ``cached_tokens``, those a cache supplied instead of a prefill. Both demos
print the same two figures from them; ``PromptCounts`` computes them one way for both.
"""

from __future__ import annotations


class PromptCounts:
    """Mixin for a run's result: reads its ``prompt_tokens`` and ``cached_tokens``, which the
    result owns (as dataclass fields) and the demo adds to; the mixin keeps no state of its own."""

    prompt_tokens: int
    cached_tokens: int

    @property
    def hit_rate(self) -> float:
        """Prompt tokens a cache supplied / prompt tokens (0.0 before any prompt was served)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens computed: those no cache supplied."""
        return self.prompt_tokens - self.cached_tokens
