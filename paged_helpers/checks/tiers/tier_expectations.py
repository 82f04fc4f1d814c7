"""What each tier call of the learner's must give in ``check_tiered_cache``, checked right after it.

``TieredServer`` makes the call; these compare what came back with the check's account (``TierAccount``):

* ``expect_holds``: GPU blocks (what match returned) hold the keys of the prompt's prefix ending with them;
* ``expect_fresh_loads``: every block load_back returned is fresh (count 1, in no table and not in the
  tree) and holds the keys of the prefix it was loaded for (a pinned slot was not given away meanwhile).
"""

from __future__ import annotations

from ..radix.on_the_model.request_server import BLOCK, tree_blocks
from ..reading.strict import strict_equal
from ..speaking.failure import fail
from .diagnosis import FRESH_HINT, HOST_DATA_HINT, LOST_HINT, PIN_HINT
from .tier_account import TierAccount

__all__ = ["expect_fresh_loads", "expect_holds"]


def expect_holds(account: TierAccount, blocks: list[int], prompt: list[int], what: str, where: str) -> None:
    """GPU ``blocks`` are the first blocks of ``prompt``: each holds the keys and values of its prefix."""
    pools = account.gpu_pools(where) if blocks else None
    keys = account.keys_of(prompt)
    for index, block in enumerate(blocks):
        key = keys[index] if index < len(keys) else None
        if key not in account.record or not strict_equal(pools[:, block], account.record[key]):
            fail(
                where,
                f"{what} {index} (block {block}) holding the keys and values of this prompt's tokens "
                f"0..{(index + 1) * BLOCK - 1}",
                "other keys and values",
                LOST_HINT if what == "match's block" else FRESH_HINT,
            )


def expect_fresh_loads(
    account: TierAccount,
    loaded: list[int],
    prompt: list[int],
    first: int,
    slots: list[int],
    running: list[str],
    where: str,
) -> None:
    """Each block load_back returned is fresh (count 1, in no table and not in the tree) and holds the keys
    of the prefix it was loaded for (a pinned slot was not given away meanwhile). ``first``: the index in
    ``prompt``'s blocks of the first loaded one; ``running``: the running requests."""
    refs = account.reads.refs(where)
    in_tree = tree_blocks(account.tiered, where)
    tables = {seq: account.table(seq, where) for seq in running}
    for block in loaded:
        holders = ["the tree"] if block in in_tree else []
        holders += [f"running request {seq!r}" for seq, table in tables.items() if block in table]
        if holders or not 0 <= block < len(refs) or refs[block] != 1:
            got = (
                f"load-back into block {block}, which {holders[0]} still holds"
                if holders
                else (f"block {block} with count {refs[block] if 0 <= block < len(refs) else 'none (not a block)'}")
            )
            fail(where, "load_back's blocks fresh: count 1, in no table and not in the tree", got, FRESH_HINT)
    entries = account.host_entries(where)
    pools = account.gpu_pools(where) if loaded else None
    keys = account.keys_of(prompt)
    for index, (block, slot) in enumerate(zip(loaded, slots, strict=True), start=first):
        key = keys[index] if index < len(keys) else None
        if key in account.record and strict_equal(pools[:, block], account.record[key]):
            continue
        if entries.get(key) != slot:
            fail(
                where,
                f"block {block}, loaded from host slot {slot} (pinned by match_host for tokens "
                f"0..{(index + 1) * BLOCK - 1}), holding those tokens' keys and values",
                f"other keys and values: the host dropped that entry while the slot was pinned"
                f" (host_entries now gives the key {'no slot' if key not in entries else f'slot {entries[key]}'})",
                PIN_HINT,
            )
        fail(
            where,
            f"block {block} holding the keys and values of host slot {slot}",
            "other keys and values",
            HOST_DATA_HINT,
        )
