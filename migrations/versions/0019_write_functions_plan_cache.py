"""Settlements without planning: the write functions' own plan cache mode, one queue's head.

Most of a settlement's PostgreSQL CPU was planning:

- BirdDog's pools set ``plan_cache_mode = force_custom_plan`` for the whole session (the
  daemon's claim at ``now`` must see that the backlog lies in the future, which a generic
  plan cannot know). A PL/pgSQL function inherits that setting, so every statement of
  ``birddog.settle`` (and of the functions it calls), ``enqueue``, ``send_mail`` and ``ack``
  was planned afresh at every call. These functions now set ``plan_cache_mode = auto``,
  PostgreSQL's default, for themselves (``ALTER FUNCTION ... SET``: it holds for every
  statement run while the function runs, the helpers it calls included, and ends with
  it): a statement is planned for its parameters the first five times and then keeps a
  generic plan only when that plan is estimated no dearer than the custom ones, so a
  lookup by primary key stops being planned again while a statement whose plan depends
  on its parameters stays custom. ``birddog.claim`` keeps generic plans always
  (``force_generic_plan``): its statements read the candidates over ``unnest`` of an
  array, whose generic plan ``auto`` estimates for ten queues and never chooses, so it
  planned them at every call (most of a claim); their plans walk the queue heads'
  claim index and each candidate's head by the same indexes whatever the time, the
  limit or the number of queues, and filter the times they are given, however many
  sessions wait. The daemon's claim over the outbox, a statement of its own, stays
  custom.
- ``birddog._queue_heads_refresh`` recomputed its queues with one statement over
  ``unnest`` of an array, whose generic plan is estimated for ten queues and so never
  chosen: planned at every call. Every settlement, enqueue and single-queue claim
  refreshes one queue; for one queue the function now runs the same recomputation as
  four statements over that queue (lock its row, its head, its earliest not-before, its
  running count, then delete or upsert the row), each a generic plan on the indexes the
  recomputation used. The rows are locked before the first read, as before, so the last
  transaction to change a queue still leaves its row right; several queues take the
  statement as it was.

The figures before and after: docs/performance.md, "Migration 0019: settlements without
planning".

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SETTLE = (
    "settle(text, uuid, text, text, text, text, text, text, timestamptz, integer, text, boolean)"
)
ENQUEUE = (
    "enqueue(text, text, text, smallint, text, text, timestamptz, text, boolean, timestamptz, "
    "double precision)"
)
SEND_MAIL = (
    "send_mail(text, text, boolean, boolean, text, text, text, text, text, smallint, text, "
    "text, timestamptz, text, timestamptz, double precision)"
)
CLAIM = "claim(text[], integer, timestamptz, text, integer, timestamptz, text, text[])"

PLAN_CACHE_MODES = {
    SETTLE: "auto",
    ENQUEUE: "auto",
    SEND_MAIL: "auto",
    "ack(text[], timestamptz)": "auto",
    "heartbeat(text, uuid, timestamptz)": "auto",
    "cancel(text, text, timestamptz, integer, boolean)": "auto",
    CLAIM: "force_generic_plan",
}
"""Each write function's own ``plan_cache_mode``, by signature."""

HEADS_REFRESH = """
CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queues text[]) RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
    v_queue text;
    v_head record;
    v_due timestamptz;
    v_running integer;
BEGIN
    IF cardinality(p_queues) = 1 THEN
        -- One queue (a settlement, an enqueue, a claim of one session): the recomputation
        -- below as statements over that queue alone, each kept as a generic plan.
        v_queue := p_queues[1];
        PERFORM 1 FROM birddog.queue_heads h WHERE h.queue = v_queue FOR UPDATE;
        SELECT j.agent_id, j.priority, j.created_at, j.job_id INTO v_head
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue = v_queue
        ORDER BY j.priority DESC, j.created_at, j.job_id
        LIMIT 1;
        SELECT j.not_before INTO v_due
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue = v_queue
        ORDER BY j.not_before NULLS FIRST
        LIMIT 1;
        SELECT count(*)::integer INTO v_running
        FROM birddog.jobs j
        WHERE j.state = 'running' AND j.queue = v_queue;
        IF v_head.job_id IS NULL AND v_running = 0 THEN
            DELETE FROM birddog.queue_heads h WHERE h.queue = v_queue;
        ELSE
            INSERT INTO birddog.queue_heads AS h (
                queue, agent_id, priority, created_at, job_id, due_at, running
            )
            VALUES (v_queue, v_head.agent_id, v_head.priority, v_head.created_at,
                    v_head.job_id, v_due, v_running)
            ON CONFLICT (queue) DO UPDATE
            SET agent_id = excluded.agent_id, priority = excluded.priority,
                created_at = excluded.created_at, job_id = excluded.job_id,
                due_at = excluded.due_at, running = excluded.running
            WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
                IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                                  excluded.job_id, excluded.due_at, excluded.running);
        END IF;
        RETURN;
    END IF;
    -- Recompute the heads of p_queues from their jobs. The rows are locked first, in queue
    -- order, by a statement of their own: the recomputation below takes its snapshot only
    -- then, so it sees every change committed by a transaction that held one of them, and
    -- the last transaction to change a queue's jobs leaves its row right.
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue = ANY(p_queues)
    ORDER BY h.queue
    FOR UPDATE;
    WITH facts AS (
        SELECT q.queue, head.agent_id, head.priority, head.created_at, head.job_id,
               due.due_at, run.running
        FROM (SELECT DISTINCT u.queue FROM unnest(p_queues) AS u(queue)) q
        LEFT JOIN LATERAL (
            SELECT j.agent_id, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) head ON true
        LEFT JOIN LATERAL (
            SELECT j.not_before AS due_at
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.not_before NULLS FIRST
            LIMIT 1
        ) due ON true
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS running
            FROM birddog.jobs j
            WHERE j.state = 'running' AND j.queue = q.queue
        ) run
    ), kept AS (
        INSERT INTO birddog.queue_heads AS h (
            queue, agent_id, priority, created_at, job_id, due_at, running
        )
        SELECT f.queue, f.agent_id, f.priority, f.created_at, f.job_id, f.due_at, f.running
        FROM facts f
        WHERE f.job_id IS NOT NULL OR f.running > 0
        ON CONFLICT (queue) DO UPDATE
        SET agent_id = excluded.agent_id, priority = excluded.priority,
            created_at = excluded.created_at, job_id = excluded.job_id,
            due_at = excluded.due_at, running = excluded.running
        WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
            IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                              excluded.job_id, excluded.due_at, excluded.running)
    )
    DELETE FROM birddog.queue_heads h
    USING facts f
    WHERE h.queue = f.queue AND f.job_id IS NULL AND f.running = 0;
END
$fn$"""
"""Revision 0012's ``birddog._queue_heads_refresh`` with its statements over one queue."""

PREVIOUS_HEADS_REFRESH = """
CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queues text[]) RETURNS void
LANGUAGE plpgsql
AS $fn$
BEGIN
    -- Recompute the heads of p_queues from their jobs. The rows are locked first, in queue
    -- order, by a statement of their own: the recomputation below takes its snapshot only
    -- then, so it sees every change committed by a transaction that held one of them, and
    -- the last transaction to change a queue's jobs leaves its row right.
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue = ANY(p_queues)
    ORDER BY h.queue
    FOR UPDATE;
    WITH facts AS (
        SELECT q.queue, head.agent_id, head.priority, head.created_at, head.job_id,
               due.due_at, run.running
        FROM (SELECT DISTINCT u.queue FROM unnest(p_queues) AS u(queue)) q
        LEFT JOIN LATERAL (
            SELECT j.agent_id, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) head ON true
        LEFT JOIN LATERAL (
            SELECT j.not_before AS due_at
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.not_before NULLS FIRST
            LIMIT 1
        ) due ON true
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS running
            FROM birddog.jobs j
            WHERE j.state = 'running' AND j.queue = q.queue
        ) run
    ), kept AS (
        INSERT INTO birddog.queue_heads AS h (
            queue, agent_id, priority, created_at, job_id, due_at, running
        )
        SELECT f.queue, f.agent_id, f.priority, f.created_at, f.job_id, f.due_at, f.running
        FROM facts f
        WHERE f.job_id IS NOT NULL OR f.running > 0
        ON CONFLICT (queue) DO UPDATE
        SET agent_id = excluded.agent_id, priority = excluded.priority,
            created_at = excluded.created_at, job_id = excluded.job_id,
            due_at = excluded.due_at, running = excluded.running
        WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
            IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                              excluded.job_id, excluded.due_at, excluded.running)
    )
    DELETE FROM birddog.queue_heads h
    USING facts f
    WHERE h.queue = f.queue AND f.job_id IS NULL AND f.running = 0;
END
$fn$"""
"""Revision 0012's ``birddog._queue_heads_refresh``, as a downgrade restores it."""


def upgrade() -> None:
    op.execute(HEADS_REFRESH)
    for signature, mode in PLAN_CACHE_MODES.items():
        op.execute(f"ALTER FUNCTION birddog.{signature} SET plan_cache_mode = {mode}")


def downgrade() -> None:
    for signature in PLAN_CACHE_MODES:
        op.execute(f"ALTER FUNCTION birddog.{signature} RESET plan_cache_mode")
    op.execute(PREVIOUS_HEADS_REFRESH)
