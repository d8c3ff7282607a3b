"""The outbox port in PostgreSQL: rows, receipts and dead letters, moved a page at a time.

Claiming a page is one statement (due rows after the cursor, in key order, under a
lease, ``FOR UPDATE SKIP LOCKED``); applying a page's outcomes is one transaction (the
receipt swap as one statement, every other row as one ``UPDATE ... FROM unnest``, one
``pg_notify`` per dead letter; receipts alone are the swap alone, without a transaction
around it). Several drainers may share a database: a row is never
claimed twice while its lease holds, and a drainer whose lease was taken over stores
nothing.

Row <-> model mapping lives here, not on the models.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import asyncpg
import orjson

from birddog.core.delivery import (
    Attempt,
    DeadReason,
    OutboxRow,
    Parcel,
    Receipt,
    RowState,
    UndecodableRow,
)
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import InvalidInput
from birddog.core.mail import Outcome, Reply
from birddog.core.model import ID_MAX_LENGTH, KEY_MAX_LENGTH
from birddog.core.policy import POLICY_FIELDS, RoutePolicy
from birddog.core.text import first_control
from birddog.ports import Page, RouteHint, Settled
from birddog.postgres.pool import Connection, Pool, store_errors
from birddog.postgres.sql import queries
from birddog.postgres.wake import schedule_wake_on

__all__ = [
    "PostgresOutbox",
    "attempt_entry",
    "decode_claimed",
    "insert_rows",
    "parcel_from_json",
    "receipt_from_record",
    "row_from_record",
]


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


def row_from_record(record: asyncpg.Record | dict[str, Any]) -> OutboxRow:
    """The outbox row for a database record of ``birddog.outbox``.

    Fields of the stored reply that this version does not know (written by another
    BirdDog version sharing the bus) are dropped, not refused.

    Args:
        record: a record with the columns ``key, reply, state, attempts, deferrals,
            due_at, created_at, last_error, dead_reason`` (and ``traceparent``, if read).

    Returns:
        The row, with its reply validated.

    Raises:
        InvalidInput: the stored reply is not a valid reply.
        ValueError: a column holds a value this version does not know.
    """
    return _row(record, Parcel.of(Reply.model_validate(record["reply"], extra="ignore")))


def _row(record: asyncpg.Record | dict[str, Any], parcel: Parcel) -> OutboxRow:
    """A record's row columns around its reply's parcel.

    Raises:
        ValueError: a column holds a value this version does not know.
    """
    dead_reason = record["dead_reason"]
    return OutboxRow(
        key=record["key"],
        parcel=parcel,
        state=RowState(record["state"]),
        attempts=record["attempts"],
        deferrals=record["deferrals"],
        due_at=record["due_at"],
        created_at=record["created_at"],
        last_error=record["last_error"],
        dead_reason=DeadReason(dead_reason) if dead_reason is not None else None,
        traceparent=record.get("traceparent"),
    )


def decode_claimed(record: asyncpg.Record) -> OutboxRow | UndecodableRow:
    """A claimed record as a row, or, when its reply cannot be read, as an undecodable row.

    The stored reply's JSON becomes the row's :class:`~birddog.core.delivery.Parcel` as is
    (it is the POST body): it is parsed once with orjson and its shape checked
    (:func:`parcel_from_json`), never built into a model on the drain's hot path.

    Args:
        record: a claimed record (the claim statements' columns, ``reply_json`` the
            stored reply as text).

    Returns:
        The row; an :class:`~birddog.core.delivery.UndecodableRow` naming the problem when
        the stored reply is not a valid reply, or does not carry the row's key or
        recipient.
    """
    key: str = record["key"]
    agent_id: str | None = record["recipient_agent_id"]
    parcel = parcel_from_json(record["reply_json"].encode(), key=key, agent_id=agent_id)
    if isinstance(parcel, Parcel):
        try:
            return _row(record, parcel)
        except ValueError as exc:
            error = f"stored row cannot be read: {exc}"
    else:
        error = parcel
    return UndecodableRow(
        key=key,
        agent_id=agent_id,
        attempts=record["attempts"],
        deferrals=record["deferrals"],
        due_at=record["due_at"],
        error=bounded_diagnostic(error),
    )


def parcel_from_json(body: bytes, *, key: str, agent_id: str | None) -> Parcel | str:
    """A stored reply's JSON as a parcel, or why it is not a reply this row can post.

    The shape of :class:`~birddog.core.mail.Reply` is checked field by field (types,
    lengths, no control character in a key or id, a known outcome), without building the
    model; fields this version does not know are left in the body, as a newer version
    wrote them. The database already refuses NUL characters and lone surrogates in JSON.

    Args:
        body: the stored reply, JSON text in UTF-8.
        key: the row's key; the reply must carry it.
        agent_id: the row's recipient; the reply must be addressed to it.

    Returns:
        The parcel, or a one-line reason.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return f"stored reply cannot be read: not JSON ({exc})"
    problem = _reply_shape(data)
    if problem is not None:
        return f"stored reply cannot be read: {problem}"
    if data["key"] != key:
        return "stored reply carries another key than its row"
    to, facts = data["to"], data["reply"]
    if to["agentId"] != agent_id:
        return "stored reply is addressed to another agent than its row"
    return Parcel(
        key=key,
        agent_id=to["agentId"],
        session_id=to["sessionId"],
        command_id=facts["commandId"],
        outcome=Outcome(facts["outcome"]),
        body=body,
    )


_OUTCOMES = frozenset(outcome.value for outcome in Outcome)


def _reply_shape(data: object) -> str | None:
    """What makes decoded JSON not a reply (the model's rules, checked by hand), or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    for name, limit in (("key", None), ("inReplyTo", KEY_MAX_LENGTH)):
        if (why := _name_problem(data.get(name), limit)) is not None:
            return f"{name} {why}"
    for side in ("to", "from"):
        if (why := _address_problem(data.get(side))) is not None:
            return f"{side}{why}"
    if data.get("replyTo", []) != []:
        return "replyTo must be an empty list"
    if not isinstance(data.get("content"), str):
        return "content must be a string"
    created = data.get("createdAt")
    if type(created) is not int or created < 0:
        return "createdAt must be a whole number of milliseconds"
    facts = data.get("reply")
    if not isinstance(facts, dict):
        return "reply must be an object"
    if (why := _name_problem(facts.get("commandId"), ID_MAX_LENGTH)) is not None:
        return f"reply.commandId {why}"
    if facts.get("outcome") not in _OUTCOMES:
        return "reply.outcome is not a known outcome"
    if not isinstance(facts.get("diagnostic", ""), str | None):
        return "reply.diagnostic must be a string"
    return None


def _address_problem(address: object) -> str | None:
    if not isinstance(address, dict) or address.get("kind", "agent") != "agent":
        return " must be an agent address"
    for name in ("agentId", "sessionId"):
        if (why := _name_problem(address.get(name), ID_MAX_LENGTH)) is not None:
            return f".{name} {why}"
    return None


def _name_problem(value: object, limit: int | None) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if limit is not None and not 1 <= len(value) <= limit:
        return f"must be 1 to {limit} characters"
    if first_control(value) is not None:
        return "holds a control character"
    return None


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
        agent_id=record["recipient_agent_id"],
        session_id=record["recipient_session_id"],
        command_id=record["command_id"],
        outcome=Outcome(record["outcome"]),
    )


@dataclass(frozen=True, slots=True)
class _Outcomes:
    """Outcomes split into receipt columns and row columns, for unnest.

    Each side also carries its attempt log entries as one JSON array (one entry, or null,
    per key), appended to the rows' logs in SQL.
    """

    receipt_columns: list[list[Any]]
    receipt_attempts: list[dict[str, Any] | None]
    row_columns: list[list[Any]]
    row_attempts: list[dict[str, Any] | None]

    @classmethod
    def of(cls, items: Sequence[Settled]) -> _Outcomes:
        receipts: list[list[Any]] = [[] for _ in range(9)]
        rows: list[list[Any]] = [[] for _ in range(8)]
        receipt_attempts: list[dict[str, Any] | None] = []
        row_attempts: list[dict[str, Any] | None] = []
        # The rows of one claim share its token, and the rows of one batch their attempt
        # (equal attempts): each is parsed or written out once, not once per row.
        claims: dict[str, uuid.UUID | None] = {}
        entries: dict[Attempt, dict[str, Any]] = {}
        for item in items:
            if (claim := claims.get(item.claim, _UNSEEN)) is _UNSEEN:
                claim = claims[item.claim] = _claim_uuid(item.claim)
            if claim is None:
                continue
            outcome = item.outcome
            attempt = item.attempt
            entry = None if attempt is None else entries.get(attempt)
            if attempt is not None and entry is None:
                entry = entries[attempt] = attempt_entry(attempt)
            if isinstance(outcome, Receipt):
                values: tuple[Any, ...] = (
                    claim,
                    outcome.key,
                    outcome.delivered_at,
                    outcome.attempts,
                    outcome.agent_id,
                    outcome.session_id,
                    outcome.command_id,
                    outcome.outcome.value,
                    item.mailbox,
                )
                target = receipts
                receipt_attempts.append(entry)
            else:
                values = (
                    claim,
                    outcome.key,
                    outcome.state.value,
                    outcome.attempts,
                    outcome.deferrals,
                    outcome.due_at,
                    outcome.last_error,
                    outcome.dead_reason.value if outcome.dead_reason is not None else None,
                )
                target = rows
                row_attempts.append(entry)
            for column, value in zip(target, values, strict=True):
                column.append(value)
        return cls(
            receipt_columns=receipts,
            receipt_attempts=receipt_attempts,
            row_columns=rows,
            row_attempts=row_attempts,
        )


def attempt_entry(attempt: Attempt) -> dict[str, Any]:
    """An attempt as the ``attempt_log`` JSON stores it.

    Args:
        attempt: the attempt.

    Returns:
        ``{"at": ISO-8601 UTC, "result", "status", "ms", "error"}``.
    """
    at = attempt.at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {
        "at": at,
        "result": attempt.result,
        "status": attempt.status,
        "ms": attempt.ms,
        "error": attempt.error,
    }


async def _swap_receipts(conn: Pool | Connection, split: _Outcomes) -> list[str]:
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


_UNSEEN = uuid.UUID(int=0)
"""A claim token not parsed yet (no claim is the nil UUID: tokens are random)."""


def _claim_uuid(claim: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(claim)
    except ValueError:
        return None


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
        split = _Outcomes.of(items)
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
            token = _claim_uuid(claim)
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
