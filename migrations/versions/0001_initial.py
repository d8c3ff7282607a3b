"""The birddog schema: outbox, receipts, wake, routes, jobs, daemons; pending and dead_letters.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"
NOW = sa.text("now()")


def _ts(name: str, *, nullable: bool = False, now: bool = False) -> sa.Column:
    return sa.Column(
        name, sa.DateTime(timezone=True), nullable=nullable, server_default=NOW if now else None
    )


PENDING_VIEW = """
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
    o.dead_at
FROM birddog.outbox o
WHERE o.state = 'dead'
"""


def upgrade() -> None:
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    op.create_table(
        "outbox",
        sa.Column("key", sa.Text(collation="C"), nullable=False),
        sa.Column("recipient_agent_id", sa.Text(), nullable=False),
        sa.Column("recipient_session_id", sa.Text(), nullable=False),
        sa.Column("in_reply_to", sa.Text(collation="C"), nullable=False),
        sa.Column("command_id", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("reply", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("deferrals", sa.Integer(), server_default=sa.text("0"), nullable=False),
        _ts("due_at"),
        _ts("created_at"),
        _ts("updated_at", now=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("dead_reason", sa.Text(), nullable=True),
        _ts("dead_at", nullable=True),
        sa.Column("claim_token", sa.UUID(), nullable=True),
        _ts("lease_expires_at", nullable=True),
        sa.CheckConstraint("state IN ('pending', 'dead')", name="outbox_state_check"),
        sa.CheckConstraint("attempts >= 0 AND deferrals >= 0", name="outbox_counts_check"),
        sa.PrimaryKeyConstraint("key"),
        schema=SCHEMA,
    )
    op.create_index(
        "outbox_pending_due_at_idx",
        "outbox",
        ["due_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_index(
        "outbox_recipient_agent_id_idx", "outbox", ["recipient_agent_id"], schema=SCHEMA
    )
    op.create_index(
        "outbox_dead_at_idx",
        "outbox",
        ["dead_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'dead'"),
    )
    op.create_table(
        "receipts",
        sa.Column("key", sa.Text(collation="C"), nullable=False),
        _ts("delivered_at"),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("recipient_agent_id", sa.Text(), nullable=False),
        sa.Column("recipient_session_id", sa.Text(), nullable=False),
        sa.Column("command_id", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
        schema=SCHEMA,
    )
    op.create_table(
        "wake",
        sa.Column("id", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        _ts("wake_at"),
        sa.CheckConstraint("id", name="wake_singleton_check"),
        sa.PrimaryKeyConstraint("id"),
        schema=SCHEMA,
    )
    op.create_table(
        "routes",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        _ts("created_at", now=True),
        _ts("updated_at", now=True),
        sa.PrimaryKeyConstraint("agent_id"),
        schema=SCHEMA,
    )
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.Text(collation="C"), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("lane", sa.Text(), nullable=False),
        sa.Column("priority", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("recovery", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("claim_token", sa.UUID(), nullable=True),
        _ts("lease_expires_at", nullable=True),
        sa.Column("recovery_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        _ts("cancel_requested_at", nullable=True),
        sa.Column("cancel_content", sa.Text(), nullable=True),
        sa.Column("result_content", sa.Text(), nullable=True),
        sa.Column("diagnostic", sa.Text(), nullable=True),
        sa.Column("worker_id", sa.Text(), nullable=True),
        _ts("created_at", now=True),
        _ts("updated_at", now=True),
        _ts("settled_at", nullable=True),
        sa.CheckConstraint("state IN ('queued', 'running', 'settled')", name="jobs_state_check"),
        sa.CheckConstraint(
            "outcome IS NULL OR outcome IN "
            "('completed', 'failed', 'interrupted', 'cancelled', 'outcome_unknown')",
            name="jobs_outcome_check",
        ),
        sa.PrimaryKeyConstraint("job_id"),
        schema=SCHEMA,
    )
    op.create_index(
        "jobs_queued_claim_idx",
        "jobs",
        ["queue", sa.literal_column("priority DESC"), "created_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'queued'"),
    )
    op.create_index(
        "jobs_running_lease_idx",
        "jobs",
        ["lease_expires_at"],
        schema=SCHEMA,
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_table(
        "daemons",
        sa.Column("daemon_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        _ts("started_at", now=True),
        _ts("seen_at", now=True),
        sa.CheckConstraint("kind IN ('drain', 'worker')", name="daemons_kind_check"),
        sa.PrimaryKeyConstraint("daemon_id"),
        schema=SCHEMA,
    )
    op.execute(PENDING_VIEW)
    op.execute(DEAD_LETTERS_VIEW)


def downgrade() -> None:
    # The schema itself stays: it holds Alembic's version table (birddog.alembic_version).
    op.execute("DROP VIEW IF EXISTS birddog.dead_letters")
    op.execute("DROP VIEW IF EXISTS birddog.pending")
    for table in ("daemons", "jobs", "routes", "wake", "receipts", "outbox"):
        op.drop_table(table, schema=SCHEMA)
