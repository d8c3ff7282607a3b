"""The outbox port in PostgreSQL: rows, receipts and dead letters, moved a page at a time.

Claiming a page is one statement (due rows after the cursor, in key order, under a
lease, ``FOR UPDATE SKIP LOCKED``); applying a page's outcomes is one transaction (the
receipt swap as one statement, every other row as one ``UPDATE ... FROM unnest``, one
``pg_notify`` per dead letter). Several drainers may share a database: a row is never
claimed twice while its lease holds, and a drainer whose lease was taken over stores
nothing.

Row <-> model mapping lives here, not on the models.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, LiteralString

import asyncpg

from birddog.core.delivery import DeadReason, OutboxRow, Receipt, RowState
from birddog.core.errors import InvalidInput
from birddog.core.mail import AgentAddress, Outcome, Reply
from birddog.ports import Page
from birddog.postgres.pool import Connection, Pool, store_errors
from birddog.postgres.sql import queries
from birddog.postgres.wake import schedule_wake_on

__all__ = ["PostgresOutbox", "insert_rows", "receipt_from_record", "row_from_record"]


async def insert_rows(conn: Connection, rows: Sequence[OutboxRow]) -> list[str]:
    """Insert rows whose key has neither a row nor a receipt, inside the caller's transaction.

    One ``INSERT ... SELECT FROM unnest ... ON CONFLICT DO NOTHING`` that also skips keys
    with a receipt. If a delivery of the same key committed its receipt while the insert
    waited on that key, a second statement (a fresh snapshot) removes the row again, so
    a replayed settlement never owes a delivered reply twice.

    Args:
        conn: an asyncpg connection, normally inside a transaction (fan-out commits with
            the settlement).
        rows: the rows to store.

    Returns:
        The keys inserted, in the order given.

    Raises:
        StoreUnavailable: the database is unreachable.
    """
    if not rows:
        return []
    columns: list[list[Any]] = [[] for _ in range(14)]
    for row in rows:
        values = (
            row.key,
            row.reply.to.agent_id,
            row.reply.to.session_id,
            row.reply.in_reply_to,
            row.reply.reply.command_id,
            row.reply.reply.outcome.value,
            row.reply.model_dump(mode="json"),
            row.state.value,
            row.attempts,
            row.deferrals,
            row.due_at,
            row.created_at,
            row.last_error,
            row.dead_reason.value if row.dead_reason is not None else None,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    with store_errors("outbox insert"):
        inserted = {
            record["key"] for record in await conn.fetch(queries["outbox_insert_rows"], *columns)
        }
        if inserted:
            dropped = await conn.fetch(queries["outbox_drop_received"], list(inserted))
            inserted.difference_update(record["key"] for record in dropped)
    seen: set[str] = set()
    keys = []
    for row in rows:
        if row.key in inserted and row.key not in seen:
            seen.add(row.key)
            keys.append(row.key)
    return keys


def row_from_record(record: asyncpg.Record | dict[str, Any]) -> OutboxRow:
    """The outbox row for a database record of ``birddog.outbox``.

    Args:
        record: a record with the columns ``key, reply, state, attempts, deferrals,
            due_at, created_at, last_error, dead_reason``.

    Returns:
        The row, with its reply validated.
    """
    dead_reason = record["dead_reason"]
    return OutboxRow(
        key=record["key"],
        reply=Reply.model_validate(record["reply"]),
        state=RowState(record["state"]),
        attempts=record["attempts"],
        deferrals=record["deferrals"],
        due_at=record["due_at"],
        created_at=record["created_at"],
        last_error=record["last_error"],
        dead_reason=DeadReason(dead_reason) if dead_reason is not None else None,
    )


def receipt_from_record(record: asyncpg.Record | dict[str, Any]) -> Receipt:
    """The receipt for a database record of ``birddog.receipts``.

    Args:
        record: a record with the columns of ``birddog.receipts``.

    Returns:
        The receipt.
    """
    return Receipt(
        key=record["key"],
        delivered_at=record["delivered_at"],
        attempts=record["attempts"],
        recipient=AgentAddress(
            agent_id=record["recipient_agent_id"], session_id=record["recipient_session_id"]
        ),
        command_id=record["command_id"],
        outcome=Outcome(record["outcome"]),
    )


@dataclass(frozen=True, slots=True)
class _Outcomes:
    """A page's outcomes split into receipt columns and row columns, for unnest."""

    receipt_columns: list[list[Any]]
    row_columns: list[list[Any]]

    @classmethod
    def of(cls, outcomes: Sequence[OutboxRow | Receipt]) -> _Outcomes:
        receipts: list[list[Any]] = [[] for _ in range(7)]
        rows: list[list[Any]] = [[] for _ in range(7)]
        for outcome in outcomes:
            if isinstance(outcome, Receipt):
                values: tuple[Any, ...] = (
                    outcome.key,
                    outcome.delivered_at,
                    outcome.attempts,
                    outcome.recipient.agent_id,
                    outcome.recipient.session_id,
                    outcome.command_id,
                    outcome.outcome.value,
                )
                target = receipts
            else:
                values = (
                    outcome.key,
                    outcome.state.value,
                    outcome.attempts,
                    outcome.deferrals,
                    outcome.due_at,
                    outcome.last_error,
                    outcome.dead_reason.value if outcome.dead_reason is not None else None,
                )
                target = rows
            for column, value in zip(target, values, strict=True):
                column.append(value)
        return cls(receipt_columns=receipts, row_columns=rows)


def _claim_uuid(claim: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(claim)
    except ValueError:
        return None


class PostgresOutbox:
    """The outbox port over an asyncpg pool, plus the operator's replay and listings.

    Held recipients are routes with ``enabled = false`` (see
    :class:`birddog.postgres.routes.PostgresRoutes`): their rows are not claimed and do
    not count for :meth:`next_due_at`, but do count for :meth:`has_pending`.

    Args:
        pool: the pool from :func:`birddog.postgres.pool.create_pool`.
    """

    def __init__(self, pool: Pool) -> None:
        self.pool = pool

    async def add(self, rows: Sequence[OutboxRow]) -> list[str]:
        """Store rows whose key has neither a row nor a receipt; return the keys added.

        Args:
            rows: the rows to store.

        Returns:
            The keys stored by this call, in the order given.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        if not rows:
            return []
        with store_errors("outbox add"):
            async with self.pool.acquire() as conn, conn.transaction():
                return await insert_rows(conn, rows)

    async def claim_page(
        self,
        *,
        after_key: str | None,
        limit: int,
        now: datetime,
        lease_s: float,
        skip_agents: Collection[str] = (),
    ) -> Page:
        """Claim up to ``limit`` due, unheld, unleased pending rows after ``after_key``.

        One statement: the rows are locked with ``SKIP LOCKED`` (a concurrent claimer
        takes other rows) and leased until ``now + lease_s``.

        Args:
            after_key: continue after this key (exclusive); None starts at the beginning.
            limit: the most rows to claim.
            now: the caller's clock; rows due by then are claimed, leases expired by
                then are free.
            lease_s: how long the claim holds the rows.
            skip_agents: recipients whose rows are left alone this time (busy ones).

        Returns:
            The rows in key order, the claim token, and whether the page was full.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        return await self._claim(
            queries["outbox_claim_page"],
            (after_key or "",),
            limit=limit,
            now=now,
            lease_s=lease_s,
            skip_agents=skip_agents,
        )

    async def claim_due(
        self, *, limit: int, now: datetime, lease_s: float, skip_agents: Collection[str] = ()
    ) -> Page:
        """Claim up to ``limit`` of the earliest-due, unheld, unleased pending rows.

        The daemon's claim: its cost is the page, not the backlog of future rows.

        Args:
            limit: the most rows to claim.
            now: the caller's clock.
            lease_s: how long the claim holds the rows.
            skip_agents: recipients whose rows are left alone this time.

        Returns:
            The rows in key order, the claim token, and whether the page was full.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        return await self._claim(
            queries["outbox_claim_due"],
            (),
            limit=limit,
            now=now,
            lease_s=lease_s,
            skip_agents=skip_agents,
        )

    async def _claim(
        self,
        query: LiteralString,
        leading: tuple[object, ...],
        *,
        limit: int,
        now: datetime,
        lease_s: float,
        skip_agents: Collection[str],
    ) -> Page:
        # Both claim statements end with: now, limit, claim, lease_until, skip_agents.
        if limit < 1:
            raise InvalidInput("limit must be at least 1", field="limit")
        claim = uuid.uuid4()
        with store_errors("outbox claim"):
            records = await self.pool.fetch(
                query,
                *leading,
                now,
                limit,
                claim,
                now + timedelta(seconds=lease_s),
                list(skip_agents),
            )
        rows = sorted((row_from_record(record) for record in records), key=lambda r: r.key)
        return Page(rows=rows, claim=str(claim), more=len(rows) == limit)

    async def apply(self, *, page: Page, outcomes: Sequence[OutboxRow | Receipt]) -> list[str]:
        """Store a page's outcomes in one transaction; rows the claim lost are skipped.

        Receipts replace their rows (one delete-returning plus insert statement), other
        outcomes update their rows and release the claim (one statement), and each new
        dead letter is announced with ``NOTIFY birddog_dead`` (delivered at commit).

        Args:
            page: the claimed page.
            outcomes: one outcome per row that was posted.

        Returns:
            The keys whose outcome was stored.

        Raises:
            StoreUnavailable: the database is unreachable (nothing was stored).
        """
        claim = _claim_uuid(page.claim)
        if claim is None or not outcomes:
            return []
        split = _Outcomes.of(outcomes)
        stored: set[str] = set()
        with store_errors("outbox apply"):
            async with self.pool.acquire() as conn, conn.transaction():
                if split.receipt_columns[0]:
                    swapped = await conn.fetch(
                        queries["outbox_swap_receipts"], claim, *split.receipt_columns
                    )
                    stored.update(record["key"] for record in swapped)
                if split.row_columns[0]:
                    updated = await conn.fetch(
                        queries["outbox_update_rows"], claim, *split.row_columns
                    )
                    stored.update(record["key"] for record in updated)
                    dead = [r["key"] for r in updated if r["state"] == RowState.DEAD.value]
                    if dead:
                        await conn.execute(queries["outbox_notify_dead"], dead)
        return [outcome.key for outcome in outcomes if outcome.key in stored]

    async def release_claim(self, *, page: Page) -> None:
        """Give a page's rows back untouched, so another drain may post them at once.

        Used when a drain is cancelled mid-page (shutdown): nothing is stored for the
        rows, and their lease ends now instead of at its expiry.

        Args:
            page: the claimed page.

        Raises:
            StoreUnavailable: the database is unreachable (the lease then simply expires).
        """
        claim = _claim_uuid(page.claim)
        if claim is None or not page.rows:
            return
        with store_errors("outbox release"):
            await self.pool.execute(
                queries["outbox_release_claim"], claim, [row.key for row in page.rows]
            )

    async def get(self, key: str) -> OutboxRow | Receipt | None:
        """The row or receipt under ``key``, if any.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("outbox get"):
            async with self.pool.acquire() as conn:
                record = await conn.fetchrow(queries["outbox_get_row"], key)
                if record is not None:
                    return row_from_record(record)
                record = await conn.fetchrow(queries["outbox_get_receipt"], key)
        return receipt_from_record(record) if record is not None else None

    async def has_pending(self) -> bool:
        """Whether any reply still awaits a delivery attempt (held ones included).

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("outbox has_pending"):
            return bool(await self.pool.fetchval(queries["outbox_has_pending"]))

    async def next_due_at(self) -> datetime | None:
        """The earliest time a pending, unheld reply is owed an attempt.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("outbox next_due_at"):
            due: datetime | None = await self.pool.fetchval(queries["outbox_next_due_at"])
        return due

    async def replay(self, *, key: str | None = None, agent_id: str | None = None) -> list[str]:
        """Put dead letters back to pending under the same key, due now, and wake a drain.

        Attempts and deferrals restart at 0 and the row's age restarts now, so a replayed
        row gets the whole retry schedule again; its last error stays for reference.

        Args:
            key: replay this dead letter.
            agent_id: replay every dead letter to this recipient.

        Returns:
            The keys put back to pending (empty when nothing matched).

        Raises:
            InvalidInput: neither ``key`` nor ``agent_id`` was given.
            StoreUnavailable: the database is unreachable.
        """
        if key is None and agent_id is None:
            raise InvalidInput("name a dead letter key or a recipient agent id", field="key")
        with store_errors("outbox replay"):
            async with self.pool.acquire() as conn, conn.transaction():
                records = await conn.fetch(queries["outbox_replay"], key, agent_id)
                if records:
                    await schedule_wake_on(conn, min(record["due_at"] for record in records))
        return sorted(record["key"] for record in records)

    async def discard_probe_reply(self, key: str) -> None:
        """Delete a failed probe's own canary reply; a key not under ``outbox:probe:`` is kept.

        Args:
            key: the probe reply's key.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("outbox discard_probe_reply"):
            await self.pool.execute(queries["probe_discard"], key)

    async def counts(self) -> dict[str, Any]:
        """What the outbox holds, for ``birddog status`` and metrics.

        Returns:
            ``pending``, ``dead``, ``held`` (pending rows of held recipients),
            ``in_flight`` (pending rows under a live lease), ``oldest_pending_at`` and
            ``next_due_at`` (unheld rows; None when nothing is owed).

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("outbox counts"):
            record = await self.pool.fetchrow(queries["outbox_counts"])
        return dict(record) if record is not None else {}

    async def list_pending(self, limit: int = 50) -> list[dict[str, Any]]:
        """The oldest pending replies, as the ``birddog.pending`` view shows them.

        Args:
            limit: the most rows to return.

        Returns:
            One dict per row (the view's columns), oldest first.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("outbox list_pending"):
            records = await self.pool.fetch(queries["outbox_list_pending"], limit)
        return [dict(record) for record in records]

    async def list_dead(self, limit: int = 50) -> list[dict[str, Any]]:
        """The most recent dead letters, as the ``birddog.dead_letters`` view shows them.

        Args:
            limit: the most rows to return.

        Returns:
            One dict per dead letter (the view's columns), newest first.

        Raises:
            StoreUnavailable: the database is unreachable.
        """
        with store_errors("outbox list_dead"):
            records = await self.pool.fetch(queries["outbox_list_dead"], limit)
        return [dict(record) for record in records]
