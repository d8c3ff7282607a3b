"""Per-agent identity: the agents ``birddog agent add`` made, and their bearer tokens.

A token names one agent session; only its SHA-256 digest is stored (``token_digest``,
unique), so the table never holds a token. ``birddog.agent_token_use(digest)`` is how the
MCP and A2A servers authenticate a caller: a ``SECURITY DEFINER`` function that returns
the token's address and records its last use (at most once a minute, so a busy caller
does not write a row per request), so no process but the operator's needs to read the
table itself.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"

# search_path is pinned with pg_temp last, so a caller's temporary table can never stand
# in for a BirdDog one; every name is schema-qualified as well.
USE_FUNCTION = """
CREATE FUNCTION birddog.agent_token_use(p_digest bytea)
RETURNS TABLE (token_id text, agent_id text, session_id text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
DECLARE
    tok birddog.agent_tokens%ROWTYPE;
BEGIN
    SELECT t.* INTO tok FROM birddog.agent_tokens t WHERE t.token_digest = p_digest;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF tok.last_used_at IS NULL OR tok.last_used_at < now() - interval '60 seconds' THEN
        UPDATE birddog.agent_tokens t SET last_used_at = now()
        WHERE t.token_id = tok.token_id;
    END IF;
    RETURN QUERY SELECT tok.token_id, tok.agent_id, tok.session_id;
END
$fn$
"""


def _ts(name: str, *, nullable: bool = False, now: bool = False) -> sa.Column[object]:
    return sa.Column(
        name,
        sa.DateTime(timezone=True),
        nullable=nullable,
        server_default=sa.text("now()") if now else None,
    )


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.Text(), nullable=False),
        _ts("created_at", now=True),
        sa.CheckConstraint("isfinite(created_at)", name="agents_times_finite_check"),
        sa.PrimaryKeyConstraint("agent_id"),
        schema=SCHEMA,
    )
    op.create_table(
        "agent_tokens",
        sa.Column("token_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("token_digest", sa.LargeBinary(), nullable=False),
        _ts("created_at", now=True),
        _ts("last_used_at", nullable=True),
        sa.CheckConstraint("octet_length(token_digest) = 32", name="agent_tokens_digest_check"),
        sa.CheckConstraint(
            "isfinite(created_at) AND isfinite(last_used_at)",
            name="agent_tokens_times_finite_check",
        ),
        sa.ForeignKeyConstraint(["agent_id"], [f"{SCHEMA}.agents.agent_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_id"),
        schema=SCHEMA,
    )
    op.create_index(
        "agent_tokens_digest_idx", "agent_tokens", ["token_digest"], unique=True, schema=SCHEMA
    )
    op.create_index("agent_tokens_agent_id_idx", "agent_tokens", ["agent_id"], schema=SCHEMA)
    op.execute(USE_FUNCTION)
    # Functions are created executable by PUBLIC; the roles grant EXECUTE where needed.
    op.execute("REVOKE ALL ON FUNCTION birddog.agent_token_use(bytea) FROM PUBLIC")


def downgrade() -> None:
    op.execute("DROP FUNCTION birddog.agent_token_use(bytea)")
    op.drop_index("agent_tokens_agent_id_idx", table_name="agent_tokens", schema=SCHEMA)
    op.drop_index("agent_tokens_digest_idx", table_name="agent_tokens", schema=SCHEMA)
    op.drop_table("agent_tokens", schema=SCHEMA)
    op.drop_table("agents", schema=SCHEMA)
