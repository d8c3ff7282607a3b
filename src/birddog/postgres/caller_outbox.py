"""Outbox rows written inside a transaction of the caller's own (an ``OutboxRows`` port).

:class:`CallerOutbox` is what code that holds its own asyncpg transaction gives to what
writes replies for it (:class:`birddog.a2a.OutboxPushSender`): each call writes through
:func:`birddog.postgres.outbox.insert_rows` on the connection the caller hands over at
that moment, so the rows commit with the caller's transaction or not at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from birddog.core.delivery import OutboxRow
from birddog.postgres.outbox import insert_rows
from birddog.postgres.pool import Connection

__all__ = ["CallerOutbox"]


class CallerOutbox:
    """The outbox on the caller's connection, in the caller's transaction.

    Args:
        connection: gives the caller's connection (in its transaction) at each write.
    """

    def __init__(self, connection: Callable[[], Connection]) -> None:
        self.connection = connection

    async def add_rows(
        self, rows: Sequence[OutboxRow], *, wake_at: datetime | None = None
    ) -> list[str]:
        """Store rows whose key has neither a row nor a receipt, in the caller's transaction.

        Args:
            rows: the rows.
            wake_at: arm the drain's wake for this time when rows were added.

        Returns:
            The keys added, in the order given.
        """
        return await insert_rows(self.connection(), rows, wake_at=wake_at)
