"""The outbox port in PostgreSQL: rows, receipts and dead letters, moved a page at a time.

Claiming a page is one statement (due rows after the cursor, in key order, under a
lease, ``FOR UPDATE SKIP LOCKED``); applying a page's outcomes is one transaction (the
receipt swap as one statement, every other row as one ``UPDATE ... FROM unnest``, one
``pg_notify`` per dead letter; receipts alone are the swap alone, without a transaction
around it). Several drainers may share a database: a row is never
claimed twice while its lease holds, and a drainer whose lease was taken over stores
nothing.

Row <-> model mapping lives in :mod:`birddog.postgres.outbox_rows`, the row codec.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, LiteralString

import orjson

from birddog.core.delivery import (
    OutboxRow,
    Receipt,
    RowState,
    UndecodableRow,
)
from birddog.core.errors import InvalidInput
from birddog.core.policy import POLICY_FIELDS, RoutePolicy
from birddog.ports import Page, RouteHint, Settled
from birddog.postgres.outbox_rows import (
    OutcomeColumns,
    claim_uuid,
    decode_claimed,
    receipt_from_record,
    row_from_record,
)
from birddog.postgres.pool import Connection, Pool, store_errors
from birddog.postgres.sql import queries
from birddog.postgres.wake import schedule_wake_on

__all__ = ["PostgresOutbox", "insert_rows"]


async def insert_rows(
    conn: Connection, rows: Sequence[OutboxRow], *, wake_at: datetime | None = None
) -> list[str]:
    """Insert rows whose key has neither a row nor a receipt, inside the caller's transaction.

    One ``INSERT ... SELECT FROM unnest ... ON CONFLICT DO NOTHING`` that also skips keys
    with a receipt and takes the wake lock shared (the settlement side of the wake
    protocol, :mod:`birddog.postgres.wake`). If a delivery of the same key committed its
    receipt while the insert waited on that key, a second statement (a fresh snapshot)
    removes the row again, so a replayed settlement never owes a delivered reply twice;
    that statement also arms the wake for ``wake_at`` when rows were inserted, notifying
    only when the last drainer to sleep would look later. Call it last in the
    transaction: the lock is held until it ends.

    Args:
        conn: an asyncpg connection, normally inside a transaction (fan-out commits with
            the settlement).
        rows: the rows to store.
        wake_at: arm the drain's wake for this time when rows were inserted (None: do not).

    Returns:
        The keys inserted, in the order given.
    """
    if not rows:
        return []
    columns: list[list[Any]] = [[] for _ in range(15)]
    for row in rows:
        parcel = row.parcel
        values = (
            row.key,
            parcel.agent_id,
            parcel.session_id,
            row.reply.in_reply_to,
            parcel.command_id,
            parcel.outcome.value,
            parcel.body.decode(),
            row.state.value,
            row.attempts,
            row.deferrals,
            row.due_at,
            row.created_at,
            row.last_error,
            row.dead_reason.value if row.dead_reason is not None else None,
            row.traceparent,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    with store_errors("outbox insert"):
        inserted = {
            record["key"] for record in await conn.fetch(queries["outbox_insert_rows"], *columns)
        }
        if inserted:
            dropped = await conn.fetch(queries["wake_schedule"], wake_at, list(inserted))
            inserted.difference_update(record["key"] for record in dropped)
    seen: set[str] = set()
    keys = []
    for row in rows:
        if row.key in inserted and row.key not in seen:
            seen.add(row.key)
            keys.append(row.key)
    return keys


async def _swap_receipts(conn: Pool | Connection, split: OutcomeColumns) -> list[str]:
    """Swap the receipts of ``split`` for their rows (one statement); the keys swapped."""
    # The mailbox flags are the last column, after the attempt entries.
    *columns, flags = split.receipt_columns
    swapped = await conn.fetch(
        queries["outbox_swap_receipts"],
        *columns,
        orjson.dumps(split.receipt_attempts).decode(),
        flags,
    )
    return [record["key"] for record in swapped]


async def _claim(
    pool: Pool,
    query: LiteralString,
    leading: tuple[object, ...],
    *,
    limit: int,
    now: datetime,
    lease_s: float,
    skip_agents: Collection[str],
    split: int | None = None,
    trailing: tuple[object, ...] = (),
) -> Page:
    """Run one claim statement and read its rows, buried rows and route hints as a page."""
    # Both claim statements take: now, limit, claim, lease_until, skip_agents, in order.
    if limit < 1:
        raise InvalidInput("limit must be at least 1", field="limit")
    claim = uuid.uuid4()
    # claim_due takes ``split`` of its rows latest-due first: the earliest-due part
    # is the rest, and the split comes after the five, then ``trailing``.
    first = limit if split is None else limit - split
    last = (() if split is None else (split,)) + trailing
    with store_errors("outbox claim"):
        records = await pool.fetch(
            query,
            *leading,
            now,
            first,
            claim,
            now + timedelta(seconds=lease_s),
            list(skip_agents),
            *last,
        )
    rows: list[OutboxRow] = []
    undecodable: list[UndecodableRow] = []
    routes: dict[str, RouteHint] = {}
    for record in records:
        row = decode_claimed(record)
        if isinstance(row, OutboxRow):
            rows.append(row)
        else:
            undecodable.append(row)
        kind = record["route_kind"]
        if kind is not None:
            routes[record["recipient_agent_id"]] = RouteHint(
                kind=kind,
                batch_size=record["route_batch_size"],
                policy=RoutePolicy(**{name: record[f"route_{name}"] for name in POLICY_FIELDS}),
            )
    rows.sort(key=lambda r: r.key)
    return Page(
        rows=rows,
        claim=str(claim),
        more=len(records) == limit,
        undecodable=undecodable,
        routes=routes,
    )


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
        """
        return await _claim(
            self.pool,
            queries["outbox_claim_page"],
            (after_key or "",),
            limit=limit,
            now=now,
            lease_s=lease_s,
            skip_agents=skip_agents,
        )

    async def claim_due(
        self,
        *,
        limit: int,
        now: datetime,
        lease_s: float,
        skip_agents: Collection[str] = (),
        newest: int = 0,
    ) -> Page:
        """Claim up to ``limit`` of the earliest-due, unheld, unleased pending rows.

        The daemon's claim: its cost is the page, not the backlog of future rows. With
        ``skip_agents``, each other recipient's due head is read through the recipient
        index (``outbox_claim_heads``), so the left-out recipients' rows cost nothing but
        one index probe each.

        Args:
            limit: the most rows to claim.
            now: the caller's clock.
            lease_s: how long the claim holds the rows.
            skip_agents: recipients whose rows are left alone this time.
            newest: take up to this many of the latest-due rows first, so that a fresh
                reply does not wait behind a backlog.

        Returns:
            The rows in key order, the claim token, and whether the page was full.
        """
        # With recipients left out, read the others' due heads, never past the left-out
        # recipients' rows (each costs one index probe); at most a page of each.
        query, per_recipient = (
            (queries["outbox_claim_heads"], (limit,))
            if skip_agents
            else (queries["outbox_claim_due"], ())
        )
        return await _claim(
            self.pool,
            query,
            (),
            limit=limit,
            now=now,
            lease_s=lease_s,
            skip_agents=skip_agents,
            split=max(0, min(newest, limit)),
            trailing=per_recipient,
        )

    async def store(self, items: Sequence[Settled]) -> list[str]:
        """Store outcomes of rows from any number of claims atomically.

        Receipts alone (none for the mailbox) are one statement, atomic on its own;
        anything else is one transaction.

        Receipts replace their rows (one delete-returning plus insert statement, which
        also writes mailbox deliveries), other outcomes update their rows and release
        their claim (one statement); each attempt is appended to its row's attempt log
        in the same statements (the last 20 kept; a receipt takes the row's log). A row
        no longer held by its claim is skipped. Each new dead letter is announced with
        ``NOTIFY birddog_dead`` and each agent with new mailbox replies with
        ``NOTIFY birddog_mailbox`` (delivered at commit).

        Args:
            items: the outcomes, each with its claim, attempt and mailbox flag.

        Returns:
            The keys whose outcome was stored, in the order given.
        """
        split = OutcomeColumns.of(items)
        stored: set[str] = set()
        receipts, rows = bool(split.receipt_columns[0]), bool(split.row_columns[0])
        with store_errors("outbox store"):
            if receipts and not rows and not any(split.receipt_columns[-1]):
                # Receipts alone, none for the mailbox (a batch all of whose replies were
                # taken): the swap is one statement, atomic on its own, so it runs without
                # the BEGIN and COMMIT round trips of a transaction around it.
                stored.update(await _swap_receipts(self.pool, split))
                return [item.outcome.key for item in items if item.outcome.key in stored]
            async with self.pool.acquire() as conn, conn.transaction():
                if receipts:
                    stored.update(await _swap_receipts(conn, split))
                    agents = [
                        item.outcome.agent_id
                        for item in items
                        if isinstance(item.outcome, Receipt)
                        and item.mailbox
                        and item.outcome.key in stored
                    ]
                    if agents:
                        await conn.execute(queries["outbox_notify_mailbox"], agents)
                if rows:
                    updated = await conn.fetch(
                        queries["outbox_update_rows"],
                        *split.row_columns,
                        orjson.dumps(split.row_attempts).decode(),
                    )
                    stored.update(record["key"] for record in updated)
                    dead = [r["key"] for r in updated if r["state"] == RowState.DEAD.value]
                    if dead:
                        await conn.execute(queries["outbox_notify_dead"], dead)
        return [item.outcome.key for item in items if item.outcome.key in stored]

    async def release_rows(self, items: Sequence[tuple[str, str]]) -> None:
        """Give rows back untouched, so another drain may take them at once.

        Args:
            items: ``(claim, key)`` of each row; a row its claim no longer holds is left.
        """
        claims: list[uuid.UUID] = []
        keys: list[str] = []
        for claim, key in items:
            token = claim_uuid(claim)
            if token is not None:
                claims.append(token)
                keys.append(key)
        if not keys:
            return
        with store_errors("outbox release"):
            await self.pool.execute(queries["outbox_release_claim"], claims, keys)

    async def get(self, key: str) -> OutboxRow | Receipt | None:
        """The row or receipt under ``key``, if any."""
        with store_errors("outbox get"):
            async with self.pool.acquire() as conn:
                record = await conn.fetchrow(queries["outbox_get_row"], key)
                if record is not None:
                    return row_from_record(record)
                record = await conn.fetchrow(queries["outbox_get_receipt"], key)
        return receipt_from_record(record) if record is not None else None

    async def has_pending(self) -> bool:
        """Whether any reply still awaits a delivery attempt (held ones included)."""
        with store_errors("outbox has_pending"):
            return bool(await self.pool.fetchval(queries["outbox_has_pending"]))

    async def next_due_at(self) -> datetime | None:
        """The earliest time a pending, unheld reply is owed an attempt."""
        with store_errors("outbox next_due_at"):
            due: datetime | None = await self.pool.fetchval(queries["outbox_next_due_at"])
        return due

    async def next_claimable_at(
        self, *, now: datetime, skip_agents: Collection[str] = ()
    ) -> datetime | None:
        """The earliest due time of a row a claim at ``now`` could take.

        Args:
            now: the caller's clock (rows under a lease that ends later do not count).
            skip_agents: recipients whose rows do not count (held ones never do).

        Returns:
            The time, or None when no row is pending for a released recipient.
        """
        with store_errors("outbox next_claimable_at"):
            due: datetime | None = await self.pool.fetchval(
                queries["outbox_next_claimable_at"], now, list(skip_agents)
            )
        return due

    async def dead_recipients(
        self, *, key: str | None = None, agent_id: str | None = None
    ) -> list[str]:
        """The recipients of the dead letters :meth:`replay` would put back, by agent id.

        Args:
            key: one dead letter.
            agent_id: every dead letter to this recipient.

        Returns:
            Their agent ids (empty when nothing matches).
        """
        with store_errors("outbox dead_recipients"):
            records = await self.pool.fetch(queries["outbox_dead_recipients"], key, agent_id)
        return [record["recipient_agent_id"] for record in records]

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
        """
        with store_errors("outbox discard_probe_reply"):
            await self.pool.execute(queries["probe_discard"], key)

    async def counts(self) -> dict[str, Any]:
        """What the outbox holds, for ``birddog status`` and metrics.

        Returns:
            ``pending``, ``dead``, ``held`` (pending rows of held recipients),
            ``in_flight`` (pending rows under a live lease), ``oldest_pending_at`` and
            ``next_due_at`` (unheld rows; None when nothing is owed).
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
        """
        with store_errors("outbox list_dead"):
            records = await self.pool.fetch(queries["outbox_list_dead"], limit)
        return [dict(record) for record in records]
