"""Values built to fool a check's comparisons, for the tests that prove the checks read strictly.

A check must never compare with these: an int that says it equals anything (and differs from
nothing), a list that says it equals anything. The strict readers (``paged_helpers/checks/reading/strict.py``)
refuse them and name their type in the message.
"""

from __future__ import annotations


class EqualsAnything(int):
    """An int that says it equals anything (and differs from nothing)."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class SaysEqual(list):
    """A list that says it equals anything."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None
