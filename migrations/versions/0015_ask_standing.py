"""Where an ask stands, for its asker: ``birddog.ask_standing``.

An ask that times out says whether its job is queued, running or settled and, once it
settled, whether its reply is pending (with its last error) or dead (with its reason).
The job is read under the jobs' row-level security; the reply's outbox row, and the
workers' and daemons' last beats, through this ``SECURITY DEFINER`` function, so a sender
or an agent's login reads no outbox row but the state of a reply it may read in the
mailbox anyway (``birddog.mailbox_visible``), and never a reply's content.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = "ask_standing(text,text,text,double precision)"

ASK_STANDING = """
CREATE FUNCTION birddog.ask_standing(
    p_key text, p_agent_id text, p_session_id text, p_within_s double precision
)
RETURNS TABLE (
    workers_recent integer, daemons_recent integer, reply_key text, reply_state text,
    reply_attempts integer, reply_due_at timestamptz, last_error text, dead_reason text
)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
    -- The workers and drain daemons running that beat within p_within_s seconds, and the
    -- reply to mail p_key owed to p_agent_id:p_session_id (state, attempts, last error;
    -- never its content), when the caller may read that reply in the mailbox.
    SELECT
        (SELECT count(*) FROM birddog.daemons d
         WHERE d.kind = 'worker' AND d.stopped_at IS NULL
           AND d.seen_at > now() - make_interval(secs => p_within_s))::integer,
        (SELECT count(*) FROM birddog.daemons d
         WHERE d.kind = 'drain' AND d.stopped_at IS NULL
           AND d.seen_at > now() - make_interval(secs => p_within_s))::integer,
        o.key, o.state, coalesce(o.attempts, 0), o.due_at, o.last_error, o.dead_reason
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (
        SELECT o.key, o.state, o.attempts, o.due_at, o.last_error, o.dead_reason
        FROM birddog.outbox o
        WHERE o.recipient_agent_id = p_agent_id AND o.recipient_session_id = p_session_id
          AND o.in_reply_to = p_key AND birddog.mailbox_visible(p_agent_id, p_key)
        ORDER BY o.key
        LIMIT 1
    ) o ON true
$fn$"""


def upgrade() -> None:
    op.execute(ASK_STANDING)
    op.execute(f"REVOKE ALL ON FUNCTION birddog.{SIGNATURE} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION birddog.{SIGNATURE}")
