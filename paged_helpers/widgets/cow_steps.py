"""The CowDemo's steps: create, fork, write, free and reset, each said in one line.

``CowSteps`` is the part of ``CowDemo`` that acts. Each step calls the cache class's own
methods (through ``cow_calls.call``, so a mistake becomes a line, never a traceback), updates the
demo's state (``sequences``, ``selected``, ``tokens``) and says what happened with ``_say``; the
``*_line`` functions below word what a step found, from plain values. The state it relies on
(``cache``, ``sizes``, ``words``, ``_generator``, ``_names``, the helpers ``_call``, ``_target``,
``_ready``, ``_room_for_one_more``, ``_take_name``, ``_after_failure``, ``_say``) is owned by
``CowDemo`` in ``cow_demo``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from .cow_calls import StepFailed, describe_copy, list_blocks
from .state import find_copies, read_tables


def _step(method: Callable[..., Any]) -> Callable[..., Any]:
    """A public step never raises for the class's mistakes: anything unexpected becomes a line."""

    @functools.wraps(method)
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:  # e.g. a cache without `lengths`: explain, keep the demo alive
            self._say(f"{method.__name__} could not run: {type(error).__name__}: {error}")
            return None

    return guarded


class CowSteps:
    """The steps of a ``CowDemo``: each acts on the selected sequence unless given one, and never raises."""

    @_step
    def reset(self) -> None:
        """A fresh, empty cache built from the class."""
        self._restart()
        try:
            self.cache = self._call(
                "__init__", self.cache_class, *self.sizes.values(), device="cpu", dtype=torch.float32
            )
        except StepFailed as failure:
            self.cache = None
            self.problem = str(failure)
            self._say(str(failure))
            return
        self.view.set_cache(self.cache)
        s = self.sizes
        self._say(
            f"new cache: {s['num_blocks']} blocks of {s['block_size']} slots, all free. Create a prompt to begin."
        )

    @_step
    def create(self, tokens: int | None = None) -> str | None:
        """Create a new sequence and prefill a prompt of ``tokens`` tokens. Returns its name."""
        tokens = self.prompt_tokens if tokens is None else int(tokens)
        if not self._ready() or not self._room_for_one_more():
            return None
        seq = self._take_name()
        try:
            self._call("create", self.cache.create, seq)
            self.sequences = [*self.sequences, seq]
            self._call("reserve", self.cache.reserve, seq, tokens)
            self._write_kv(seq, start=0, count=tokens)
            self.tokens[seq] = self.words.prompt(tokens)
        except StepFailed as failure:
            return self._after_failure(failure)
        self.selected = seq
        quoted = self.words.quoted(self.tokens[seq])
        self._say(created_line(seq, tokens, list(self.cache.tables[seq]), self.sizes["block_size"], quoted))
        return seq

    @_step
    def fork(self, parent: str | None = None) -> str | None:
        """Fork ``parent`` (default: the selected sequence) into a new child. Returns the child's name."""
        parent = self._target(parent)
        if parent is None or not self._room_for_one_more():
            return None
        child = self._take_name()
        try:
            self._call("fork", self.cache.fork, parent, child)
        except StepFailed as failure:
            return self._after_failure(failure)
        self.sequences = [*self.sequences, child]
        self.selected = child
        self.tokens[child] = list(self.tokens.get(parent, []))
        table = list(self.cache.tables[child])
        refs = self.cache.allocator.refs
        same_list = self.cache.tables[child] is self.cache.tables[parent]
        self._say(forked_line(child, parent, table, refs, same_list))
        return child

    @_step
    def write(self, seq: str | None = None) -> None:
        """Write one token into ``seq`` (default: the selected sequence): reserve, then update."""
        seq = self._target(seq)
        if seq is None:
            return
        before = read_tables(self.cache)
        refs_before = list(self.cache.allocator.refs)
        position = int(self.cache.lengths[seq])
        try:
            self._call("reserve", self.cache.reserve, seq, 1)
            after = read_tables(self.cache)
            self._write_kv(seq, start=position, count=1)
        except StepFailed as failure:
            self._after_failure(failure)
            return
        token = self.words.next_word(self._generator)
        self.tokens.setdefault(seq, []).append(token)
        said = f"token {position}{self.words.quoted([token], brackets=True)}"
        self._say(self._wrote_line(seq, said, position, before, after, refs_before))

    @_step
    def free(self, seq: str | None = None) -> None:
        """Free ``seq`` (default: the selected sequence) and say where each of its blocks went."""
        seq = self._target(seq)
        if seq is None:
            return
        released = list(dict.fromkeys(self.cache.tables[seq]))
        try:
            self._call("free", self.cache.free, seq)
        except StepFailed as failure:
            self._after_failure(failure)
            return
        self.sequences = [s for s in self.sequences if s != seq]
        self.selected = self.sequences[-1] if self.sequences else ""
        self.tokens.pop(seq, None)
        self._say(freed_line(seq, released, self.cache.allocator.refs))

    def _wrote_line(self, seq: str, said: str, position: int, before: dict, after: dict, refs_before: list[int]) -> str:
        """What a write did: a copy (and why), a write into an own or a shared block, or a new block."""
        size = self.sizes["block_size"]
        logical, slot = divmod(position, size)
        copies = [c for c in find_copies(before, after) if c.seq == seq]
        if copies:
            return "; ".join(
                describe_copy(self.cache, c, refs_before[c.source], slot if c.logical == logical else size, said)
                for c in copies
            )
        if logical < len(before[seq]):
            block = before[seq][logical]
            if refs_before[block] > 1:
                return (
                    f"{seq} wrote {said} into block {block} "
                    f"while {refs_before[block]} tables shared it: "
                    "the others now see this token too. Copy-on-write is missing in reserve"
                )
            return f"{seq} wrote {said} into its own block {block}, slot {slot}: no copy needed"
        if logical < len(after[seq]):
            return f"{seq}'s last block was full: block {after[seq][logical]} allocated for {said}"
        return f"{seq} wrote {said}, but reserve gave its table no block for it"

    def _write_kv(self, seq: str, start: int, count: int) -> None:
        """Write random keys and values for positions [start, start + count) of seq, every layer."""
        if count == 0:
            return
        heads, dim = self.sizes["kv_heads"], self.sizes["head_dim"]
        positions = torch.arange(start, start + count)
        self._call("set_batch", self.cache.set_batch, [seq])
        for layer in range(self.sizes["layers"]):
            keys = torch.randn(1, heads, count, dim, generator=self._generator)  # [B, H, T, D]
            values = torch.randn(1, heads, count, dim, generator=self._generator)
            self._call("update", self.cache.update, layer, keys, values, positions)


def created_line(seq: str, tokens: int, table: list[int], block_size: int, quoted: str) -> str:
    """What a create did: the prompt's blocks, and how full the last one is."""
    if not table:
        return f"created {seq} with an empty prompt"
    last = tokens - (len(table) - 1) * block_size
    tail = f" (the last holds {last} of {block_size} slots)" if last < block_size else ""
    return f"created {seq} with a {tokens}-token prompt{quoted}: {list_blocks(table)}{tail}"


def forked_line(child: str, parent: str, table: list[int], refs: Any, same_list: bool) -> str:
    """What a fork did: the child's table points at the parent's blocks (and whether it is the same list)."""
    counts = ", ".join(f"{b}\u2192{refs[b]}" for b in dict.fromkeys(table))
    line = f"forked {child} from {parent}: {child}'s table {table} points at {parent}'s blocks"
    line += "; nothing copied"
    line += f" (refcounts now {counts})" if table else ""
    if same_list:
        line += (
            f". But {child}'s table is the very same list as {parent}'s: a block appended to one "
            "appears in both. Fork must copy the list"
        )
    return line


def freed_line(seq: str, released: list[int], refs: Any) -> str:
    """What a free did: which of the sequence's blocks went back on the free list, which are still used."""
    returned = [b for b in released if refs[b] == 0]
    kept = [b for b in released if refs[b] > 0]
    parts = []
    if returned:
        parts.append(f"{list_blocks(returned)} back on the free list")
    if kept:
        parts.append(", ".join(f"block {b} still used (ref {refs[b]})" for b in kept))
    return f"freed {seq}: " + ("; ".join(parts) if parts else "it held no blocks")
