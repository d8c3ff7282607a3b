"""Mailboxes, one turn per session, attempt logs, batches, holds that pause age, rotation.

- routes: ``kind`` (``http`` or ``mailbox``; a mailbox route has no URL or secret),
  ``batch_size`` (replies per signed POST, 1 = one per post), ``held_at`` (when the hold
  began: a held recipient's rows neither age nor spend strikes), ``previous_secret`` and
  ``previous_secret_until`` (a rotated secret still signs until then).
- outbox and receipts: ``attempt_log``, the last attempts of each reply (time, result,
  status, duration, bounded error); outbox ``traceparent`` (W3C trace context of the job).
- jobs: ``slot`` with a unique index on ``(queue, slot)`` of running jobs, so a session
  runs as many turns at once as there are slots (one by default) whatever the workers do;
  ``started_at``; ``traceparent``; indexes for the queued-age reaper and for retention.
- mailbox: replies delivered into a table for agents that pull them.
- the ``pending`` view shows held rows as held, with their age frozen at the hold, and a
  ``status``; ``dead_letters`` shows the attempt log.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"
EMPTY_LOG = sa.text("'[]'::jsonb")

PENDING_VIEW = """
CREATE VIEW birddog.pending AS
SELECT
    o.key,
    o.recipient_agent_id,
    o.recipient_session_id,
    o.in_reply_to,
    o.command_id,
    o.outcome,
    coalesce(NOT r.enabled, false) AS held,
    r.held_at AS held_since,
    coalesce(o.lease_expires_at > now(), false) AS in_flight,
    o.attempts,
    o.deferrals,
    o.last_error,
    o.created_at,
    CASE
        WHEN NOT coalesce(r.enabled, true)
            THEN greatest(coalesce(r.held_at, now()) - o.created_at, interval '0')
        ELSE now() - o.created_at
    END AS age,
    o.due_at AS next_try_at,
    CASE
        WHEN NOT coalesce(r.enabled, true) THEN 'held'
        WHEN o.lease_expires_at > now() THEN 'in_flight'
        WHEN o.due_at <= now() THEN 'due'
        ELSE 'waiting'
    END AS status
FROM birddog.outbox o
LEFT JOIN birddog.routes r ON r.agent_id = o.recipient_agent_id
WHERE o.state = 'pending'
"""

DEAD_LETTERS_VIEW = """
CREATE VIEW birddog.dead_letters AS
SELECT
    o.key,
    o.recipient_agent_id,
    o.recipient_session_id,
    o.in_reply_to,
    o.command_id,
    o.outcome,
    o.dead_reason,
    o.last_error,
    o.attempts,
    o.deferrals,
    o.created_at,
    o.dead_at,
    o.attempt_log
FROM birddog.outbox o
WHERE o.state = 'dead'
"""

OLD_PENDING_VIEW = """
CREATE VIEW birddog.pending AS
SELECT
    o.key,
    o.recipient_agent_id,
    o.recipient_session_id,
    o.in_reply_to,
    o.command_id,
    o.outcome,
    EXISTS (
        SELECT 1 FROM birddog.routes r
        WHERE r.agent_id = o.recipient_agent_id AND NOT r.enabled
    ) AS held,
    coalesce(o.lease_expires_at > now(), false) AS in_flight,
    o.attempts,
    o.deferrals,
    o.last_error,
    o.created_at,
    now() - o.created_at AS age,
    o.due_at AS next_try_at
FROM birddog.outbox o
WHERE o.state = 'pending'
"""

OLD_DEAD_LETTERS_VIEW = """
CREATE VIEW birddog.dead_letters AS
SELECT
    o.key,
    o.recipient_agent_id,
    o.recipient_session_id,
    o.in_reply_to,
    o.command_id,
    o.outcome,
    o.dead_reason,
    o.last_error,
    o.attempts,
    o.deferrals,
    o.created_at,
    o.dead_at
FROM birddog.outbox o
WHERE o.state = 'dead'
"""


def _ts(name: str, *, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS birddog.dead_letters")
    op.execute("DROP VIEW IF EXISTS birddog.pending")

    # routes
    op.add_column(
        "routes",
        sa.Column("kind", sa.Text(), server_default=sa.text("'http'"), nullable=False),
        schema=SCHEMA,
    )
    op.add_column(
        "routes",
        sa.Column("batch_size", sa.Integer(), server_default=sa.text("1"), nullable=False),
        schema=SCHEMA,
    )
    op.add_column("routes", _ts("held_at"), schema=SCHEMA)
    op.add_column("routes", sa.Column("previous_secret", sa.Text(), nullable=True), schema=SCHEMA)
    op.add_column("routes", _ts("previous_secret_until"), schema=SCHEMA)
    op.alter_column("routes", "url", nullable=True, schema=SCHEMA)
    op.alter_column("routes", "secret", nullable=True, schema=SCHEMA)
    op.execute("UPDATE birddog.routes SET held_at = updated_at WHERE NOT enabled")
    op.create_check_constraint(
        "routes_kind_check", "routes", "kind IN ('http', 'mailbox')", schema=SCHEMA
    )
    op.create_check_constraint(
        "routes_http_check",
        "routes",
        "kind <> 'http' OR (url IS NOT NULL AND secret IS NOT NULL)",
        schema=SCHEMA,
    )
    op.create_check_constraint(
        "routes_batch_size_check", "routes", "batch_size BETWEEN 1 AND 1000", schema=SCHEMA
    )

    # outbox and receipts
    op.add_column(
        "outbox",
        sa.Column(
            "attempt_log",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=EMPTY_LOG,
            nullable=False,
        ),
        schema=SCHEMA,
    )
    op.add_column("outbox", sa.Column("traceparent", sa.Text(), nullable=True), schema=SCHEMA)
    op.add_column(
        "receipts",
        sa.Column(
            "attempt_log",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=EMPTY_LOG,
            nullable=False,
        ),
        schema=SCHEMA,
    )
    op.create_index("receipts_delivered_at_idx", "receipts", ["delivered_at"], schema=SCHEMA)

    # jobs
    op.add_column("jobs", sa.Column("slot", sa.SmallInteger(), nullable=True), schema=SCHEMA)
    op.add_column("jobs", _ts("started_at"), schema=SCHEMA)
    op.add_column("jobs", sa.Column("traceparent", sa.Text(), nullable=True), schema=SCHEMA)
    op.drop_index("jobs_queued_claim_idx", table_name="jobs", schema=SCHEMA)
    op.create_index(
        "jobs_queued_claim_idx",
        "jobs",
        ["queue", sa.literal_column("priority DESC"), "created_at", "job_id"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'queued'"),
    )
    op.create_index(
        "jobs_running_slot_idx",
        "jobs",
        ["queue", "slot"],
        unique=True,
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_index(
        "jobs_queued_created_at_idx",
        "jobs",
        ["created_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'queued'"),
    )
    op.create_index(
        "jobs_settled_at_idx",
        "jobs",
        ["settled_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'settled'"),
    )

    # mailbox
    op.create_table(
        "mailbox",
        sa.Column("key", sa.Text(collation="C"), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("in_reply_to", sa.Text(collation="C"), nullable=False),
        sa.Column("command_id", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("reply", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        _ts("delivered_at", nullable=False),
        _ts("read_at"),
        sa.PrimaryKeyConstraint("key"),
        schema=SCHEMA,
    )
    op.create_index(
        "mailbox_unread_idx",
        "mailbox",
        ["agent_id", "session_id", "delivered_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("read_at IS NULL"),
    )
    op.create_index("mailbox_in_reply_to_idx", "mailbox", ["in_reply_to"], schema=SCHEMA)
    op.create_index(
        "mailbox_read_at_idx",
        "mailbox",
        ["read_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("read_at IS NOT NULL"),
    )

    op.execute(PENDING_VIEW)
    op.execute(DEAD_LETTERS_VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS birddog.dead_letters")
    op.execute("DROP VIEW IF EXISTS birddog.pending")
    op.drop_table("mailbox", schema=SCHEMA)
    op.drop_index("jobs_settled_at_idx", table_name="jobs", schema=SCHEMA)
    op.drop_index("jobs_queued_created_at_idx", table_name="jobs", schema=SCHEMA)
    op.drop_index("jobs_running_slot_idx", table_name="jobs", schema=SCHEMA)
    op.drop_index("jobs_queued_claim_idx", table_name="jobs", schema=SCHEMA)
    op.create_index(
        "jobs_queued_claim_idx",
        "jobs",
        ["queue", sa.literal_column("priority DESC"), "created_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'queued'"),
    )
    for column in ("traceparent", "started_at", "slot"):
        op.drop_column("jobs", column, schema=SCHEMA)
    op.drop_index("receipts_delivered_at_idx", table_name="receipts", schema=SCHEMA)
    op.drop_column("receipts", "attempt_log", schema=SCHEMA)
    op.drop_column("outbox", "traceparent", schema=SCHEMA)
    op.drop_column("outbox", "attempt_log", schema=SCHEMA)
    # The older schema has no mailbox routes: their replies become unknown recipients.
    op.execute("DELETE FROM birddog.routes WHERE kind <> 'http'")
    for name in ("routes_batch_size_check", "routes_http_check", "routes_kind_check"):
        op.drop_constraint(name, "routes", schema=SCHEMA)
    op.alter_column("routes", "secret", nullable=False, schema=SCHEMA)
    op.alter_column("routes", "url", nullable=False, schema=SCHEMA)
    for column in ("previous_secret_until", "previous_secret", "held_at", "batch_size", "kind"):
        op.drop_column("routes", column, schema=SCHEMA)
    op.execute(OLD_PENDING_VIEW)
    op.execute(OLD_DEAD_LETTERS_VIEW)
