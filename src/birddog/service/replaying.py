"""Replay that first checks the cause: a dead letter goes back only once it could arrive.

``birddog replay`` and the console's Replay put dead letters back to pending. A dead
letter whose cause still holds would only die again at once (``unknown_recipient`` with
the route still missing), or wait for nothing; so each recipient of the dead letters
named is looked at first, and the replay is refused, saying what to fix, when

- the recipient still has no route (add one: an inbox URL or ``--mailbox``);
- its route is held (release it);
- its route's URL is refused by the egress policy (change the URL or the policy).

Nothing is replayed when any recipient is refused.
"""

from __future__ import annotations

from birddog.core.egress import EgressPolicy, check_route_url
from birddog.core.errors import InvalidInput
from birddog.core.text import printable
from birddog.ports import DeadLetters, Route, RouteBook

__all__ = ["CheckedReplay", "replay_refusal"]


def replay_refusal(agent_id: str, route: Route | None, egress: EgressPolicy) -> str | None:
    """Why dead letters to ``agent_id`` should not be replayed yet; None when they may.

    Args:
        agent_id: the recipient.
        route: its route now (None: it has none).
        egress: where posts may connect.

    Returns:
        What to fix, in one clause, or None.
    """
    shown = printable(agent_id)
    if route is None:
        return (
            f"{shown} still has no route: add one first (birddog route add {shown} URL, "
            f"or --mailbox)"
        )
    if not route.enabled:
        return f"{shown}'s route is held: release it first (birddog route release {shown})"
    if route.kind == "http":
        try:
            check_route_url(route.url, egress)
        except InvalidInput as exc:
            return (
                f"{shown}'s route URL is still refused ({exc}): change it (birddog route "
                f"update {shown} --url URL) or the egress policy (BIRDDOG_EGRESS_ALLOW)"
            )
    return None


class CheckedReplay:
    """A :class:`~birddog.ports.DeadLetterReplay` that refuses a replay whose cause holds.

    Args:
        outbox: the dead letters.
        routes: the recipients' routes, read as they are now.
        egress: the egress policy the daemon posts under.
    """

    def __init__(self, outbox: DeadLetters, routes: RouteBook, egress: EgressPolicy) -> None:
        self.outbox = outbox
        self.routes = routes
        self.egress = egress

    async def replay(self, *, key: str | None = None, agent_id: str | None = None) -> list[str]:
        """Replay one dead letter (``key``) or all of a recipient's, when they could arrive.

        Args:
            key: replay this dead letter.
            agent_id: replay every dead letter to this recipient.

        Returns:
            The keys put back to pending (empty when nothing matched).

        Raises:
            InvalidInput: a recipient's cause still holds (the message says what to fix);
                nothing was replayed.
        """
        refusals = []
        for recipient in await self.outbox.dead_recipients(key=key, agent_id=agent_id):
            refusal = replay_refusal(recipient, await self.routes.route(recipient), self.egress)
            if refusal is not None:
                refusals.append(refusal)
        if refusals:
            raise InvalidInput(
                "not replayed, it would die again: " + "; ".join(refusals) + "; then replay",
                field="key" if key is not None else "agent",
            )
        return await self.outbox.replay(key=key, agent_id=agent_id)
