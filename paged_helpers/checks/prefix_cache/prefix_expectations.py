"""What must hold after each step of check_prefix_cache, checked against the server's account.

Who owns a reference: each entry of a block table owns one, and the prefix cache owns one more on
every block it keeps as an entry (taken when remember publishes it, never again). So a cached
block nobody runs has count 1 and is evictable; attach reuses only whole blocks whose whole
prefix is cached, from the start, stopping at the first miss and leaving one token to prefill;
every reused position holds the key computed for this prompt's prefix (``prefix_codes``); with no
request running, every block the prefix cache holds is reachable by attach; and after every
request is freed and everything evicted, no block is in use.

Each function reads the learner's objects through the server (``prefix_server.Server``) and fails with a
message naming the step; only ``expect_reachable`` calls the learner (its probes, through the server).
"""

from __future__ import annotations

from typing import Any, Protocol

from ..reading.cache_reads import CacheReads
from ..reading.ledger import Ledger
from ..reading.snapshot import CacheSnapshot
from ..reading.strict import learner_tensor, torch_unhooked
from ..speaking.failure import CheckFailed, Hint, fail
from .diagnosis import LEAK_HINT, STRANDED_HINT, reuse_hint, wrong_history
from .prefix_codes import BLOCK, prefix_code


class Server(Protocol):
    """What the expectations read of a server (``prefix_server.Server``), and its one probe."""

    scenario: str
    num_blocks: int
    cache: Any
    reads: CacheReads
    ledger: Ledger
    prompts: dict[str, list[int]]

    @property
    def allocator(self) -> Any: ...

    def probe(self, probe: str, name: str, prompt: list[int]) -> tuple[Any, list[int]]: ...


def expect_attached(server: Server, where: str, seq: str, got: Any, *, reused: int, short_hint: str | Hint) -> None:
    """After attach: the sequence created, ``reused`` tokens reused in whole blocks, each this prompt's."""
    prompt = server.prompts[seq]
    if seq not in server.reads.tables(where):
        fail(
            where,
            f"{seq!r} created in the cache",
            "no table for it",
            Hint(
                "attach creates the sequence in the cache, then shares the reused blocks into its table",
                "start attach with self.cache.create(seq)",
            ),
        )
    if type(got) is not int or got < 0 or got % BLOCK:
        fail(
            where,
            "the number of prompt tokens reused: a multiple of the block size",
            repr(got),
            "return how many tokens the reused blocks hold (blocks reused x block_size)",
        )
    table = server.reads.table(seq, where)
    length = server.reads.length(seq, where)
    if len(table) != got // BLOCK or length != got:
        fail(
            where,
            f"a table of {got // BLOCK} reused block(s) and lengths[{seq!r}] == {got}",
            f"table {table}, length {length}",
            "attach returns the tokens reused, appends exactly those blocks and sets the length to match",
        )
    expect_history(server, where, seq, prompt, got)
    if got != reused:
        hint = reuse_hint(got=got, reused=reused, prompt_length=len(prompt), short_hint=short_hint)
        fail(where, f"{reused} prompt tokens reused", f"{got}", hint)


def expect_history(server: Server, where: str, seq: str, prompt: list[int], reused: int) -> None:
    """Every reused position must hold the key computed for *this* prompt's prefix."""
    table = server.reads.table(seq, where)
    pool = learner_tensor(server.cache.k_pool[0], "cache.k_pool[0]", where)
    for position in range(reused):
        with torch_unhooked():  # the pool's values, whatever torch function mode is active
            found = float(pool[table[position // BLOCK], 0, position % BLOCK, 0])
        if found == prefix_code(prompt[: position + 1]):
            continue
        later = [q for q in range(position + 1, len(prompt)) if prefix_code(prompt[: q + 1]) == found]
        got, hint = wrong_history(owner=server.ledger.writers.get(found), later=later, position=position)
        fail(
            where,
            f"block {table[position // BLOCK]}, reused for positions {position - position % BLOCK}.."
            f"{position - position % BLOCK + BLOCK - 1}, holding this prompt's keys",
            got,
            hint,
        )


def expect_refcount(
    server: Server, block: int, refs: int, who: str, after: str, too_low: str | Hint, too_high: str | Hint
) -> None:
    """``block``'s reference count is ``refs`` (``who``: the owners that count, for the message)."""
    got = server.reads.refs(f"{server.scenario}, after {after}")[block]
    if got != refs:
        fail(
            f"{server.scenario}, after {after}",
            f"block {block}: refcount {refs} ({who})",
            f"refcount {got}",
            too_low if got < refs else too_high,
        )


def expect_free(server: Server, count: int, after: str, hint: str | Hint) -> None:
    free = server.reads.num_free(f"{server.scenario}, after {after}")
    if free != count:
        fail(f"{server.scenario}, after {after}", f"{count} free blocks", f"{free}", hint)


def expect_evicted(server: Server, wanted: int, count: int, after: str) -> None:
    """After ``evict(wanted)``: exactly ``count`` cached blocks went back, so ``wanted`` are free."""
    free = server.reads.num_free(f"{server.scenario}, after {after}")
    if free != wanted:
        fail(
            f"{server.scenario}, after {after}",
            f"{wanted} free blocks: exactly {count} cached block(s) dropped",
            f"{free}",
            "evict drops unused entries, least recently used first, until allocator.num_free >= "
            "blocks_wanted, then stops",
        )


def expect_refusal_allowed(
    server: Server, error: CheckFailed, blocks_wanted: int, *, possible: int, before: CacheSnapshot
) -> None:
    """evict raised MemoryError: allowed only when it cannot free ``blocks_wanted``, and having changed nothing.

    ``possible`` is how many blocks could be free after evicting everything nobody else uses.
    """
    where = f"{server.scenario}: evict({blocks_wanted}) with {possible} block(s) free at most after evicting"
    if blocks_wanted <= possible:
        fail(
            where,
            f"{blocks_wanted} free blocks: evict drops unused entries until that many are free",
            f"MemoryError: {error.__cause__}",
            "MemoryError is only for a request evict cannot meet; here dropping the entries nobody "
            "else uses (reference count 1) frees enough",
        )
    changes = before.changes(CacheSnapshot.of(server.cache))
    if changes:
        fail(
            where,
            "either every entry nobody else uses dropped and no error, or MemoryError with nothing changed",
            "MemoryError, after changing: " + "; ".join(changes),
            "when evict cannot free blocks_wanted blocks, free all it can and return (the notebook's "
            "design), or raise MemoryError before dropping anything: a caller that catches the "
            "error must find the cache as it was",
        )


def expect_reachable(server: Server, after: str, reuse: dict[str, tuple[list[int], int]]) -> None:
    """With no request running, every block the prefix cache holds must be reachable by attach.

    ``reuse`` maps a prompt's name to (prompt, tokens attach must reuse). Each prompt is attached
    as a probe and freed again (which touches its entries: call this last in a step).
    """
    assert not server.prompts, "expect_reachable needs every request freed"
    held = {block for block, refs in enumerate(server.reads.refs(server.scenario)) if refs}
    reached, got = set(), {}
    for name, (prompt, _) in reuse.items():
        got[name], blocks = server.probe(f"probe {name}", name, prompt)
        reached.update(blocks)
    stranded = sorted(held - reached)
    if stranded:
        fail(
            f"{server.scenario}, after {after}, then attaching {', '.join(reuse)} again",
            "every block the prefix cache still holds reachable: "
            + ", ".join(f"{name} reuses {tokens} tokens" for name, (_, tokens) in reuse.items()),
            f"block(s) {stranded} still held by the prefix cache but reached by no attach ("
            + ", ".join(f"{name} reused {tokens}" for name, tokens in got.items())
            + "): their entries lost an earlier block",
            STRANDED_HINT,
        )
    for name, (_, tokens) in reuse.items():
        if got[name] != tokens:
            fail(
                f"{server.scenario}, after {after}, then attaching {name} again",
                f"{tokens} prompt tokens reused",
                f"{got[name]}",
                STRANDED_HINT if got[name] < tokens else "evict dropped fewer entries than it reported",
            )


def expect_nothing_held(server: Server) -> None:
    """After every request was freed and evict(num_blocks): no block holds a reference."""
    counts = server.reads.refs(server.scenario)
    stuck = [block for block, refs in enumerate(counts) if refs]
    if stuck:
        fail(
            f"{server.scenario}, after freeing every request and evict({server.num_blocks})",
            f"all {server.num_blocks} blocks free (nothing uses them, so the cache can drop them all)",
            f"block(s) {stuck} still hold references {[counts[b] for b in stuck]}",
            LEAK_HINT,
        )


def expect_one_evicted(server: Server, wanted: int, after: str) -> None:
    """After ``evict(wanted)`` with one block more wanted than were free: exactly one cached block dropped."""
    free = server.reads.num_free(server.scenario)
    if free != wanted:
        fail(
            f"{server.scenario}, after {after}",
            f"{wanted} free blocks: exactly one cached block dropped",
            f"{free}",
            "evict drops entries only until allocator.num_free >= blocks_wanted, then stops",
        )
