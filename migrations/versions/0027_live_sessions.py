"""Live sessions: the agent sessions a running process serves now, and each route's grace.

A process acting as an agent session (an MCP server ``--as`` it, an MCP HTTP caller while
a connection of it lives, ``birddog worker --live``) announces it in
``birddog.live_sessions``: one row per holder (the claimer id its own claims carry),
renewed every second or two before ``expires_at`` passes (a few seconds ahead), deleted
on a clean exit. A row past ``expires_at`` no longer counts, so a process that dies stops
counting within seconds. Its ``queue_key`` is the jobs' (agent, unit separator, session).

``birddog.routes.live_grace_s``: how long a job waits for its session's live session
before a worker may take it (NULL: 30 s). The functions that announce, leave and hold
follow in the next revision.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE birddog.live_sessions (
            queue_key text NOT NULL
                GENERATED ALWAYS AS (agent_id || E'\\x1f' || session) STORED,
            holder text NOT NULL,
            agent_id text NOT NULL,
            session text NOT NULL,
            started_at timestamptz NOT NULL DEFAULT now(),
            seen_at timestamptz NOT NULL DEFAULT now(),
            expires_at timestamptz NOT NULL,
            CONSTRAINT live_sessions_pkey PRIMARY KEY (queue_key, holder),
            CONSTRAINT live_sessions_times_finite_check CHECK (
                isfinite(started_at) AND isfinite(seen_at) AND isfinite(expires_at)
            )
        )
        """
    )
    op.execute("CREATE INDEX live_sessions_expires_at_idx ON birddog.live_sessions (expires_at)")
    op.execute("ALTER TABLE birddog.routes ADD COLUMN live_grace_s double precision")
    op.execute(
        "ALTER TABLE birddog.routes ADD CONSTRAINT routes_live_grace_check "
        "CHECK (live_grace_s >= 0 AND live_grace_s <= 86400)"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE birddog.routes DROP CONSTRAINT routes_live_grace_check")
    op.execute("ALTER TABLE birddog.routes DROP COLUMN live_grace_s")
    op.execute("DROP TABLE birddog.live_sessions")
