"""Announcing live sessions: the agent sessions a running process serves, kept live by beats.

A process that acts as agent sessions (the MCP server for its ``--as`` session and for
each HTTP caller while a connection of it lives, ``birddog worker --live``) holds one
:class:`LiveAnnouncer`. It counts, per session, the holds on it (an MCP HTTP caller may
have several connections open): the first hold beats at once, :meth:`LiveAnnouncer.beat`
(a periodic side task of the process, every :data:`~birddog.core.live.LIVE_BEAT_S`)
renews every held session, the last release leaves it at once, and
:meth:`LiveAnnouncer.leave_all` (the process's last word) leaves what is still held.

Nothing here ends the process: a beat the database does not take is logged
(``live_beat_failed``) and the next one tries again; the session simply stops counting
when its TTL passes, which is also what a process that dies leaves behind. A beat the
database refuses (a login that may not announce that session: another agent's, or a
sender's) is logged once (``live_session_refused``) and not tried again for that session.
"""

from __future__ import annotations

from collections import Counter

import structlog

from birddog.core.ask import address_text
from birddog.core.errors import BirdDogError, StoreRefused
from birddog.core.live import LIVE_BEAT_S, LIVE_TTL_S
from birddog.core.mail import AgentAddress
from birddog.ports import LiveSessions

__all__ = ["LiveAnnouncer"]

log = structlog.get_logger("birddog.live")


class LiveAnnouncer:
    """The live sessions one process holds, beaten while held and left when released.

    Args:
        live: the live-session store.
        holder: this process's claimer id: what its own claims carry as their worker id,
            so they are never held back from its sessions.
        ttl_s: how long one beat keeps a session live (the store bounds it).
        every_s: how often :meth:`beat` is meant to run (it must stay below ``ttl_s``).

    Attributes:
        held: the holds on each session now.
        refused: the sessions the store refused to announce for this process's login
            (never beaten again).
        beats: beats the store took.
    """

    def __init__(
        self,
        live: LiveSessions,
        *,
        holder: str,
        ttl_s: float = LIVE_TTL_S,
        every_s: float = LIVE_BEAT_S,
    ) -> None:
        if not 0 < every_s < ttl_s:
            raise ValueError("a live session must beat more often than its TTL")
        self.live = live
        self.holder = holder
        self.ttl_s = ttl_s
        self.every_s = every_s
        self.held: Counter[AgentAddress] = Counter()
        self.refused: set[AgentAddress] = set()
        self.beats = 0

    async def hold(self, address: AgentAddress) -> None:
        """Hold ``address`` live; the first hold of a session beats at once."""
        self.held[address] += 1
        if self.held[address] == 1:
            await self._beat_one(address)
            log.info("live_session_started", session=address_text(address), holder=self.holder)

    async def release(self, address: AgentAddress) -> None:
        """Release one hold of ``address``; the last one leaves the session at once."""
        if self.held[address] <= 0:
            return
        self.held[address] -= 1
        if self.held[address] == 0:
            del self.held[address]
            await self._leave_one(address)

    async def beat(self) -> None:
        """Renew every held session (one beat each); a failure is logged, never raised."""
        for address in list(self.held):
            await self._beat_one(address)

    async def leave_all(self) -> None:
        """Leave every session still held (the process's clean exit); never raises."""
        for address in list(self.held):
            del self.held[address]
            await self._leave_one(address)

    async def _beat_one(self, address: AgentAddress) -> None:
        if address in self.refused:
            return
        try:
            await self.live.beat(
                agent_id=address.agent_id,
                session=address.session_id,
                holder=self.holder,
                ttl_s=self.ttl_s,
            )
        except StoreRefused as exc:  # this login may not announce it: asking again is noise
            self.refused.add(address)
            log.warning(
                "live_session_refused", session=address_text(address), error=type(exc).__name__
            )
            return
        except BirdDogError as exc:  # the session stops counting at its TTL; next beat retries
            log.warning("live_beat_failed", session=address_text(address), error=type(exc).__name__)
            return
        self.beats += 1

    async def _leave_one(self, address: AgentAddress) -> None:
        if address in self.refused:  # never announced: nothing to leave
            self.refused.discard(address)
            return
        try:
            await self.live.leave(
                agent_id=address.agent_id, session=address.session_id, holder=self.holder
            )
        except BirdDogError as exc:  # its TTL ends it instead, within seconds
            log.warning(
                "live_leave_failed", session=address_text(address), error=type(exc).__name__
            )
            return
        log.info("live_session_left", session=address_text(address), holder=self.holder)
