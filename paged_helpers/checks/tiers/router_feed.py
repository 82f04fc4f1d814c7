"""The driver both router checks share: a drawn stream of KV events fed to a router of the learner's.

``RouterFeed`` sends the stream's events to the router one at a time and, after each, asks the
requests the stream drew for that moment; the place in every message is the scenario and the last
three events (``where``). It owns the router, that history and the count of requests asked. Both
checks ask a replica's ``cost`` and the router's ``choose`` the same way (``expect_cost``,
``ask_choice``, ``wrong_choice``); a subclass says how an event is sent and told (``send``, ``told``),
what it asks after one (``after_event``) and what it reports once the stream is done (``finish``).
"""

from __future__ import annotations

from typing import Any

from ..reading.calls import call_learner
from ..reading.strict import learner_float, learner_int
from ..speaking.failure import fail

__all__ = ["RouterFeed"]


class RouterFeed:
    """One stream on one router of ``replicas`` replicas; failures name ``scenario`` and the last events."""

    COST_HINT = ""  # each check's cost rule
    CHOOSE_HINT = ""  # each check's choice rule

    def __init__(self, router: Any, scenario: str, replicas: int) -> None:
        self.router, self.scenario, self.replicas = router, scenario, replicas
        self.history: list[str] = []
        self.asked = 0

    def feed(self, stream: Any) -> int:
        """Send every event of ``stream`` (``stream.accounts()``: index, event, the check's account after
        it), asking after each; returns how many requests were asked."""
        for step, event, account in stream.accounts():
            self.history.append(self.told(event))
            self.send(event)
            self.after_event(
                event, account, f"{self.scenario}, after event {step + 1} ({'; '.join(self.history[-3:])})"
            )
        self.finish()
        return self.asked

    def told(self, event: tuple) -> str:
        """The event in a few words, for the history in messages."""
        raise NotImplementedError

    def send(self, event: tuple) -> None:
        """The router's ``on_event`` for ``event``."""
        raise NotImplementedError

    def after_event(self, event: tuple, account: Any, where: str) -> None:
        """Ask the requests drawn after ``event`` and compare with ``account``."""
        raise NotImplementedError

    def finish(self) -> None:
        """After the last event: nothing, unless the subclass held back a failure."""

    # --- what both checks ask ----------------------------------------------------------------------
    def expect_cost(
        self, replica: int, keys: list, decode: list[int], want: float, measure: str, where: str, *, shown: Any
    ) -> float:
        """The router's ``cost`` on ``replica`` equal to ``want`` (``shown`` in the message, after
        ``measure``: the overlap or credit it stands on); returns the router's answer."""
        cost = learner_float(
            call_learner(
                f"cost({replica}, keys, {decode})",
                self.router.cost,
                replica,
                list(keys),
                list(decode),
                scenario=where,
            ),
            f"cost({replica}, keys, decode_blocks)",
            where,
        )
        if abs(cost - want) > 1e-9 * max(1.0, abs(want)):
            fail(
                f"{where}: cost of a request of {len(keys)} blocks on replica {replica} ({measure}, "
                f"decode_blocks {decode[replica]})",
                shown,
                cost,
                self.COST_HINT,
            )
        return cost

    def ask_choice(self, keys: list, decode: list[int], where: str) -> int:
        """The router's ``choose`` for a request of ``keys``."""
        return learner_int(
            call_learner(f"choose(keys, {decode})", self.router.choose, list(keys), list(decode), scenario=where),
            "choose(keys, decode_blocks)",
            where,
        )

    def wrong_choice(self, keys: list, decode: list[int], best: int, costs: list, got: int, where: str) -> None:
        """Fail: the router chose ``got`` where the lowest cost (``costs`` as shown) is ``best``'s."""
        fail(
            f"{where}: choose for a request of {len(keys)} blocks, decode_blocks {decode}",
            f"replica {best} (costs {costs})",
            f"replica {got}",
            self.CHOOSE_HINT,
        )
