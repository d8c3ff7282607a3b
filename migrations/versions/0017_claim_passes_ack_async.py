"""A claim that fills what it asks for, and an acknowledgement without a WAL flush.

``birddog.claim`` (revision 0012's) runs up to five passes over the queue heads, but ended
after the first pass that took anything: a claim for 4 whose first pass took 3 (the
fourth head held by another transaction) returned 3 while other queues had free heads.
A short answer therefore did not mean "nothing more to take", and a worker had to claim
again at once after every claim that took something (two statements per job with one
asker). Now the passes go on until ``p_limit`` jobs are taken or no candidate is left,
each pass asking only for what is still missing; a claim that took fewer than it asked
for found nothing more it could take (with ``queue_concurrency`` above 1, a queue it took
from may hold a next job for a next statement). The extra pass is one index scan of
``birddog.queue_heads`` inside the call, no round trip.

``birddog.ack`` (mark mailbox replies read) commits without waiting for the WAL flush:
``PERFORM set_config('synchronous_commit', 'off', true)`` in its body, which lasts until
the caller's transaction ends (a ``SET`` clause on the function would be undone when the
function returns, before the commit). Why that is safe: an acknowledgement lost in a
server crash leaves the reply listed as unread, which is what happens today when a
reader dies between reading and acknowledging (``Asking`` and the MCP tools already
treat an ack that did not happen as harmless); the reply itself was stored by the
daemon's flushed commit. Ordering holds: any later commit that waits for the flush
writes all earlier WAL, this transaction's included, so an acknowledgement is never
durable after something that came after it. The caller's whole transaction commits
that way, so ``ack`` is only ever called alone (``PostgresMailbox.ack``).

Not done here, and why: ``birddog.claim`` keeps its flush. A worker starts the handler
as soon as the claim answers; a claim lost in a server crash would put the job back in
its queue while its first turn still runs (the heartbeat notices only at its next beat,
up to a third of the lease later), so a second worker could start a second turn of the
same session, and a job without a recovery budget could run twice. Both are guarantees
(one turn per session; no rerun without a budget) that a flushed claim keeps. The same
holds for the daemon's outbox claims: a lost lease after a short crash turns an accepted
post into a duplicate, which the fault run rules out (every duplicate was still claimed
right after the crash).

Grants are kept: ``CREATE OR REPLACE`` keeps the functions' owner, ``SECURITY DEFINER``,
pinned ``search_path`` and ``EXECUTE`` grants.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CLAIM = """
CREATE OR REPLACE FUNCTION birddog.claim(
    p_queues text[], p_limit integer, p_lease_until timestamptz, p_worker_id text,
    p_slots integer, p_started_at timestamptz, p_reserved_prefix text,
    p_agents text[] DEFAULT NULL
)
RETURNS TABLE (
    job_id text, queue text, lane text, priority smallint, state text, payload text,
    recovery text, outcome text, claim_token uuid, lease_expires_at timestamptz,
    recovery_count integer, cancel_requested_at timestamptz, cancel_content text,
    created_at timestamptz, traceparent text, not_before timestamptz, expires_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
    v_every boolean := p_queues IS NULL AND p_agents IS NULL;
    v_queues text[];
    v_tried text[] := '{}';
    v_taken integer;
    v_total integer := 0;
BEGIN
    -- The head of each queue (priority, age, id) that may be claimed at p_started_at (its
    -- not-before passed, not expired) with a free slot: of every queue but the reserved
    -- ones, or of the queues p_queues names and the sessions of the agents p_agents names.
    -- An agent's login claims only its own jobs, from the sessions or agent it names.
    IF v_agent IS NOT NULL AND p_queues IS NULL
       AND (p_agents IS NULL OR EXISTS (
           SELECT 1 FROM unnest(p_agents) AS a(agent) WHERE a.agent IS DISTINCT FROM v_agent
       )) THEN
        RAISE EXCEPTION 'an agent claims from the sessions it names, or as itself, only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A few passes: a candidate whose head cannot be taken (another transaction holds it, a
    -- head row out of date) is refreshed and left out of the next pass.
    -- The passes go on until p_limit jobs are taken or no candidate is left, so a
    -- claim that takes fewer than it asks for found no other queue to take from.
    FOR v_pass IN 1..5 LOOP
        -- The candidates, locked (SKIP LOCKED: a claimer never waits, and one queue's
        -- candidates are never two claimers' at once), in head order.
        IF v_every THEN
            v_queues := ARRAY(
                SELECT h.queue FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots AND NOT starts_with(h.queue, p_reserved_prefix)
                  AND NOT (h.queue = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        ELSE
            v_queues := ARRAY(
                SELECT h.queue FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots
                  AND (h.queue = ANY(p_queues)
                       OR (h.agent_id = ANY(p_agents)
                           AND NOT starts_with(h.queue, p_reserved_prefix)))
                  AND NOT (h.queue = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        END IF;
        EXIT WHEN cardinality(v_queues) = 0;
        v_tried := v_tried || v_queues;
        RETURN QUERY
        WITH picked AS (
            -- Each candidate's first job that may be claimed now, read from the jobs: a head
            -- another transaction holds is skipped, never the job behind it taken instead.
            SELECT j.job_id, j.queue
            FROM unnest(v_queues) WITH ORDINALITY AS c(queue, n)
            CROSS JOIN LATERAL (
                SELECT q.job_id FROM birddog.jobs q
                WHERE q.state = 'queued' AND q.queue = c.queue
                  AND (q.not_before IS NULL OR q.not_before <= p_started_at)
                  AND (q.expires_at IS NULL OR q.expires_at > p_started_at)
                ORDER BY q.priority DESC, q.created_at, q.job_id
                LIMIT 1
            ) head
            JOIN birddog.jobs j ON j.job_id = head.job_id
            WHERE j.state = 'queued'
              AND (p_agents IS NULL OR j.queue = ANY(p_queues) OR j.agent_id = ANY(p_agents))
              AND (v_agent IS NULL OR j.agent_id = v_agent)
            ORDER BY c.n
            FOR UPDATE OF j SKIP LOCKED
        ),
        slotted AS (
            -- The lowest free slot, counted from the running jobs themselves (none free:
            -- the queue is busy, whatever its head row says).
            SELECT p.job_id, (
                SELECT min(s.slot) FROM generate_series(0, p_slots - 1) AS s(slot)
                WHERE NOT EXISTS (
                    SELECT 1 FROM birddog.jobs r
                    WHERE r.queue = p.queue AND r.state = 'running' AND r.slot = s.slot
                )
            ) AS slot
            FROM picked p
        )
        UPDATE birddog.jobs j
        SET state = 'running', slot = s.slot, claim_token = gen_random_uuid(),
            lease_expires_at = p_lease_until, worker_id = p_worker_id,
            started_at = p_started_at, updated_at = now()
        FROM slotted s
        WHERE j.job_id = s.job_id AND s.slot IS NOT NULL
        RETURNING
            j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
            j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
            j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent, j.not_before,
            j.expires_at;
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        PERFORM birddog._queue_heads_refresh(v_queues);
        v_total := v_total + v_taken;
        EXIT WHEN v_total >= p_limit;
    END LOOP;
END
$fn$"""
"""Revision 0012's ``birddog.claim`` with passes that go on until ``p_limit`` jobs are taken."""

ACK = """
CREATE OR REPLACE FUNCTION birddog.ack(p_keys text[], p_read_at timestamptz)
RETURNS TABLE (key text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    -- Lost in a server crash, an acknowledgement leaves the reply unread (revision
    -- 0017): no WAL flush for it, until the caller's transaction ends.
    PERFORM set_config('synchronous_commit', 'off', true);
    -- Mark mailbox replies read; returns the keys that were unread. Only rows the caller
    -- may read (mailbox_visible): an agent's login acknowledges its own mailbox only.
    RETURN QUERY
    UPDATE birddog.mailbox m
    SET read_at = p_read_at
    WHERE m.key = ANY(p_keys) AND m.read_at IS NULL
      AND birddog.mailbox_visible(m.agent_id, m.in_reply_to)
    RETURNING m.key;
END
$fn$"""
"""Revision 0007's ``birddog.ack`` without a WAL flush."""

PREVIOUS_CLAIM = """
CREATE OR REPLACE FUNCTION birddog.claim(
    p_queues text[], p_limit integer, p_lease_until timestamptz, p_worker_id text,
    p_slots integer, p_started_at timestamptz, p_reserved_prefix text,
    p_agents text[] DEFAULT NULL
)
RETURNS TABLE (
    job_id text, queue text, lane text, priority smallint, state text, payload text,
    recovery text, outcome text, claim_token uuid, lease_expires_at timestamptz,
    recovery_count integer, cancel_requested_at timestamptz, cancel_content text,
    created_at timestamptz, traceparent text, not_before timestamptz, expires_at timestamptz
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
    v_every boolean := p_queues IS NULL AND p_agents IS NULL;
    v_queues text[];
    v_tried text[] := '{}';
    v_taken integer;
BEGIN
    -- The head of each queue (priority, age, id) that may be claimed at p_started_at (its
    -- not-before passed, not expired) with a free slot: of every queue but the reserved
    -- ones, or of the queues p_queues names and the sessions of the agents p_agents names.
    -- An agent's login claims only its own jobs, from the sessions or agent it names.
    IF v_agent IS NOT NULL AND p_queues IS NULL
       AND (p_agents IS NULL OR EXISTS (
           SELECT 1 FROM unnest(p_agents) AS a(agent) WHERE a.agent IS DISTINCT FROM v_agent
       )) THEN
        RAISE EXCEPTION 'an agent claims from the sessions it names, or as itself, only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A few passes: a candidate whose head cannot be taken (another transaction holds it, a
    -- head row out of date) is refreshed and left out of the next pass.
    FOR v_pass IN 1..5 LOOP
        -- The candidates, locked (SKIP LOCKED: a claimer never waits, and one queue's
        -- candidates are never two claimers' at once), in head order.
        IF v_every THEN
            v_queues := ARRAY(
                SELECT h.queue FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots AND NOT starts_with(h.queue, p_reserved_prefix)
                  AND NOT (h.queue = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED
            );
        ELSE
            v_queues := ARRAY(
                SELECT h.queue FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots
                  AND (h.queue = ANY(p_queues)
                       OR (h.agent_id = ANY(p_agents)
                           AND NOT starts_with(h.queue, p_reserved_prefix)))
                  AND NOT (h.queue = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED
            );
        END IF;
        EXIT WHEN cardinality(v_queues) = 0;
        v_tried := v_tried || v_queues;
        RETURN QUERY
        WITH picked AS (
            -- Each candidate's first job that may be claimed now, read from the jobs: a head
            -- another transaction holds is skipped, never the job behind it taken instead.
            SELECT j.job_id, j.queue
            FROM unnest(v_queues) WITH ORDINALITY AS c(queue, n)
            CROSS JOIN LATERAL (
                SELECT q.job_id FROM birddog.jobs q
                WHERE q.state = 'queued' AND q.queue = c.queue
                  AND (q.not_before IS NULL OR q.not_before <= p_started_at)
                  AND (q.expires_at IS NULL OR q.expires_at > p_started_at)
                ORDER BY q.priority DESC, q.created_at, q.job_id
                LIMIT 1
            ) head
            JOIN birddog.jobs j ON j.job_id = head.job_id
            WHERE j.state = 'queued'
              AND (p_agents IS NULL OR j.queue = ANY(p_queues) OR j.agent_id = ANY(p_agents))
              AND (v_agent IS NULL OR j.agent_id = v_agent)
            ORDER BY c.n
            FOR UPDATE OF j SKIP LOCKED
        ),
        slotted AS (
            -- The lowest free slot, counted from the running jobs themselves (none free:
            -- the queue is busy, whatever its head row says).
            SELECT p.job_id, (
                SELECT min(s.slot) FROM generate_series(0, p_slots - 1) AS s(slot)
                WHERE NOT EXISTS (
                    SELECT 1 FROM birddog.jobs r
                    WHERE r.queue = p.queue AND r.state = 'running' AND r.slot = s.slot
                )
            ) AS slot
            FROM picked p
        )
        UPDATE birddog.jobs j
        SET state = 'running', slot = s.slot, claim_token = gen_random_uuid(),
            lease_expires_at = p_lease_until, worker_id = p_worker_id,
            started_at = p_started_at, updated_at = now()
        FROM slotted s
        WHERE j.job_id = s.job_id AND s.slot IS NOT NULL
        RETURNING
            j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
            j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
            j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent, j.not_before,
            j.expires_at;
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        PERFORM birddog._queue_heads_refresh(v_queues);
        EXIT WHEN v_taken > 0;
    END LOOP;
END
$fn$"""
"""Revision 0012's ``birddog.claim``, as a downgrade restores it."""

PREVIOUS_ACK = """
CREATE OR REPLACE FUNCTION birddog.ack(p_keys text[], p_read_at timestamptz)
RETURNS TABLE (key text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    -- Mark mailbox replies read; returns the keys that were unread. Only rows the caller
    -- may read (mailbox_visible): an agent's login acknowledges its own mailbox only.
    RETURN QUERY
    UPDATE birddog.mailbox m
    SET read_at = p_read_at
    WHERE m.key = ANY(p_keys) AND m.read_at IS NULL
      AND birddog.mailbox_visible(m.agent_id, m.in_reply_to)
    RETURNING m.key;
END
$fn$"""
"""Revision 0007's ``birddog.ack``, as a downgrade restores it."""


def upgrade() -> None:
    op.execute(CLAIM)
    op.execute(ACK)


def downgrade() -> None:
    op.execute(PREVIOUS_CLAIM)
    op.execute(PREVIOUS_ACK)
