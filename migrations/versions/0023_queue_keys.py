"""A queue belongs to its agent: jobs and queue heads are keyed by (agent, session).

A job's queue is its target session id (the concepts' contract), and session ids are
chosen by whoever sends: before this revision the queue heads were keyed by the session id
alone, so a send to ``carol:s-bob`` headed the same queue as bob's ``s-bob``, and bob's
worker (which claims bob's heads) found that queue's head to be carol's and never passed
it: any sender could hold another agent's session for as long as its job stayed queued.

``birddog.jobs.queue_key`` (generated: the agent id, a unit separator, the queue; an
agentless job's key starts with the separator, which no agent id holds) is what "one
queue" means now: the running-slot index, the claim's index and the not-before index are
over it, and ``birddog.queue_heads`` has one row per key (its primary key), still naming
its ``queue`` for people. The heads are recomputed here from the jobs; the functions that
keep them follow in the next revision.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HEADS = """
INSERT INTO birddog.queue_heads (
    {key}queue, agent_id, priority, created_at, job_id, due_at, running
)
SELECT {key_value}q.queue, {agent}, head.priority, head.created_at, head.job_id,
       due.due_at, run.running
FROM (SELECT DISTINCT {key_select}j.queue FROM birddog.jobs j
      WHERE j.state IN ('queued', 'running')) q
LEFT JOIN LATERAL (
    SELECT j.agent_id, j.priority, j.created_at, j.job_id
    FROM birddog.jobs j
    WHERE j.state = 'queued' AND j.{column} = q.{column}
    ORDER BY j.priority DESC, j.created_at, j.job_id
    LIMIT 1
) head ON true
LEFT JOIN LATERAL (
    SELECT j.not_before AS due_at
    FROM birddog.jobs j
    WHERE j.state = 'queued' AND j.{column} = q.{column}
    ORDER BY j.not_before NULLS FIRST
    LIMIT 1
) due ON true
CROSS JOIN LATERAL (
    SELECT count(*)::integer AS running
    FROM birddog.jobs j
    WHERE j.state = 'running' AND j.{column} = q.{column}
) run
"""
"""The heads recomputed from the jobs, by queue key (upgrade) or by queue (downgrade)."""


def upgrade() -> None:
    op.execute(
        "ALTER TABLE birddog.jobs ADD COLUMN queue_key text NOT NULL "
        "GENERATED ALWAYS AS (coalesce(agent_id, '') || E'\\x1f' || queue) STORED"
    )
    op.execute("DROP INDEX birddog.jobs_queued_claim_idx")
    op.execute("DROP INDEX birddog.jobs_running_slot_idx")
    op.execute("DROP INDEX birddog.jobs_queued_not_before_idx")
    op.execute(
        "CREATE INDEX jobs_queued_claim_idx ON birddog.jobs "
        "(queue_key, priority DESC, created_at, job_id) WHERE state = 'queued'"
    )
    op.execute(
        "CREATE UNIQUE INDEX jobs_running_slot_idx ON birddog.jobs (queue_key, slot) "
        "WHERE state = 'running'"
    )
    op.execute(
        "CREATE INDEX jobs_queued_not_before_idx ON birddog.jobs "
        "(queue_key, not_before NULLS FIRST) WHERE state = 'queued'"
    )
    op.execute("LOCK TABLE birddog.queue_heads IN EXCLUSIVE MODE")
    op.execute("DELETE FROM birddog.queue_heads")
    op.execute("ALTER TABLE birddog.queue_heads DROP CONSTRAINT queue_heads_pkey")
    op.execute("ALTER TABLE birddog.queue_heads ADD COLUMN queue_key text NOT NULL")
    op.execute("ALTER TABLE birddog.queue_heads ADD PRIMARY KEY (queue_key)")
    op.execute("ALTER TABLE birddog.queue_heads ALTER COLUMN queue SET NOT NULL")
    op.execute(
        _HEADS.format(
            key="queue_key, ",
            key_value="q.queue_key, ",
            key_select="j.queue_key, ",
            agent="nullif(split_part(q.queue_key, E'\\x1f', 1), '')",
            column="queue_key",
        )
    )


def downgrade() -> None:
    op.execute("LOCK TABLE birddog.queue_heads IN EXCLUSIVE MODE")
    op.execute("DELETE FROM birddog.queue_heads")
    op.execute("ALTER TABLE birddog.queue_heads DROP CONSTRAINT queue_heads_pkey")
    op.execute("ALTER TABLE birddog.queue_heads DROP COLUMN queue_key")
    op.execute("ALTER TABLE birddog.queue_heads ADD PRIMARY KEY (queue)")
    op.execute("DROP INDEX birddog.jobs_queued_claim_idx")
    op.execute("DROP INDEX birddog.jobs_running_slot_idx")
    op.execute("DROP INDEX birddog.jobs_queued_not_before_idx")
    op.execute(
        "CREATE INDEX jobs_queued_claim_idx ON birddog.jobs "
        "(queue, priority DESC, created_at, job_id) WHERE state = 'queued'"
    )
    op.execute(
        "CREATE UNIQUE INDEX jobs_running_slot_idx ON birddog.jobs (queue, slot) "
        "WHERE state = 'running'"
    )
    op.execute(
        "CREATE INDEX jobs_queued_not_before_idx ON birddog.jobs "
        "(queue, not_before NULLS FIRST) WHERE state = 'queued'"
    )
    op.execute("ALTER TABLE birddog.jobs DROP COLUMN queue_key")
    op.execute(
        _HEADS.format(key="", key_value="", key_select="", agent="head.agent_id", column="queue")
    )
