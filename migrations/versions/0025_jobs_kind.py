"""Every job has a kind: what its mail is for (``birddog.core.kinds``).

``task`` and ``escalation`` are interactive, ``report`` and ``receipt`` informational. The
kind lives in the job beside the mail, never in the mail's JSON (which stays the TypeScript
BirdDog's): a column ``birddog.jobs.kind`` (``task`` for every job written before, and for a
payload that names none), filled by ``birddog.enqueue`` from the payload's ``kind`` key and
checked to be one of the four (``birddog.enqueue`` learns to fill it in the next
revision). The operators' ``birddog.pending`` view shows the kind of the mail each pending
reply answers.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"

# The view of 0003 with the kind of the mail each reply answers, as the last column
# (CREATE OR REPLACE VIEW may add columns at the end only). The job is found by its
# mail's key (the index of 0004); a reply whose job was pruned shows no kind.
PENDING_COLUMNS = """
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
    END AS status"""

KIND_COLUMN = """,
    (
        SELECT j.kind FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') = o.in_reply_to
        ORDER BY j.created_at, j.job_id
        LIMIT 1
    ) AS kind"""

PENDING_FROM = """
FROM birddog.outbox o
LEFT JOIN birddog.routes r ON r.agent_id = o.recipient_agent_id
WHERE o.state = 'pending'
"""

PENDING_VIEW = (
    "CREATE OR REPLACE VIEW birddog.pending AS" + PENDING_COLUMNS + KIND_COLUMN + PENDING_FROM
)
PREVIOUS_PENDING_VIEW = "CREATE VIEW birddog.pending AS" + PENDING_COLUMNS + PENDING_FROM


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("kind", sa.Text, nullable=False, server_default=sa.text("'task'")),
        schema=SCHEMA,
    )
    op.create_check_constraint(
        "jobs_kind_check",
        "jobs",
        "kind IN ('task', 'escalation', 'report', 'receipt')",
        schema=SCHEMA,
    )
    op.execute(PENDING_VIEW)


def downgrade() -> None:
    # The view without its last column: CREATE OR REPLACE cannot drop one.
    op.execute("DROP VIEW birddog.pending")
    op.execute(PREVIOUS_PENDING_VIEW)
    op.drop_constraint("jobs_kind_check", "jobs", schema=SCHEMA)
    op.drop_column("jobs", "kind", schema=SCHEMA)
