"""What the engine holds between a claim and a store: the words its three parts share.

A claimed row is :data:`Held` (with its :class:`Claim`) from the claim until its outcome is
stored or it is given back. On the way it is ready in the window, out in a :class:`Post`,
or has a known :class:`Decided` waiting for the outcome store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from birddog.core.delivery import Attempt, DeliveryResult, OutboxRow, UndecodableRow
from birddog.ports import Page


@dataclass(eq=False, slots=True)
class Claim:
    """A claim the engine still holds rows of (hashed by identity).

    Attributes:
        page: what the claim took, and its token.
        taken_at: the engine's monotonic seconds at the claim: a row ready longer than
            ``ready_max_s`` goes back unposted.
    """

    page: Page
    taken_at: float


Held: TypeAlias = tuple[Claim, OutboxRow]
"""A claimed row and the claim that holds it."""


@dataclass(eq=False, slots=True)
class Post:
    """One post in flight: a row of one recipient, or a batch of its rows (hashed by identity).

    Attributes:
        items: the rows it carries, with their claims.
        at: when it started (the attempt's time).
        started: the engine's monotonic seconds when it started (its duration, its age).
    """

    items: list[Held]
    at: datetime
    started: float

    @property
    def agent(self) -> str:
        """The recipient."""
        return self.items[0][1].agent_id


@dataclass(eq=False, slots=True)
class Decided:
    """A claimed row whose fate is known and not yet stored.

    Attributes:
        claim: the claim that holds it (only that claim may store it).
        row: the row, or the undecodable row to bury.
        result: what its post (or its admission) answered; None buries ``row`` as it is.
        attempt: the attempt to log with it; None logs nothing.
        mailbox: delivered into the mailbox table, not posted.
    """

    claim: Claim
    row: OutboxRow | UndecodableRow
    result: DeliveryResult | None
    attempt: Attempt | None
    mailbox: bool = False


def earliest(*times: datetime | None) -> datetime | None:
    """The earliest of the times given, None when none is."""
    present = [when for when in times if when is not None]
    return min(present, default=None)


__all__ = ["Claim", "Decided", "Held", "Post", "earliest"]
