"""Where a job's turn runs: host, boot and the supervisor's pid and start time.

A worker that starts a process for a job records its supervisor on the job through
``birddog.record_turn`` (SECURITY DEFINER, like the other writes of migration 0007: the
claim token must match, and nothing but the four columns changes), so that a worker
starting on that host can end a turn whose worker was killed before the job runs again.
All four columns are NULL until a turn is recorded; a later claim's record replaces them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"
COLUMNS = (
    ("turn_host", sa.Text),
    ("turn_boot_id", sa.Text),
    ("turn_pid", sa.Integer),
    ("turn_start_ticks", sa.BigInteger),
)

RECORD_TURN = "record_turn(text,uuid,text,text,integer,bigint)"
RECORD_TURN_BODY = """
CREATE FUNCTION birddog.record_turn(
    p_job_id text, p_token uuid, p_host text, p_boot_id text, p_pid integer,
    p_start_ticks bigint
)
RETURNS text
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
    -- Where the turn of a job still running under this claim runs; NULL: the claim is
    -- gone. Only the four turn columns change, and only under the caller's own claim.
    UPDATE birddog.jobs j
    SET turn_host = p_host, turn_boot_id = p_boot_id, turn_pid = p_pid,
        turn_start_ticks = p_start_ticks
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_token
    RETURNING j.job_id
$fn$"""


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("jobs", sa.Column(name, kind, nullable=True), schema=SCHEMA)
    op.execute(RECORD_TURN_BODY)
    # Created executable by PUBLIC; migrate --roles grants EXECUTE.
    op.execute(f"REVOKE ALL ON FUNCTION {SCHEMA}.{RECORD_TURN} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION {SCHEMA}.{RECORD_TURN}")
    for name, _ in reversed(COLUMNS):
        op.drop_column("jobs", name, schema=SCHEMA)
