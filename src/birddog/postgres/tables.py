"""The ``birddog`` schema as SQLAlchemy Core metadata.

This is the one description of the tables: the Alembic revisions under ``migrations/``
create exactly these (a test runs ``alembic check`` against them), and autogenerate diffs
against them. Runtime SQL does not use these objects; it lives in ``queries.sql``.

Keys sort with ``COLLATE "C"`` so that paging order in SQL is the byte order of the
UTF-8 key, which is also Python's ``str`` order.

The operator views ``birddog.pending`` and ``birddog.dead_letters`` are created by the
migrations (latest definition in ``migrations/versions/0003_mailbox_turns_attempts.py``);
SQLAlchemy metadata does not describe views.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB, UUID

SCHEMA: Final = "birddog"
"""The schema every BirdDog table lives in."""

metadata = sa.MetaData(schema=SCHEMA)
"""All BirdDog tables."""

_KEY = sa.Text(collation="C")
_NOW = sa.text("now()")
_EMPTY_LOG = sa.text("'[]'::jsonb")


def _ts(name: str, *, nullable: bool = False, now: bool = False) -> sa.Column[object]:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=_NOW if now else None,
    )


outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("key", _KEY, primary_key=True),
    sa.Column("recipient_agent_id", sa.Text, nullable=False),
    sa.Column("recipient_session_id", sa.Text, nullable=False),
    sa.Column("in_reply_to", _KEY, nullable=False),
    sa.Column("command_id", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("reply", JSONB, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Column("deferrals", sa.Integer, nullable=False, server_default=sa.text("0")),
    _ts("due_at"),
    _ts("created_at"),
    _ts("updated_at", now=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("dead_reason", sa.Text, nullable=True),
    _ts("dead_at", nullable=True),
    sa.Column("claim_token", UUID(as_uuid=True), nullable=True),
    _ts("lease_expires_at", nullable=True),
    # The last attempts (at most 20): {"at", "result", "status", "ms", "error"} each.
    sa.Column("attempt_log", JSONB, nullable=False, server_default=_EMPTY_LOG),
    # The W3C trace context of the job that owed this reply, for the reply POST.
    sa.Column("traceparent", sa.Text, nullable=True),
    sa.CheckConstraint("state IN ('pending', 'dead')", name="outbox_state_check"),
    sa.CheckConstraint("attempts >= 0 AND deferrals >= 0", name="outbox_counts_check"),
    # The claim path reads due rows through this index, so a large future backlog
    # (retries scheduled hours ahead) is never scanned.
    sa.Index(
        "outbox_pending_due_at_idx",
        "due_at",
        postgresql_where=sa.text("state = 'pending'"),
    ),
    sa.Index("outbox_recipient_agent_id_idx", "recipient_agent_id"),
    # The daemon's claim reads each recipient's due head through this index while some
    # recipients are left out, never past their rows (migration 0010).
    sa.Index(
        "outbox_pending_recipient_due_at_idx",
        "recipient_agent_id",
        "due_at",
        postgresql_where=sa.text("state <> 'dead'"),
    ),
    sa.Index(
        "outbox_dead_at_idx",
        "dead_at",
        postgresql_where=sa.text("state = 'dead'"),
    ),
    # Room on each page for the claim and outcome updates: half, so every row of a page
    # can take its lease in place (migrations 0002 and 0021).
    postgresql_with={"fillfactor": 50},
)
"""Owed replies (``pending``) and dead letters (``dead``); delivered ones become receipts."""

receipts = sa.Table(
    "receipts",
    metadata,
    sa.Column("key", _KEY, primary_key=True),
    _ts("delivered_at"),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("recipient_agent_id", sa.Text, nullable=False),
    sa.Column("recipient_session_id", sa.Text, nullable=False),
    sa.Column("command_id", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("attempt_log", JSONB, nullable=False, server_default=_EMPTY_LOG),
    sa.Index("receipts_delivered_at_idx", "delivered_at"),
)
"""Compact proofs of delivery under the reply key, with their attempt log; kept until pruned."""

wake = sa.Table(
    "wake",
    metadata,
    sa.Column("id", sa.Boolean, primary_key=True, server_default=sa.text("true")),
    _ts("wake_at"),
    sa.CheckConstraint("id", name="wake_singleton_check"),
)
"""A singleton row: the earliest time a drain is owed."""

routes = sa.Table(
    "routes",
    metadata,
    sa.Column("agent_id", sa.Text, primary_key=True),
    sa.Column("url", sa.Text, nullable=True),
    sa.Column("secret", sa.Text, nullable=True),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.text("true")),
    _ts("created_at", now=True),
    _ts("updated_at", now=True),
    sa.Column("kind", sa.Text, nullable=False, server_default=sa.text("'http'")),
    sa.Column("batch_size", sa.Integer, nullable=False, server_default=sa.text("1")),
    _ts("held_at", nullable=True),
    sa.Column("previous_secret", sa.Text, nullable=True),
    _ts("previous_secret_until", nullable=True),
    sa.Column("post_timeout_s", sa.Float, nullable=True),
    sa.Column("max_age_s", sa.Float, nullable=True),
    sa.Column("max_attempts", sa.Integer, nullable=True),
    # How long an interactive job waits for its session's live session before a worker may
    # take it (NULL: 30 s; birddog._live_hold).
    sa.Column("live_grace_s", sa.Float, nullable=True),
    # When the agent's informational mail goes as one turn (birddog.core.digests): daily at
    # digest_daily (UTC), or every digest_every_s seconds; neither: daily at 08:00 UTC.
    sa.Column("digest_daily", sa.Time, nullable=True),
    sa.Column("digest_every_s", sa.Float, nullable=True),
    sa.CheckConstraint("kind IN ('http', 'mailbox', 'a2a')", name="routes_kind_check"),
    sa.CheckConstraint(
        "kind = 'mailbox' OR (url IS NOT NULL AND secret IS NOT NULL)", name="routes_http_check"
    ),
    sa.CheckConstraint("batch_size BETWEEN 1 AND 1000", name="routes_batch_size_check"),
    sa.CheckConstraint(
        "post_timeout_s > 0 AND post_timeout_s < 'infinity'", name="routes_post_timeout_check"
    ),
    sa.CheckConstraint("max_age_s > 0 AND max_age_s < 'infinity'", name="routes_max_age_check"),
    sa.CheckConstraint("max_attempts BETWEEN 1 AND 100000", name="routes_max_attempts_check"),
    sa.CheckConstraint(
        "live_grace_s >= 0 AND live_grace_s <= 86400", name="routes_live_grace_check"
    ),
    sa.CheckConstraint(
        "digest_daily IS NULL OR digest_every_s IS NULL", name="routes_digest_one_check"
    ),
    sa.CheckConstraint(
        "digest_daily = date_trunc('minute', digest_daily::interval)::time",
        name="routes_digest_daily_check",
    ),
    sa.CheckConstraint(
        "digest_every_s >= 60 AND digest_every_s <= 604800", name="routes_digest_every_check"
    ),
)
"""Where each agent's replies go: an inbox URL (``http``), the ``mailbox`` table, or an A2A
push config's URL (``a2a``: its secret is the sealed ``Authorization`` and token).

A disabled route holds the agent's rows; ``held_at`` says since when (their age is frozen
meanwhile). ``batch_size`` above 1 lets the daemon put several replies in one signed POST.
``previous_secret`` still signs posts, beside ``secret``, until ``previous_secret_until``.
``post_timeout_s``, ``max_age_s`` and ``max_attempts`` override the daemon's defaults for
this recipient (NULL: the default; :class:`birddog.core.policy.RoutePolicy`).
"""

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("job_id", _KEY, primary_key=True),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("lane", sa.Text, nullable=False),
    sa.Column("priority", sa.SmallInteger, nullable=False, server_default=sa.text("0")),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("payload", JSONB, nullable=False),
    sa.Column("recovery", JSONB, nullable=True),
    sa.Column("outcome", sa.Text, nullable=True),
    sa.Column("claim_token", UUID(as_uuid=True), nullable=True),
    _ts("lease_expires_at", nullable=True),
    sa.Column("recovery_count", sa.Integer, nullable=False, server_default=sa.text("0")),
    _ts("cancel_requested_at", nullable=True),
    sa.Column("cancel_content", sa.Text, nullable=True),
    sa.Column("result_content", sa.Text, nullable=True),
    sa.Column("diagnostic", sa.Text, nullable=True),
    sa.Column("worker_id", sa.Text, nullable=True),
    _ts("created_at", now=True),
    _ts("updated_at", now=True),
    _ts("settled_at", nullable=True),
    # A running job holds one of its queue's slots: (queue_key, slot) is unique among running
    # jobs, so the database itself refuses a second turn of a session beyond its slots.
    sa.Column("slot", sa.SmallInteger, nullable=True),
    _ts("started_at", nullable=True),
    sa.Column("traceparent", sa.Text, nullable=True),
    # Where the current (or last) turn runs: its supervisor on which host and boot, with
    # the pid's start time so that a reused pid is not taken for it (migration 0009).
    sa.Column("turn_host", sa.Text, nullable=True),
    sa.Column("turn_boot_id", sa.Text, nullable=True),
    sa.Column("turn_pid", sa.Integer, nullable=True),
    sa.Column("turn_start_ticks", sa.BigInteger, nullable=True),
    # The login that enqueued the job (migration 0007): a sender reads what it sent.
    sa.Column("sent_by", sa.Text, nullable=True),
    # The agent its mail is addressed to, and when it may be claimed or expires
    # (migration 0012); NULL: no mail, at once, never on its own.
    sa.Column("agent_id", sa.Text, nullable=True),
    _ts("not_before", nullable=True),
    _ts("expires_at", nullable=True),
    # What "one queue" means (migration 0023): the agent, a unit separator, the queue (the
    # target session). Session ids are the sender's to choose, so a queue of the session
    # alone let a send to carol:s-bob sit at the head of bob's s-bob.
    sa.Column(
        "queue_key",
        sa.Text,
        sa.Computed("coalesce(agent_id, '') || E'\\x1f' || queue", persisted=True),
        nullable=False,
    ),
    # What the mail is for (migration 0025, birddog.core.kinds): the payload's kind, or a
    # task when the payload has none (every mail of the TypeScript BirdDog).
    sa.Column("kind", sa.Text, nullable=False, server_default=sa.text("'task'")),
    # When an informational job's digest is (birddog.core.digests): no worker claims it
    # before, its live session may; NULL for interactive jobs.
    _ts("digest_at", nullable=True),
    sa.CheckConstraint("state IN ('queued', 'running', 'settled')", name="jobs_state_check"),
    sa.CheckConstraint(
        "kind IN ('task', 'escalation', 'report', 'receipt')", name="jobs_kind_check"
    ),
    sa.CheckConstraint(
        "digest_at IS NULL OR kind IN ('report', 'receipt')",
        name="jobs_digest_at_check",
    ),
    sa.CheckConstraint(
        "outcome IS NULL OR outcome IN "
        "('completed', 'failed', 'interrupted', 'cancelled', 'outcome_unknown')",
        name="jobs_outcome_check",
    ),
    sa.Index(
        "jobs_queued_claim_idx",
        "queue_key",
        sa.text("priority DESC"),
        "created_at",
        "job_id",
        postgresql_where=sa.text("state = 'queued'"),
    ),
    sa.Index(
        "jobs_running_slot_idx",
        "queue_key",
        "slot",
        unique=True,
        postgresql_where=sa.text("state = 'running'"),
    ),
    sa.Index(
        "jobs_queued_created_at_idx",
        "created_at",
        postgresql_where=sa.text("state = 'queued'"),
    ),
    sa.Index(
        "jobs_settled_at_idx",
        "settled_at",
        postgresql_where=sa.text("state = 'settled'"),
    ),
    # The story of one mail finds its job by the mail key (migration 0004); a mail key is
    # one job's (migration 0031): its replies are seen and acknowledged by that job's
    # sender only, so no other job may carry the key.
    sa.Index(
        "jobs_mail_key_idx",
        sa.text("(payload #>> '{mail,key}')"),
        unique=True,
        postgresql_where=sa.text("(payload #>> '{mail,key}') IS NOT NULL"),
    ),
    sa.Index(
        "jobs_running_lease_idx",
        "lease_expires_at",
        postgresql_where=sa.text("state = 'running'"),
    ),
    sa.Index("jobs_queued_agent_idx", "agent_id", postgresql_where=sa.text("state = 'queued'")),
    # A queue's earliest not-before in one probe (its head row's due_at).
    sa.Index(
        "jobs_queued_not_before_idx",
        "queue_key",
        sa.text("not_before NULLS FIRST"),
        postgresql_where=sa.text("state = 'queued'"),
    ),
    sa.Index(
        "jobs_queued_expires_at_idx",
        "expires_at",
        postgresql_where=sa.text("state = 'queued' AND expires_at IS NOT NULL"),
    ),
)
"""Watchdog-shaped jobs: queued, running (claimed with a lease), settled."""

queue_heads = sa.Table(
    "queue_heads",
    metadata,
    sa.Column("queue_key", sa.Text, primary_key=True),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("agent_id", sa.Text, nullable=True),
    sa.Column("priority", sa.SmallInteger, nullable=True),
    _ts("created_at", nullable=True),
    sa.Column("job_id", _KEY, nullable=True),
    # The earliest a queued job of the queue may be claimed (NULL: one may now).
    _ts("due_at", nullable=True),
    sa.Column("running", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Index("queue_heads_claim_idx", sa.text("priority DESC"), "created_at", "job_id"),
    sa.Index("queue_heads_agent_idx", "agent_id", sa.text("priority DESC"), "created_at", "job_id"),
)
"""One row per queue (``jobs.queue_key``, migration 0023) with queued or running jobs: its
head, when it is due, its turns (migration 0012); kept by the job functions, read by the
claim."""

live_sessions = sa.Table(
    "live_sessions",
    metadata,
    sa.Column(
        "queue_key",
        sa.Text,
        sa.Computed("agent_id || E'\\x1f' || session", persisted=True),
        nullable=False,
    ),
    # Who announces it: the claimer id its own claims carry (an MCP server, a worker --live).
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("agent_id", sa.Text, nullable=False),
    sa.Column("session", sa.Text, nullable=False),
    _ts("started_at", now=True),
    _ts("seen_at", now=True),
    _ts("expires_at"),
    # The login that announced it: only that login renews or ends it.
    sa.Column("login", sa.Text, nullable=False, server_default=sa.text("session_user")),
    sa.PrimaryKeyConstraint("queue_key", "holder", name="live_sessions_pkey"),
    sa.Index("live_sessions_expires_at_idx", "expires_at"),
)
"""Agent sessions a live process serves now (an MCP server ``--as`` it, a caller's HTTP
connection, ``worker --live``), one row per holder, renewed by ``birddog.live_heartbeat``
before ``expires_at`` (a few seconds) and removed by ``birddog.live_leave``; a row past
``expires_at`` no longer counts. Their queue's jobs are offered to them first
(``birddog._live_hold``)."""

mailbox = sa.Table(
    "mailbox",
    metadata,
    sa.Column("key", _KEY, primary_key=True),
    sa.Column("agent_id", sa.Text, nullable=False),
    sa.Column("session_id", sa.Text, nullable=False),
    sa.Column("in_reply_to", _KEY, nullable=False),
    sa.Column("command_id", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("reply", JSONB, nullable=False),
    _ts("delivered_at"),
    _ts("read_at", nullable=True),
    sa.Index(
        "mailbox_unread_idx",
        "agent_id",
        "session_id",
        "delivered_at",
        postgresql_where=sa.text("read_at IS NULL"),
    ),
    sa.Index("mailbox_in_reply_to_idx", "in_reply_to"),
    sa.Index("mailbox_read_at_idx", "read_at", postgresql_where=sa.text("read_at IS NOT NULL")),
)
"""Replies delivered to agents with a mailbox route, under the reply key, until read."""

limits = sa.Table(
    "limits",
    metadata,
    sa.Column("id", sa.Boolean, primary_key=True, server_default=sa.text("true")),
    sa.Column("max_content_bytes", sa.Integer, nullable=False, server_default=sa.text("1048576")),
    sa.Column("max_lease_s", sa.Float, nullable=False, server_default=sa.text("3600")),
    sa.Column("max_priority", sa.SmallInteger, nullable=False, server_default=sa.text("100")),
    sa.Column("max_reply_to", sa.Integer, nullable=False, server_default=sa.text("100")),
    sa.Column("max_age_s", sa.Float, nullable=False, server_default=sa.text("300")),
    sa.Column("max_hold_s", sa.Float, nullable=False, server_default=sa.text("3600")),
    sa.Column("cancel_grace_s", sa.Float, nullable=False, server_default=sa.text("60")),
    sa.CheckConstraint("id", name="limits_singleton_check"),
    sa.CheckConstraint("cancel_grace_s > 0", name="limits_cancel_grace_check"),
    sa.CheckConstraint(
        "max_content_bytes > 0 AND max_lease_s > 0 AND max_priority >= 0 AND max_reply_to >= 0 "
        "AND max_age_s >= 0 AND max_hold_s > 0",
        name="limits_range_check",
    ),
)
"""A singleton row (migration 0031): the server's bounds on every login but the operators'
(``birddog._limits``), which only the owner changes. The write functions refuse mail content
above ``max_content_bytes`` and more than ``max_reply_to`` reply addresses, and clamp
priority to +/- ``max_priority``, a job's age to ``max_age_s`` and a lease to
``max_lease_s`` from now; ``birddog check`` flags a lease beyond ``max_lease_s`` and a
queue held by one job for more than ``max_hold_s`` while others wait. ``cancel_grace_s``
bounds every caller: a cancelled running job's lease ends within it (migration 0032)."""

daemons = sa.Table(
    "daemons",
    metadata,
    sa.Column("daemon_id", sa.Text, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    _ts("started_at", now=True),
    _ts("seen_at", now=True),
    _ts("stopped_at", nullable=True),
    sa.Column("login", sa.Text, nullable=False, server_default=sa.text("session_user")),
    sa.CheckConstraint("kind IN ('drain', 'worker')", name="daemons_kind_check"),
)
"""Drain daemons and workers that reported in, for ``birddog status``.

A process that stops cleanly keeps its row, marked ``stopped_at``; a stopped row never
counts as running, and ``birddog check`` tells such a stop from a process that vanished.
Each row belongs to the ``login`` that registered it: the non-operator roles write rows
only through ``birddog.daemons_beat`` and ``birddog.daemons_stop``, which touch no other
login's row.
"""

agents = sa.Table(
    "agents",
    metadata,
    sa.Column("agent_id", sa.Text, primary_key=True),
    _ts("created_at", now=True),
)
"""The agents ``birddog agent add`` made, each able to act as itself (migration 0006)."""

agent_tokens = sa.Table(
    "agent_tokens",
    metadata,
    sa.Column("token_id", sa.Text, primary_key=True),
    sa.Column(
        "agent_id",
        sa.Text,
        sa.ForeignKey("birddog.agents.agent_id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("session_id", sa.Text, nullable=False),
    # SHA-256 of the token: the token itself is shown once and never stored.
    sa.Column("token_digest", sa.LargeBinary, nullable=False),
    _ts("created_at", now=True),
    _ts("last_used_at", nullable=True),
    sa.CheckConstraint("octet_length(token_digest) = 32", name="agent_tokens_digest_check"),
    sa.Index("agent_tokens_digest_idx", "token_digest", unique=True),
    sa.Index("agent_tokens_agent_id_idx", "agent_id"),
)
"""Bearer tokens, each naming one agent session, looked up by their digest."""

agent_logins = sa.Table(
    "agent_logins",
    metadata,
    sa.Column("login", sa.Text, primary_key=True),
    sa.Column(
        "agent_id",
        sa.Text,
        sa.ForeignKey("birddog.agents.agent_id", ondelete="CASCADE"),
        nullable=False,
    ),
    _ts("created_at", now=True),
    sa.UniqueConstraint("agent_id", name="agent_logins_agent_id_key"),
)
"""Database logins made for agents (members of ``birddog_agent``), one per agent (0008)."""

for _table in metadata.tables.values():
    # Every time stored is finite (migration 0005): PostgreSQL takes 'infinity' for a
    # timestamptz, Python has no such datetime, so no such row may be written.
    _times = [column.name for column in _table.columns if isinstance(column.type, sa.DateTime)]
    if _times:
        _table.append_constraint(
            sa.CheckConstraint(
                " AND ".join(f"isfinite({name})" for name in _times),
                name=f"{_table.name}_times_finite_check",
            )
        )
