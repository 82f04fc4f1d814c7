"""A subclass of a learner's class whose methods a check watches: the engine checks' instrument.

    Watched = subclass(PagedKVCache, "PagedKVCache", {"create": hook})   # hook(self, base, seq)

Each ``hooks[name](self, base, *args, **kwargs)`` runs in place of the method ``name``; ``base``
is the learner's own method bound to ``self`` (what ``super().name`` would be). The class is made
where the learner's class lives. When grading that is the learner's process: there each hooked
method calls the check's hook across the wire, and the check's hook calls ``base`` back, so the
rules of a check run on the checking side while the learner's engine runs on its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .remote import is_remote, remote_peer

__all__ = ["subclass", "subclass_here"]


def _forwarding(base_class: type, name: str, hook: Callable) -> Callable:
    def method(self, *args: Any, **kwargs: Any) -> Any:
        return hook(self, functools.partial(getattr(base_class, name), self), *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


def subclass_here(base_class: type, name: str, hooks: dict[str, Callable]) -> type:
    namespace = {method: _forwarding(base_class, method, hook) for method, hook in hooks.items()}
    klass = type(name, (base_class,), namespace)
    klass.__qualname__ = name
    return klass


def subclass(base_class: Any, name: str, hooks: dict[str, Callable]) -> Any:
    """A subclass of ``base_class`` named ``name`` whose methods ``hooks`` watch (made where it lives)."""
    if is_remote(base_class):
        return remote_peer(base_class).request("special", target=base_class, name="subclass", args=[name, hooks])
    return subclass_here(base_class, name, hooks)
