"""What the operator's console and the job commands read: pages of rows, and one mail's story.

Every read is one statement per page (``admin_*`` in ``queries.sql``) with keyset paging:
a page comes with an opaque cursor naming its last row, and the next page starts after
it, so paging costs the same on page one and page one thousand. No statement here reads
a route's secret, and route URLs leave this module with their credentials and query
masked (:func:`birddog.core.egress.shown_url`).

The story of one mail is read in one read-only snapshot, so a reply moving from the
outbox to its receipt between two statements is never lost from view.

Every call that reaches the database raises :class:`~birddog.StoreUnavailable` when
it is away, or its subclass :class:`~birddog.StoreRefused` when it refuses the
statement, and nothing of that call is committed; the ``Raises:`` below list only
what is theirs.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from birddog.core.egress import shown_url
from birddog.core.errors import InvalidInput, JobNotFound
from birddog.core.mail import mail_key_of
from birddog.core.text import shown_key
from birddog.ports import JOB_STATES, PENDING_STATUSES, PREVIEW_CHARS, Listing, Overview, Story
from birddog.postgres.pool import Pool, store_errors
from birddog.postgres.sql import queries

_JOB_RANK: Final = {"running": 0, "queued": 1, "settled": 2}
"""The order of the states on a page of jobs of every state."""

MAX_PAGE: Final = 500
"""The most rows one page may ask for."""

ACTIVITY_MINUTES: Final = 60
"""How many minutes the overview's activity series covers."""

STORY_LIMIT: Final = 200
"""The most jobs, replies, receipts or mailbox rows one story shows of each."""


def encode_cursor(*values: object) -> str:
    """An opaque cursor for the values that sort a row (times as ISO 8601).

    Args:
        values: the sort key of the last row of a page.

    Returns:
        URL-safe text to hand back as ``after``.
    """
    plain = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    raw = json.dumps(plain, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, shape: Sequence[type]) -> list[Any]:
    """The values of a cursor made by :func:`encode_cursor`, checked against ``shape``.

    Args:
        cursor: the cursor as handed back.
        shape: the type of each value (``datetime`` values are parsed from ISO 8601).

    Returns:
        The values, in order.

    Raises:
        InvalidInput: the cursor is not one this module made for this kind of page.
    """
    bad = InvalidInput("not a cursor of this listing", field="after")
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise bad from None
    if not isinstance(values, list) or len(values) != len(shape):
        raise bad
    out: list[Any] = []
    for value, kind in zip(values, shape, strict=True):
        if kind is datetime and isinstance(value, str):
            try:
                out.append(datetime.fromisoformat(value))
            except ValueError:
                raise bad from None
        elif kind is not datetime and isinstance(value, kind) and not isinstance(value, bool):
            out.append(value)
        else:
            raise bad
    return out


def story_mail_keys(key: str) -> list[str]:
    """The mail keys a story lookup tries for ``key``: itself, and the mail of a reply key.

    Args:
        key: a job id, a mail key or a reply key.

    Returns:
        ``[key]``, plus the mail key when ``key`` is shaped like a reply key.
    """
    mail_key = mail_key_of(key)
    return [key] if mail_key is None else [key, mail_key]


def _check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"limit must be 1 to {MAX_PAGE}", field="limit")
    return limit


def _check_choice(value: str | None, choices: Sequence[str], name: str) -> str | None:
    if value is not None and value not in choices:
        raise InvalidInput(f"{name} must be one of {', '.join(choices)}", field=name)
    return value


def _page(records: Sequence[Any], limit: int, cursor_of: Any) -> Listing:
    rows = [dict(record) for record in records[:limit]]
    more = len(records) > limit
    return Listing(rows=rows, next_cursor=cursor_of(rows[-1]) if more and rows else None)


class PostgresAdmin:
    """The operator's reads over an asyncpg pool (the console, ``birddog jobs``, ``show``).

    Actions (replay, hold, release, cancel) stay with the adapters that own the rows:
    :class:`~birddog.postgres.outbox.PostgresOutbox`,
    :class:`~birddog.postgres.routes.PostgresRoutes` and
    :class:`~birddog.postgres.jobs.PostgresJobs`.

    Args:
        pool: the pool from :func:`birddog.postgres.pool.create_pool`.
        heartbeat_s: how often daemons and workers beat; one seen within three beats
            counts as live.
    """

    def __init__(self, pool: Pool, *, heartbeat_s: float = 10.0) -> None:
        self.pool = pool
        self.heartbeat_s = heartbeat_s

    async def overview(self, *, now: datetime) -> Overview:
        """Counts by state, activity per minute over the last hour, and live processes.

        Args:
            now: the current time (the activity series ends at its minute).

        Returns:
            The overview.
        """
        with store_errors("admin overview"):
            async with self.pool.acquire() as conn:
                counts = await conn.fetchrow(queries["outbox_counts"])
                job_rows = await conn.fetch(queries["jobs_counts"])
                activity = await conn.fetch(queries["admin_activity"], now, ACTIVITY_MINUTES)
                daemons = await conn.fetch(queries["daemons_seen"], 3 * self.heartbeat_s)
        jobs = dict.fromkeys(JOB_STATES, 0)
        jobs.update({row["state"]: row["jobs"] for row in job_rows})
        return Overview(
            outbox=dict(counts) if counts is not None else {},
            jobs=jobs,
            activity=[(row["minute"], row["delivered"], row["dead"]) for row in activity],
            daemons=[dict(row) for row in daemons],
        )

    async def pending(
        self,
        *,
        recipient: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Pending replies, the next due first (``birddog.pending``'s columns).

        Args:
            recipient: only this recipient agent's replies.
            status: only rows in this status (``held``, ``in_flight``, ``due``, ``waiting``).
            after: the cursor of the previous page.
            limit: rows per page (1 to :data:`MAX_PAGE`).

        Returns:
            One page, cursor by ``(next_try_at, key)``.

        Raises:
            InvalidInput: a bad status, limit or cursor.
        """
        _check_choice(status, PENDING_STATUSES, "status")
        _check_limit(limit)
        at, key = decode_cursor(after, (datetime, str)) if after else (None, None)
        with store_errors("admin pending"):
            records = await self.pool.fetch(
                queries["admin_pending_page"], recipient, status, at, key, limit + 1
            )
        return _page(records, limit, lambda row: encode_cursor(row["next_try_at"], row["key"]))

    async def dead(
        self, *, recipient: str | None = None, after: str | None = None, limit: int = 50
    ) -> Listing:
        """Dead letters, the newest death first, with reason, last error and attempt log.

        Args:
            recipient: only this recipient agent's dead letters.
            after: the cursor of the previous page.
            limit: rows per page (1 to :data:`MAX_PAGE`).

        Returns:
            One page, cursor by ``(dead_at, key)``.

        Raises:
            InvalidInput: a bad limit or cursor.
        """
        _check_limit(limit)
        at, key = decode_cursor(after, (datetime, str)) if after else (None, None)
        with store_errors("admin dead"):
            records = await self.pool.fetch(
                queries["admin_dead_page"], recipient, at, key, limit + 1
            )
        return _page(records, limit, lambda row: encode_cursor(row["dead_at"], row["key"]))

    async def routes(self, *, after: str | None = None, limit: int = 100) -> Listing:
        """Routes by agent id, with URL redacted, hold state and pending and dead counts.

        The secret is never read.

        Args:
            after: the cursor of the previous page.
            limit: rows per page (1 to :data:`MAX_PAGE`).

        Returns:
            One page: ``agent_id``, ``kind``, ``url`` (redacted; None for a mailbox),
            ``enabled``, ``held_at``, ``batch_size``, ``post_timeout_s``, ``max_age_s``,
            ``max_attempts`` (None: the daemon's default), ``created_at``,
            ``updated_at``, ``pending``, ``dead``.

        Raises:
            InvalidInput: a bad limit or cursor.
        """
        _check_limit(limit)
        (agent_id,) = decode_cursor(after, (str,)) if after else (None,)
        with store_errors("admin routes"):
            records = await self.pool.fetch(queries["admin_routes_page"], agent_id, limit + 1)
        listing = _page(records, limit, lambda row: encode_cursor(row["agent_id"]))
        for row in listing.rows:
            row["url"] = shown_url(row["url"])
        return listing

    async def jobs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> Listing:
        """Jobs: running (longest first), then queued (oldest first), then settled (newest).

        Args:
            state: only jobs in this state (``queued``, ``running``, ``settled``).
            queue: only jobs of this queue (a session id).
            after: the cursor of the previous page.
            limit: rows per page (1 to :data:`MAX_PAGE`).

        Returns:
            One page: ``job_id``, ``queue``, ``lane``, ``priority``, ``state``, ``kind``,
            ``outcome``, ``created_at``, ``started_at``, ``settled_at``,
            ``lease_expires_at``, ``recovery_count``, ``cancel_requested_at``,
            ``worker_id``, ``diagnostic``, ``mail_key``, ``sender_agent_id``, ``not_before``,
            ``expires_at``, ``digest_at`` (an informational job's digest time).

        Raises:
            InvalidInput: a bad state, limit or cursor.
        """
        _check_choice(state, JOB_STATES, "state")
        _check_limit(limit)
        rank, at, job_id = (
            decode_cursor(after, (int, datetime, str)) if after else (None, None, None)
        )
        with store_errors("admin jobs"):
            records = await self.pool.fetch(
                queries["admin_jobs_page"], state, queue, rank, at, job_id, limit + 1
            )
        listing = _page(
            records, limit, lambda row: encode_cursor(row["rank"], row["at"], row["job_id"])
        )
        for row in listing.rows:
            del row["rank"], row["at"]
        return listing

    async def job(self, job_id: str) -> dict[str, Any]:
        """One job in full, as the story shows it (the mail's content as a preview).

        Args:
            job_id: the job.

        Returns:
            The job's columns, its mail without content, ``content_preview``,
            ``content_chars``, ``result_preview`` and ``result_chars``.

        Raises:
            JobNotFound: no job has this id.
        """
        with store_errors("admin job"):
            records = await self.pool.fetch(
                queries["admin_story_jobs"], job_id, [], PREVIEW_CHARS, 1
            )
        if not records:
            raise JobNotFound(f"no job has id {shown_key(job_id)}")
        return dict(records[0])

    async def story(self, key: str) -> Story:
        """One mail's story by mail key, reply key or job id.

        Args:
            key: a job id, a mail key or a reply key (``outbox:<mail key>:reply:<n>``).

        Returns:
            The jobs that carry the mail, its replies still pending or dead, their
            receipts and mailbox rows, each with its attempt log; :attr:`Story.found` is
            False when nothing matched.
        """
        candidates = story_mail_keys(key)
        with store_errors("admin story"):
            async with (
                self.pool.acquire() as conn,
                conn.transaction(isolation="repeatable_read", readonly=True),
            ):
                jobs = await conn.fetch(
                    queries["admin_story_jobs"], key, candidates, PREVIEW_CHARS, STORY_LIMIT
                )
                mail_keys = list(
                    dict.fromkeys(
                        [job["mail_key"] for job in jobs if job["mail_key"] is not None]
                        + candidates
                    )
                )
                replies = await conn.fetch(queries["admin_story_replies"], mail_keys, STORY_LIMIT)
                receipts = await conn.fetch(queries["admin_story_receipts"], mail_keys, STORY_LIMIT)
                mailbox = await conn.fetch(queries["admin_story_mailbox"], mail_keys, STORY_LIMIT)
        found_keys = {job["mail_key"] for job in jobs} | {
            row["in_reply_to"] for row in [*replies, *receipts, *mailbox]
        }
        return Story(
            key=key,
            mail_keys=[k for k in mail_keys if k in found_keys],
            jobs=[dict(row) for row in jobs],
            replies=sorted((dict(row) for row in replies), key=_reply_order),
            receipts=sorted((dict(row) for row in receipts), key=_reply_order),
            mailbox=sorted((dict(row) for row in mailbox), key=_reply_order),
        )


def _reply_order(row: dict[str, Any]) -> tuple[str, int, str]:
    key: str = row["key"]
    mail_key = mail_key_of(key)
    if mail_key is None:
        return (key, -1, key)
    return (mail_key, int(key.rpartition(":reply:")[2]), "")
