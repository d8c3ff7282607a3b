"""Mail keys name one job; replays and limits tell a caller nothing it may not read.

- ``jobs_mail_key_idx`` becomes unique: no two jobs carry the same mail key, so a reply's
  visibility and acknowledgement (``birddog.mailbox_visible``, by ``in_reply_to``) follow
  the job that produced it. ``birddog.enqueue`` meets a key another job carries with
  ``differing = {mail.key}`` (nothing of that job). The upgrade stops, naming the count,
  when jobs already share a key (prune or delete them first).
- ``birddog.enqueue``'s replay answer for a job the caller may not read
  (``birddog.job_visible``) is ``differing = {job_id}``: the id is taken, no field, no
  queue, no state.
- ``birddog.limits`` (new, one row, changed by the owner only): the server's bounds on
  every login but the operators' (``birddog._limits``: superusers, the owner, the daemon).
  ``birddog.enqueue`` (and so ``send_mail``) refuses mail content above
  ``max_content_bytes`` (1 MiB), a payload a quarter MiB beyond it and more than
  ``max_reply_to`` (100) reply addresses, and clamps priority to +/- ``max_priority`` (100)
  and ``created_at`` to the last ``max_age_s`` (five minutes: clock skew), never the future; ``claim`` and
  ``heartbeat`` clamp a lease to ``max_lease_s`` (an hour) from now; ``settle`` takes the
  smaller of the caller's and the server's content limit (a result above it settles
  failed, saying why) and bounds its diagnostics to 200 characters; ``a2a_cancel`` takes the
  smaller content limit too. Every signature stays.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._limits (new), birddog.a2a_cancel (changed), birddog.claim (changed), birddog.enqueue
(changed), birddog.heartbeat (changed), birddog.mailbox_visible (changed),
birddog.settle (changed).

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | Sequence[str] | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

LIMITS = r"""CREATE OR REPLACE FUNCTION birddog._limits(OUT bound boolean, OUT max_content_bytes integer, OUT max_lease_s double precision, OUT max_priority smallint, OUT max_reply_to integer, OUT max_age_s double precision)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- The server's bounds on the caller of a write function: birddog.limits (its one row,
    -- which only the owner changes), or none (bound false, every limit NULL) for an
    -- operator (birddog._sees_everything: superusers, the owner and the daemon, and every
    -- login while the roles are not installed), which may write the rows directly anyway.
    -- A NULL limit bounds nothing: least() and greatest() pass over it.
    bound := NOT birddog._sees_everything();
    IF NOT bound THEN
        RETURN;
    END IF;
    SELECT l.max_content_bytes, l.max_lease_s, l.max_priority, l.max_reply_to, l.max_age_s
    INTO max_content_bytes, max_lease_s, max_priority, max_reply_to, max_age_s
    FROM birddog.limits l;
    IF NOT FOUND THEN
        -- The defaults of revision 0031, should the row be deleted.
        max_content_bytes := 1048576;
        max_lease_s := 3600;
        max_priority := 100;
        max_reply_to := 100;
        max_age_s := 300;
    END IF;
END
$function$
"""
"""``birddog._limits(OUT bound boolean, OUT max_content_bytes integer, OUT max_lease_s double precision, OUT max_priority smallint, OUT max_reply_to integer, OUT max_age_s double precision)`` as this revision installs it."""

A2A_CANCEL = r"""CREATE OR REPLACE FUNCTION birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, keys text[], unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_agent text := birddog._caller_agent();
BEGIN
    -- An A2A caller's CancelTask: birddog.cancel (cancel-wins, now by the server's clock)
    -- on a job whose mail is from p_caller_agent (the caller's token names it: the HTTP
    -- layer checked it) and that this login may read; any other job is 'missing' (its
    -- existence stays unknown). An agent's login cancels its own agent's mail only.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND
       OR NOT birddog.job_visible(v_job.sent_by, v_job.payload)
       OR p_caller_agent IS NULL
       OR (v_job.payload #>> '{mail,from,agentId}') IS DISTINCT FROM p_caller_agent
       OR (v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_caller_agent) THEN
        decision := 'missing';
        RETURN NEXT;
        RETURN;
    END IF;
    -- The content limit: the caller's, never above the server's (birddog._limits).
    RETURN QUERY
    SELECT c.decision, c.outcome, c.keys, c.unreadable
    FROM birddog.cancel(
        p_job_id, p_content, now(),
        least(p_max_content_bytes, (SELECT l.max_content_bytes FROM birddog._limits() l)),
        p_wake
    ) AS c;
END
$function$
"""
"""``birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)`` as this revision installs it."""

PREVIOUS_A2A_CANCEL = r"""CREATE OR REPLACE FUNCTION birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, keys text[], unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_agent text := birddog._caller_agent();
BEGIN
    -- An A2A caller's CancelTask: birddog.cancel (cancel-wins, now by the server's clock)
    -- on a job whose mail is from p_caller_agent (the caller's token names it: the HTTP
    -- layer checked it) and that this login may read; any other job is 'missing' (its
    -- existence stays unknown). An agent's login cancels its own agent's mail only.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND
       OR NOT birddog.job_visible(v_job.sent_by, v_job.payload)
       OR p_caller_agent IS NULL
       OR (v_job.payload #>> '{mail,from,agentId}') IS DISTINCT FROM p_caller_agent
       OR (v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_caller_agent) THEN
        decision := 'missing';
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT c.decision, c.outcome, c.keys, c.unreadable
    FROM birddog.cancel(p_job_id, p_content, now(), p_max_content_bytes, p_wake) AS c;
END
$function$
"""
"""``birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)`` as revision 0030 left it, as the downgrade restores it."""


CLAIM = r"""CREATE OR REPLACE FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[] DEFAULT NULL::text[], p_batch integer DEFAULT 1)
 RETURNS TABLE(job_id text, queue text, lane text, priority smallint, state text, payload text, recovery text, outcome text, claim_token uuid, lease_expires_at timestamp with time zone, recovery_count integer, cancel_requested_at timestamp with time zone, cancel_content text, created_at timestamp with time zone, traceparent text, not_before timestamp with time zone, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
    v_every boolean := p_queues IS NULL AND p_agents IS NULL;
    -- Queues by key (birddog.jobs.queue_key): agent, unit separator, session.
    v_queues text[];
    v_tried text[] := '{}';
    v_taken integer;
    v_total integer := 0;
    v_leads text[];
    v_followers text[];
    -- The lease a claim may take: the caller's, up to the server's max_lease_s from now
    -- (birddog._limits; none for an operator).
    v_lease_until timestamptz := least(
        p_lease_until,
        clock_timestamp() + make_interval(secs => (SELECT l.max_lease_s FROM birddog._limits() l))
    );
BEGIN
    -- The head of each queue (priority, age, id) that may be claimed at p_started_at (its
    -- not-before passed, not expired) with a free slot: of every queue but the reserved
    -- ones, or of the queues p_queues names and the sessions of the agents p_agents names.
    -- An agent's login claims only its own jobs, from the sessions or agent it names.
    -- A queue a live session serves is left to it for a grace (birddog._live_hold).
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
                SELECT h.queue_key FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots AND NOT starts_with(h.queue, p_reserved_prefix)
                  AND NOT (h.queue_key = ANY(v_tried))
                  AND NOT birddog._live_hold(h.queue_key, h.created_at, p_worker_id, p_started_at)
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        ELSE
            v_queues := ARRAY(
                SELECT h.queue_key FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots
                  AND (h.queue = ANY(p_queues)
                       OR (h.agent_id = ANY(p_agents)
                           AND NOT starts_with(h.queue, p_reserved_prefix)))
                  AND (v_agent IS NULL OR h.agent_id = v_agent)
                  AND NOT (h.queue_key = ANY(v_tried))
                  AND NOT birddog._live_hold(h.queue_key, h.created_at, p_worker_id, p_started_at)
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        END IF;
        EXIT WHEN cardinality(v_queues) = 0;
        v_tried := v_tried || v_queues;
        WITH picked AS (
            -- Each candidate's first job that may be claimed now, read from the jobs: a head
            -- another transaction holds is skipped, never the job behind it taken instead.
            SELECT j.job_id, j.queue_key
            FROM unnest(v_queues) WITH ORDINALITY AS c(queue_key, n)
            CROSS JOIN LATERAL (
                SELECT q.job_id FROM birddog.jobs q
                WHERE q.state = 'queued' AND q.queue_key = c.queue_key
                  AND (q.not_before IS NULL OR q.not_before <= p_started_at)
                  AND (q.expires_at IS NULL OR q.expires_at > p_started_at)
                ORDER BY q.priority DESC, q.created_at, q.job_id
                LIMIT 1
            ) head
            JOIN birddog.jobs j ON j.job_id = head.job_id
            WHERE j.state = 'queued'
              AND (p_agents IS NULL OR j.queue = ANY(p_queues) OR j.agent_id = ANY(p_agents))
              AND (v_agent IS NULL OR j.agent_id = v_agent)
              AND NOT birddog._live_hold(j.queue_key, j.created_at, p_worker_id, p_started_at)
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
                    WHERE r.queue_key = p.queue_key AND r.state = 'running' AND r.slot = s.slot
                )
            ) AS slot
            FROM picked p
        )
        , taken AS (
            UPDATE birddog.jobs j
            SET state = 'running', slot = s.slot, claim_token = gen_random_uuid(),
                lease_expires_at = v_lease_until, worker_id = p_worker_id,
                started_at = p_started_at, updated_at = now()
            FROM slotted s
            WHERE j.job_id = s.job_id AND s.slot IS NOT NULL
            RETURNING j.job_id
        )
        SELECT coalesce(array_agg(t.job_id), '{}') INTO v_leads FROM taken t;
        v_taken := cardinality(v_leads);
        v_followers := '{}';
        IF p_batch > 1 AND v_taken > 0 THEN
            -- A batched turn: behind each head taken, up to p_batch - 1 more jobs of its
            -- queue that may be claimed now, in claim order, running with no slot of their
            -- own (the head's slot is the turn's: the worker settles the head last).
            WITH behind AS (
                SELECT q.job_id
                FROM birddog.jobs l
                CROSS JOIN LATERAL (
                    SELECT f.job_id FROM birddog.jobs f
                    WHERE f.state = 'queued' AND f.queue_key = l.queue_key
                      AND (f.not_before IS NULL OR f.not_before <= p_started_at)
                      AND (f.expires_at IS NULL OR f.expires_at > p_started_at)
                      AND (p_agents IS NULL OR f.queue = ANY(p_queues)
                           OR f.agent_id = ANY(p_agents))
                      AND (v_agent IS NULL OR f.agent_id = v_agent)
                      AND NOT birddog._live_hold(f.queue_key, f.created_at, p_worker_id,
                                                 p_started_at)
                    ORDER BY f.priority DESC, f.created_at, f.job_id
                    LIMIT p_batch - 1
                ) q
                WHERE l.job_id = ANY(v_leads)
            ), locked AS (
                SELECT j.job_id FROM birddog.jobs j
                WHERE j.job_id IN (SELECT b.job_id FROM behind b) AND j.state = 'queued'
                FOR UPDATE OF j SKIP LOCKED
            ), followed AS (
                UPDATE birddog.jobs j
                SET state = 'running', slot = NULL, claim_token = gen_random_uuid(),
                    lease_expires_at = v_lease_until, worker_id = p_worker_id,
                    started_at = p_started_at, updated_at = now()
                FROM locked k
                WHERE j.job_id = k.job_id
                RETURNING j.job_id
            )
            SELECT coalesce(array_agg(f.job_id), '{}') INTO v_followers FROM followed f;
        END IF;
        RETURN QUERY
        SELECT
            j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
            j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
            j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent, j.not_before,
            j.expires_at
        FROM birddog.jobs j
        WHERE j.job_id = ANY(v_leads || v_followers)
        ORDER BY j.queue_key, j.slot NULLS LAST, j.priority DESC, j.created_at, j.job_id;
        PERFORM birddog._queue_heads_refresh(v_queues);
        v_total := v_total + v_taken;
        EXIT WHEN v_total >= p_limit;
    END LOOP;
END
$function$
"""
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[], p_batch integer)`` as this revision installs it."""

PREVIOUS_CLAIM = r"""CREATE OR REPLACE FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[] DEFAULT NULL::text[], p_batch integer DEFAULT 1)
 RETURNS TABLE(job_id text, queue text, lane text, priority smallint, state text, payload text, recovery text, outcome text, claim_token uuid, lease_expires_at timestamp with time zone, recovery_count integer, cancel_requested_at timestamp with time zone, cancel_content text, created_at timestamp with time zone, traceparent text, not_before timestamp with time zone, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
    v_every boolean := p_queues IS NULL AND p_agents IS NULL;
    -- Queues by key (birddog.jobs.queue_key): agent, unit separator, session.
    v_queues text[];
    v_tried text[] := '{}';
    v_taken integer;
    v_total integer := 0;
    v_leads text[];
    v_followers text[];
BEGIN
    -- The head of each queue (priority, age, id) that may be claimed at p_started_at (its
    -- not-before passed, not expired) with a free slot: of every queue but the reserved
    -- ones, or of the queues p_queues names and the sessions of the agents p_agents names.
    -- An agent's login claims only its own jobs, from the sessions or agent it names.
    -- A queue a live session serves is left to it for a grace (birddog._live_hold).
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
                SELECT h.queue_key FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots AND NOT starts_with(h.queue, p_reserved_prefix)
                  AND NOT (h.queue_key = ANY(v_tried))
                  AND NOT birddog._live_hold(h.queue_key, h.created_at, p_worker_id, p_started_at)
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        ELSE
            v_queues := ARRAY(
                SELECT h.queue_key FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots
                  AND (h.queue = ANY(p_queues)
                       OR (h.agent_id = ANY(p_agents)
                           AND NOT starts_with(h.queue, p_reserved_prefix)))
                  AND (v_agent IS NULL OR h.agent_id = v_agent)
                  AND NOT (h.queue_key = ANY(v_tried))
                  AND NOT birddog._live_hold(h.queue_key, h.created_at, p_worker_id, p_started_at)
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        END IF;
        EXIT WHEN cardinality(v_queues) = 0;
        v_tried := v_tried || v_queues;
        WITH picked AS (
            -- Each candidate's first job that may be claimed now, read from the jobs: a head
            -- another transaction holds is skipped, never the job behind it taken instead.
            SELECT j.job_id, j.queue_key
            FROM unnest(v_queues) WITH ORDINALITY AS c(queue_key, n)
            CROSS JOIN LATERAL (
                SELECT q.job_id FROM birddog.jobs q
                WHERE q.state = 'queued' AND q.queue_key = c.queue_key
                  AND (q.not_before IS NULL OR q.not_before <= p_started_at)
                  AND (q.expires_at IS NULL OR q.expires_at > p_started_at)
                ORDER BY q.priority DESC, q.created_at, q.job_id
                LIMIT 1
            ) head
            JOIN birddog.jobs j ON j.job_id = head.job_id
            WHERE j.state = 'queued'
              AND (p_agents IS NULL OR j.queue = ANY(p_queues) OR j.agent_id = ANY(p_agents))
              AND (v_agent IS NULL OR j.agent_id = v_agent)
              AND NOT birddog._live_hold(j.queue_key, j.created_at, p_worker_id, p_started_at)
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
                    WHERE r.queue_key = p.queue_key AND r.state = 'running' AND r.slot = s.slot
                )
            ) AS slot
            FROM picked p
        )
        , taken AS (
            UPDATE birddog.jobs j
            SET state = 'running', slot = s.slot, claim_token = gen_random_uuid(),
                lease_expires_at = p_lease_until, worker_id = p_worker_id,
                started_at = p_started_at, updated_at = now()
            FROM slotted s
            WHERE j.job_id = s.job_id AND s.slot IS NOT NULL
            RETURNING j.job_id
        )
        SELECT coalesce(array_agg(t.job_id), '{}') INTO v_leads FROM taken t;
        v_taken := cardinality(v_leads);
        v_followers := '{}';
        IF p_batch > 1 AND v_taken > 0 THEN
            -- A batched turn: behind each head taken, up to p_batch - 1 more jobs of its
            -- queue that may be claimed now, in claim order, running with no slot of their
            -- own (the head's slot is the turn's: the worker settles the head last).
            WITH behind AS (
                SELECT q.job_id
                FROM birddog.jobs l
                CROSS JOIN LATERAL (
                    SELECT f.job_id FROM birddog.jobs f
                    WHERE f.state = 'queued' AND f.queue_key = l.queue_key
                      AND (f.not_before IS NULL OR f.not_before <= p_started_at)
                      AND (f.expires_at IS NULL OR f.expires_at > p_started_at)
                      AND (p_agents IS NULL OR f.queue = ANY(p_queues)
                           OR f.agent_id = ANY(p_agents))
                      AND (v_agent IS NULL OR f.agent_id = v_agent)
                      AND NOT birddog._live_hold(f.queue_key, f.created_at, p_worker_id,
                                                 p_started_at)
                    ORDER BY f.priority DESC, f.created_at, f.job_id
                    LIMIT p_batch - 1
                ) q
                WHERE l.job_id = ANY(v_leads)
            ), locked AS (
                SELECT j.job_id FROM birddog.jobs j
                WHERE j.job_id IN (SELECT b.job_id FROM behind b) AND j.state = 'queued'
                FOR UPDATE OF j SKIP LOCKED
            ), followed AS (
                UPDATE birddog.jobs j
                SET state = 'running', slot = NULL, claim_token = gen_random_uuid(),
                    lease_expires_at = p_lease_until, worker_id = p_worker_id,
                    started_at = p_started_at, updated_at = now()
                FROM locked k
                WHERE j.job_id = k.job_id
                RETURNING j.job_id
            )
            SELECT coalesce(array_agg(f.job_id), '{}') INTO v_followers FROM followed f;
        END IF;
        RETURN QUERY
        SELECT
            j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
            j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
            j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent, j.not_before,
            j.expires_at
        FROM birddog.jobs j
        WHERE j.job_id = ANY(v_leads || v_followers)
        ORDER BY j.queue_key, j.slot NULLS LAST, j.priority DESC, j.created_at, j.job_id;
        PERFORM birddog._queue_heads_refresh(v_queues);
        v_total := v_total + v_taken;
        EXIT WHEN v_total >= p_limit;
    END LOOP;
END
$function$
"""
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[], p_batch integer)`` as revision 0030 left it, as the downgrade restores it."""

ENQUEUE = r"""CREATE OR REPLACE FUNCTION birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_in_s double precision DEFAULT NULL::double precision)
 RETURNS TABLE(inserted boolean, differing text[], mailbox_added boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_payload jsonb := p_payload::jsonb;
    v_recovery jsonb := p_recovery::jsonb;
    v_stored birddog.jobs%ROWTYPE;
    v_from text;
    v_agent text := birddog._caller_agent();
    v_limits record;
    v_priority smallint := p_priority;
    v_created timestamptz := coalesce(p_created_at, clock_timestamp());
    v_reply_to jsonb;
    v_expires interval := make_interval(secs => p_expires_in_s);
    v_to text;
    v_queue_key text;
BEGIN
    -- An agent's login sends as itself only: the mail's from is its agent.
    IF v_agent IS NOT NULL
       AND (birddog._field(v_payload -> 'mail', 'from', 'from_') ->> 'agentId')
           IS DISTINCT FROM v_agent
    THEN
        RAISE EXCEPTION 'an agent enqueues mail from itself only (from.agentId %)', v_agent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_expires_in_s IS NOT NULL AND NOT p_expires_in_s > 0 THEN
        RAISE EXCEPTION 'a job expires a positive number of seconds after it is enqueued'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The server's limits (birddog._limits), never the caller's own: sizes and the replyTo
    -- count refused, priority and age clamped (a bound caller's job is never older than
    -- max_age_s, nor newer than now, nor above max_priority either way).
    SELECT * INTO v_limits FROM birddog._limits();
    IF v_limits.bound THEN
        IF greatest(char_length(p_job_id), char_length(p_queue), char_length(p_lane)) > 256
           OR octet_length(p_recovery) > 4096 OR octet_length(p_traceparent) > 512 THEN
            RAISE EXCEPTION 'a job id, queue and lane are at most 256 characters, its recovery and traceparent a few'
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        IF octet_length(v_payload #>> '{mail,content}') > v_limits.max_content_bytes THEN
            RAISE EXCEPTION 'the mail content is %; the server''s limit is %',
                birddog._format_bytes(octet_length(v_payload #>> '{mail,content}')),
                birddog._format_bytes(v_limits.max_content_bytes)
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        -- Beside the content: addresses, key and ids, a quarter of a MiB at the most.
        IF octet_length(p_payload) > v_limits.max_content_bytes::bigint + 262144 THEN
            RAISE EXCEPTION 'the job payload is %; the server''s limit is % beside the content',
                birddog._format_bytes(octet_length(p_payload)), birddog._format_bytes(262144)
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        v_reply_to := birddog._field(v_payload -> 'mail', 'replyTo', 'reply_to');
        IF jsonb_typeof(v_reply_to) = 'array'
           AND jsonb_array_length(v_reply_to) > v_limits.max_reply_to THEN
            RAISE EXCEPTION 'the mail has % replyTo addresses; the server''s limit is %',
                jsonb_array_length(v_reply_to), v_limits.max_reply_to
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        v_priority := greatest(-v_limits.max_priority, least(v_limits.max_priority, p_priority));
        v_created := least(
            greatest(v_created, clock_timestamp() - make_interval(secs => v_limits.max_age_s)),
            clock_timestamp()
        );
    END IF;
    -- The agent the mail is addressed to (NULL: no mail, or not BirdDog's).
    v_to := birddog._address(v_payload -> 'mail' -> 'to') ->> 'agentId';
    -- A queued job, nothing else: state, lease and claim are not the caller's to give. The
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent. A mail's
    -- kind is the payload's (a task when it names none: the TypeScript BirdDog's mail); a
    -- job that is not BirdDog mail is a task, whatever its own payload calls a kind.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at, kind
    )
    VALUES (
        p_job_id, p_queue, p_lane, v_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before, v_created + v_expires,
        CASE WHEN v_to IS NULL THEN 'task' ELSE coalesce(v_payload ->> 'kind', 'task') END
    )
    -- Any unique conflict: the job id taken, or the mail key another job's (a mail key
    -- names one job: its replies, their visibility and acknowledgement follow that job).
    ON CONFLICT DO NOTHING
    RETURNING j.queue_key INTO v_queue_key;
    IF FOUND THEN
        -- Its queue's head: this job, when it comes first (or the queue had none queued);
        -- the queue due as soon as this job may be claimed, if sooner. The upsert works on
        -- the row's latest version, whoever changed it last.
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        VALUES (
            v_queue_key, p_queue, v_to, v_priority, v_created, p_job_id,
            p_not_before, 0
        )
        ON CONFLICT (queue_key) DO UPDATE
        SET agent_id = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                 excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                            THEN excluded.agent_id ELSE h.agent_id END,
            priority = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                 excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                            THEN excluded.priority ELSE h.priority END,
            created_at = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                   excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                              THEN excluded.created_at ELSE h.created_at END,
            job_id = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                               excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                          THEN excluded.job_id ELSE h.job_id END,
            due_at = CASE WHEN h.job_id IS NULL THEN excluded.due_at
                          WHEN h.due_at IS NULL OR excluded.due_at IS NULL THEN NULL
                          ELSE least(h.due_at, excluded.due_at) END;
        PERFORM pg_notify('birddog_jobs', p_queue);
        mailbox_added := false;
        IF p_sender_mailbox THEN
            -- The asker's own mailbox: only the sender of the mail just enqueued, and only
            -- when it has no route (no URL, no secret: the routes check admits no other).
            v_from := birddog._field(v_payload -> 'mail', 'from', 'from_') ->> 'agentId';
            IF v_from IS NULL THEN
                RAISE EXCEPTION 'a mailbox route is given only to the sender of mail'
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            INSERT INTO birddog.routes AS r (agent_id, kind, enabled)
            VALUES (v_from, 'mailbox', true)
            ON CONFLICT (agent_id) DO NOTHING;
            mailbox_added := FOUND;
        END IF;
        inserted := true;
        differing := '{}';
        RETURN NEXT;
        RETURN;
    END IF;
    -- A replay: accepted only when every field matches the stored job.
    inserted := false;
    mailbox_added := false;
    SELECT * INTO v_stored FROM birddog.jobs j WHERE j.job_id = p_job_id;
    IF NOT FOUND THEN
        -- No job has this id: the mail key is another job's ('mail.key', and nothing of
        -- that job), or the conflicting job is gone or not in this snapshot (NULL).
        differing := CASE WHEN EXISTS (
            SELECT 1 FROM birddog.jobs j
            WHERE (j.payload #>> '{mail,key}') = (v_payload #>> '{mail,key}')
        ) THEN ARRAY['mail.key'] END;
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT birddog.job_visible(v_stored.sent_by, v_stored.payload) THEN
        -- A job the caller may not read: the id is taken ('job_id'), and nothing more (no
        -- field, no queue, no state).
        differing := ARRAY['job_id'];
        RETURN NEXT;
        RETURN;
    END IF;
    differing := array_remove(ARRAY[
        CASE WHEN v_stored.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN v_stored.lane IS DISTINCT FROM p_lane THEN 'lane' END,
        CASE WHEN v_stored.priority IS DISTINCT FROM v_priority THEN 'priority' END,
        CASE WHEN v_stored.payload IS DISTINCT FROM v_payload THEN 'payload' END,
        CASE WHEN v_stored.recovery IS DISTINCT FROM v_recovery THEN 'recovery' END,
        CASE WHEN v_stored.not_before IS DISTINCT FROM p_not_before THEN 'not_before' END,
        CASE WHEN (v_stored.expires_at - v_stored.created_at) IS DISTINCT FROM v_expires
             THEN 'expires_in_s' END
    ], NULL);
    RETURN NEXT;
END
$function$
"""
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as this revision installs it."""

PREVIOUS_ENQUEUE = r"""CREATE OR REPLACE FUNCTION birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_in_s double precision DEFAULT NULL::double precision)
 RETURNS TABLE(inserted boolean, differing text[], mailbox_added boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_payload jsonb := p_payload::jsonb;
    v_recovery jsonb := p_recovery::jsonb;
    v_stored birddog.jobs%ROWTYPE;
    v_from text;
    v_agent text := birddog._caller_agent();
    v_created timestamptz := coalesce(p_created_at, clock_timestamp());
    v_expires interval := make_interval(secs => p_expires_in_s);
    v_to text;
    v_queue_key text;
BEGIN
    -- An agent's login sends as itself only: the mail's from is its agent.
    IF v_agent IS NOT NULL
       AND (birddog._field(v_payload -> 'mail', 'from', 'from_') ->> 'agentId')
           IS DISTINCT FROM v_agent
    THEN
        RAISE EXCEPTION 'an agent enqueues mail from itself only (from.agentId %)', v_agent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_expires_in_s IS NOT NULL AND NOT p_expires_in_s > 0 THEN
        RAISE EXCEPTION 'a job expires a positive number of seconds after it is enqueued'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The agent the mail is addressed to (NULL: no mail, or not BirdDog's).
    v_to := birddog._address(v_payload -> 'mail' -> 'to') ->> 'agentId';
    -- A queued job, nothing else: state, lease and claim are not the caller's to give. The
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent. A mail's
    -- kind is the payload's (a task when it names none: the TypeScript BirdDog's mail); a
    -- job that is not BirdDog mail is a task, whatever its own payload calls a kind.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at, kind
    )
    VALUES (
        p_job_id, p_queue, p_lane, p_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before, v_created + v_expires,
        CASE WHEN v_to IS NULL THEN 'task' ELSE coalesce(v_payload ->> 'kind', 'task') END
    )
    ON CONFLICT (job_id) DO NOTHING
    RETURNING j.queue_key INTO v_queue_key;
    IF FOUND THEN
        -- Its queue's head: this job, when it comes first (or the queue had none queued);
        -- the queue due as soon as this job may be claimed, if sooner. The upsert works on
        -- the row's latest version, whoever changed it last.
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        VALUES (
            v_queue_key, p_queue, v_to, p_priority, v_created, p_job_id,
            p_not_before, 0
        )
        ON CONFLICT (queue_key) DO UPDATE
        SET agent_id = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                 excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                            THEN excluded.agent_id ELSE h.agent_id END,
            priority = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                 excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                            THEN excluded.priority ELSE h.priority END,
            created_at = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                   excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                              THEN excluded.created_at ELSE h.created_at END,
            job_id = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                               excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                          THEN excluded.job_id ELSE h.job_id END,
            due_at = CASE WHEN h.job_id IS NULL THEN excluded.due_at
                          WHEN h.due_at IS NULL OR excluded.due_at IS NULL THEN NULL
                          ELSE least(h.due_at, excluded.due_at) END;
        PERFORM pg_notify('birddog_jobs', p_queue);
        mailbox_added := false;
        IF p_sender_mailbox THEN
            -- The asker's own mailbox: only the sender of the mail just enqueued, and only
            -- when it has no route (no URL, no secret: the routes check admits no other).
            v_from := birddog._field(v_payload -> 'mail', 'from', 'from_') ->> 'agentId';
            IF v_from IS NULL THEN
                RAISE EXCEPTION 'a mailbox route is given only to the sender of mail'
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            INSERT INTO birddog.routes AS r (agent_id, kind, enabled)
            VALUES (v_from, 'mailbox', true)
            ON CONFLICT (agent_id) DO NOTHING;
            mailbox_added := FOUND;
        END IF;
        inserted := true;
        differing := '{}';
        RETURN NEXT;
        RETURN;
    END IF;
    -- A replay: accepted only when every field matches the stored job.
    inserted := false;
    mailbox_added := false;
    SELECT * INTO v_stored FROM birddog.jobs j WHERE j.job_id = p_job_id;
    IF NOT FOUND THEN
        differing := NULL;  -- the conflicting job is gone, or not in this snapshot
        RETURN NEXT;
        RETURN;
    END IF;
    differing := array_remove(ARRAY[
        CASE WHEN v_stored.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN v_stored.lane IS DISTINCT FROM p_lane THEN 'lane' END,
        CASE WHEN v_stored.priority IS DISTINCT FROM p_priority THEN 'priority' END,
        CASE WHEN v_stored.payload IS DISTINCT FROM v_payload THEN 'payload' END,
        CASE WHEN v_stored.recovery IS DISTINCT FROM v_recovery THEN 'recovery' END,
        CASE WHEN v_stored.not_before IS DISTINCT FROM p_not_before THEN 'not_before' END,
        CASE WHEN (v_stored.expires_at - v_stored.created_at) IS DISTINCT FROM v_expires
             THEN 'expires_in_s' END
    ], NULL);
    RETURN NEXT;
END
$function$
"""
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as revision 0030 left it, as the downgrade restores it."""

HEARTBEAT = r"""CREATE OR REPLACE FUNCTION birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
DECLARE
    v_cancel boolean;
    v_agent text := birddog._caller_agent();
    v_max_lease_s double precision := (SELECT l.max_lease_s FROM birddog._limits() l);
BEGIN
    -- The lease of a job still running under this claim (an agent's own job, for an
    -- agent's login), up to the server's max_lease_s from now (birddog._limits);
    -- whether a cancellation was asked (NULL: the claim holds nothing).
    UPDATE birddog.jobs j
    SET lease_expires_at = least(p_lease_until,
                                 clock_timestamp() + make_interval(secs => v_max_lease_s)),
        updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_claim_token
      AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
    RETURNING j.cancel_requested_at IS NOT NULL INTO v_cancel;
    RETURN v_cancel;
END
$function$
"""
"""``birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)`` as this revision installs it."""

PREVIOUS_HEARTBEAT = r"""CREATE OR REPLACE FUNCTION birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
DECLARE
    v_cancel boolean;
    v_agent text := birddog._caller_agent();
BEGIN
    -- The lease of a job still running under this claim (an agent's own job, for an
    -- agent's login); whether a cancellation was asked
    -- (NULL: the claim holds nothing).
    UPDATE birddog.jobs j
    SET lease_expires_at = p_lease_until, updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_claim_token
      AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
    RETURNING j.cancel_requested_at IS NOT NULL INTO v_cancel;
    RETURN v_cancel;
END
$function$
"""
"""``birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)`` as revision 0030 left it, as the downgrade restores it."""

MAILBOX_VISIBLE = r"""CREATE OR REPLACE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text;
BEGIN
    -- Whether the caller may read (and acknowledge) a mailbox row of p_agent_id answering
    -- mail p_in_reply_to: an operator every row; an agent's login its own mailbox only; a
    -- sender's login the replies to the mail it sent (the ask it waits on), nothing else.
    -- A mail key is one job's (jobs_mail_key_idx is unique, and enqueue refuses a key
    -- another job carries), so a reply's visibility follows the job that produced it: a
    -- login cannot reuse another's key to read or acknowledge its replies.
    IF birddog._sees_everything() THEN
        RETURN true;
    END IF;
    v_agent := birddog._caller_agent();
    IF v_agent IS NOT NULL THEN
        RETURN p_agent_id = v_agent;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') = p_in_reply_to AND j.sent_by = session_user
    );
END
$function$
"""
"""``birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)`` as this revision installs it."""

PREVIOUS_MAILBOX_VISIBLE = r"""CREATE OR REPLACE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text;
BEGIN
    -- Whether the caller may read (and acknowledge) a mailbox row of p_agent_id answering
    -- mail p_in_reply_to: an operator every row; an agent's login its own mailbox only; a
    -- sender's login the replies to the mail it sent (the ask it waits on), nothing else.
    IF birddog._sees_everything() THEN
        RETURN true;
    END IF;
    v_agent := birddog._caller_agent();
    IF v_agent IS NOT NULL THEN
        RETURN p_agent_id = v_agent;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') = p_in_reply_to AND j.sent_by = session_user
    );
END
$function$
"""
"""``birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)`` as revision 0030 left it, as the downgrade restores it."""

SETTLE = r"""CREATE OR REPLACE FUNCTION birddog.settle(p_job_id text, p_claim_token uuid, p_event text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_cancel_diagnostic text, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, cause text, diagnostic text, content text, keys text[], unreadable text, reason text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_claim boolean;
    v_replay boolean;
    v_cancel record;
    v_done record;
    v_outcome text;
    v_content text;
    v_diagnostic text;
    v_reply_diagnostic text;
    v_agent text := birddog._caller_agent();
    -- The content limit: the caller's, never above the server's (birddog._limits).
    v_max_content_bytes integer := least(
        p_max_content_bytes, (SELECT l.max_content_bytes FROM birddog._limits() l)
    );
BEGIN
    -- Diagnostics are one bounded line (bounded_diagnostic: 200 characters), whoever calls.
    p_diagnostic := left(p_diagnostic, 200);
    p_reply_diagnostic := left(p_reply_diagnostic, 200);
    p_cancel_diagnostic := left(p_cancel_diagnostic, 200);
    -- What a worker reports about a job it holds (lifecycle.decide for a result, p_event
    -- 'result', or a stop, 'stop'), carried out in one call. The caller gives the texts
    -- Python makes: for a result, the settlement without a cancellation (p_outcome,
    -- p_content, p_diagnostic: a result that cannot be stored already made 'failed'); for
    -- a stop, the bounded diagnostic. p_reply_diagnostic is what a reply carries for it;
    -- p_cancel_diagnostic the bounded diagnostic a recorded cancellation settles with.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        decision := 'missing';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_agent IS NOT NULL AND (v_job.payload #>> '{mail,to,agentId}') IS DISTINCT FROM v_agent
    THEN
        decision := 'refuse';
        reason := 'the job is not addressed to this agent';
        RETURN NEXT;
        RETURN;
    END IF;
    v_claim := p_claim_token IS NOT NULL AND v_job.claim_token = p_claim_token;
    IF v_job.state = 'settled' THEN
        -- The same claim settling again is a replay of what is stored, not an error.
        IF p_event = 'result' THEN
            v_replay := v_claim AND v_job.outcome = coalesce(
                CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' END, p_outcome
            );
        ELSE
            v_replay := v_claim AND v_job.outcome IN ('interrupted', 'cancelled');
        END IF;
        IF coalesce(v_replay, false) THEN
            decision := 'keep';
            outcome := v_job.outcome;
            keys := '{}';
            RETURN NEXT;
            RETURN;
        END IF;
        decision := 'refuse';
        reason := 'the job is already settled ' || coalesce(v_job.outcome, 'with no outcome');
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_job.state <> 'running' OR NOT v_claim THEN
        decision := 'refuse';
        reason := 'the job is not running under this claim (it is ' || v_job.state || ')';
        RETURN NEXT;
        RETURN;
    END IF;
    decision := 'settle';
    IF v_job.cancel_requested_at IS NOT NULL THEN
        -- A recorded cancellation wins over whatever the worker reports.
        SELECT * INTO v_cancel FROM birddog._cancelled(
            coalesce(v_job.cancel_content, ''), p_cancel_diagnostic, v_max_content_bytes
        );
        v_outcome := 'cancelled';
        v_content := v_cancel.content;
        v_diagnostic := v_cancel.diagnostic;
        v_reply_diagnostic := NULL;
        cause := 'cancelled';
        content := v_cancel.content;
    ELSIF p_event = 'result' AND octet_length(p_content) > v_max_content_bytes THEN
        -- A result above the server's limit settles failed, as result_settlement makes one
        -- above the worker's: nothing of it is stored or fanned out.
        v_outcome := 'failed';
        v_content := '';
        v_diagnostic := 'handler returned ' || birddog._format_bytes(octet_length(p_content))
            || '; the limit is ' || birddog._format_bytes(v_max_content_bytes);
        v_reply_diagnostic := v_diagnostic;
        cause := 'unstorable_result';
        content := '';
    ELSIF p_event = 'result' THEN
        v_outcome := p_outcome;
        v_content := p_content;
        v_diagnostic := p_diagnostic;
        v_reply_diagnostic := p_reply_diagnostic;
    ELSIF v_job.recovery_count < birddog._max_recoveries(v_job.recovery) THEN
        PERFORM birddog._requeue(v_job.job_id, p_diagnostic);
        decision := 'requeue';
        diagnostic := p_diagnostic;
        keys := '{}';
        RETURN NEXT;
        RETURN;
    ELSE
        v_outcome := 'interrupted';
        v_content := '';
        v_diagnostic := p_diagnostic;
        v_reply_diagnostic := p_reply_diagnostic;
        cause := 'interrupted';
    END IF;
    SELECT * INTO v_done FROM birddog._settle_job(
        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
        v_outcome, v_content, v_diagnostic, v_reply_diagnostic, false, p_now,
        v_max_content_bytes, p_traceparent, p_wake
    );
    outcome := v_outcome;
    diagnostic := v_diagnostic;
    keys := v_done.keys;
    unreadable := v_done.unreadable;
    RETURN NEXT;
END
$function$
"""
"""``birddog.settle(p_job_id text, p_claim_token uuid, p_event text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_cancel_diagnostic text, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean)`` as this revision installs it."""

PREVIOUS_SETTLE = r"""CREATE OR REPLACE FUNCTION birddog.settle(p_job_id text, p_claim_token uuid, p_event text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_cancel_diagnostic text, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, cause text, diagnostic text, content text, keys text[], unreadable text, reason text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_claim boolean;
    v_replay boolean;
    v_cancel record;
    v_done record;
    v_outcome text;
    v_content text;
    v_diagnostic text;
    v_reply_diagnostic text;
    v_agent text := birddog._caller_agent();
BEGIN
    -- What a worker reports about a job it holds (lifecycle.decide for a result, p_event
    -- 'result', or a stop, 'stop'), carried out in one call. The caller gives the texts
    -- Python makes: for a result, the settlement without a cancellation (p_outcome,
    -- p_content, p_diagnostic: a result that cannot be stored already made 'failed'); for
    -- a stop, the bounded diagnostic. p_reply_diagnostic is what a reply carries for it;
    -- p_cancel_diagnostic the bounded diagnostic a recorded cancellation settles with.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        decision := 'missing';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_agent IS NOT NULL AND (v_job.payload #>> '{mail,to,agentId}') IS DISTINCT FROM v_agent
    THEN
        decision := 'refuse';
        reason := 'the job is not addressed to this agent';
        RETURN NEXT;
        RETURN;
    END IF;
    v_claim := p_claim_token IS NOT NULL AND v_job.claim_token = p_claim_token;
    IF v_job.state = 'settled' THEN
        -- The same claim settling again is a replay of what is stored, not an error.
        IF p_event = 'result' THEN
            v_replay := v_claim AND v_job.outcome = coalesce(
                CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' END, p_outcome
            );
        ELSE
            v_replay := v_claim AND v_job.outcome IN ('interrupted', 'cancelled');
        END IF;
        IF coalesce(v_replay, false) THEN
            decision := 'keep';
            outcome := v_job.outcome;
            keys := '{}';
            RETURN NEXT;
            RETURN;
        END IF;
        decision := 'refuse';
        reason := 'the job is already settled ' || coalesce(v_job.outcome, 'with no outcome');
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_job.state <> 'running' OR NOT v_claim THEN
        decision := 'refuse';
        reason := 'the job is not running under this claim (it is ' || v_job.state || ')';
        RETURN NEXT;
        RETURN;
    END IF;
    decision := 'settle';
    IF v_job.cancel_requested_at IS NOT NULL THEN
        -- A recorded cancellation wins over whatever the worker reports.
        SELECT * INTO v_cancel FROM birddog._cancelled(
            coalesce(v_job.cancel_content, ''), p_cancel_diagnostic, p_max_content_bytes
        );
        v_outcome := 'cancelled';
        v_content := v_cancel.content;
        v_diagnostic := v_cancel.diagnostic;
        v_reply_diagnostic := NULL;
        cause := 'cancelled';
        content := v_cancel.content;
    ELSIF p_event = 'result' THEN
        v_outcome := p_outcome;
        v_content := p_content;
        v_diagnostic := p_diagnostic;
        v_reply_diagnostic := p_reply_diagnostic;
    ELSIF v_job.recovery_count < birddog._max_recoveries(v_job.recovery) THEN
        PERFORM birddog._requeue(v_job.job_id, p_diagnostic);
        decision := 'requeue';
        diagnostic := p_diagnostic;
        keys := '{}';
        RETURN NEXT;
        RETURN;
    ELSE
        v_outcome := 'interrupted';
        v_content := '';
        v_diagnostic := p_diagnostic;
        v_reply_diagnostic := p_reply_diagnostic;
        cause := 'interrupted';
    END IF;
    SELECT * INTO v_done FROM birddog._settle_job(
        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
        v_outcome, v_content, v_diagnostic, v_reply_diagnostic, false, p_now,
        p_max_content_bytes, p_traceparent, p_wake
    );
    outcome := v_outcome;
    diagnostic := v_diagnostic;
    keys := v_done.keys;
    unreadable := v_done.unreadable;
    RETURN NEXT;
END
$function$
"""
"""``birddog.settle(p_job_id text, p_claim_token uuid, p_event text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_cancel_diagnostic text, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean)`` as revision 0030 left it, as the downgrade restores it."""


MAIL_KEY = "(payload #>> '{mail,key}')"

SHARED_KEYS = r"""DO $shared$
DECLARE
    v_shared bigint;
BEGIN
    SELECT count(*) INTO v_shared FROM (
        SELECT 1 FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') IS NOT NULL
        GROUP BY (j.payload #>> '{mail,key}')
        HAVING count(*) > 1
    ) AS s;
    IF v_shared > 0 THEN
        RAISE EXCEPTION '% mail keys are carried by more than one job; a mail key now names one job', v_shared
            USING HINT = 'list them with: SELECT payload #>> ''{mail,key}'', array_agg(job_id) FROM birddog.jobs GROUP BY 1 HAVING count(*) > 1; prune or delete the extra jobs, then migrate again';
    END IF;
END
$shared$"""
"""Stop the upgrade when jobs already share a mail key (the unique index cannot be made)."""


def _mail_key_index(*, unique: bool) -> None:
    op.drop_index("jobs_mail_key_idx", table_name="jobs", schema="birddog")
    op.create_index(
        "jobs_mail_key_idx",
        "jobs",
        [sa.text(MAIL_KEY)],
        unique=unique,
        schema="birddog",
        postgresql_where=sa.text(f"{MAIL_KEY} IS NOT NULL"),
    )


def _create_limits() -> None:
    op.create_table(
        "limits",
        sa.Column("id", sa.Boolean, primary_key=True, server_default=sa.text("true")),
        sa.Column(
            "max_content_bytes", sa.Integer, nullable=False, server_default=sa.text("1048576")
        ),
        sa.Column("max_lease_s", sa.Float, nullable=False, server_default=sa.text("3600")),
        sa.Column("max_priority", sa.SmallInteger, nullable=False, server_default=sa.text("100")),
        sa.Column("max_reply_to", sa.Integer, nullable=False, server_default=sa.text("100")),
        sa.Column("max_age_s", sa.Float, nullable=False, server_default=sa.text("300")),
        sa.Column("max_hold_s", sa.Float, nullable=False, server_default=sa.text("3600")),
        sa.CheckConstraint("id", name="limits_singleton_check"),
        sa.CheckConstraint(
            "max_content_bytes > 0 AND max_lease_s > 0 AND max_priority >= 0 "
            "AND max_reply_to >= 0 AND max_age_s >= 0 AND max_hold_s > 0",
            name="limits_range_check",
        ),
        schema="birddog",
    )
    op.execute("INSERT INTO birddog.limits DEFAULT VALUES")


def upgrade() -> None:
    op.execute(SHARED_KEYS)
    _mail_key_index(unique=True)
    _create_limits()
    op.execute(LIMITS)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog._limits(OUT bound boolean, OUT max_content_bytes integer, OUT max_lease_s double precision, OUT max_priority smallint, OUT max_reply_to integer, OUT max_age_s double precision) FROM PUBLIC"
    )
    op.execute(A2A_CANCEL)
    op.execute(CLAIM)
    op.execute(ENQUEUE)
    op.execute(HEARTBEAT)
    op.execute(MAILBOX_VISIBLE)
    op.execute(SETTLE)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION birddog._limits(OUT bound boolean, OUT max_content_bytes integer, OUT max_lease_s double precision, OUT max_priority smallint, OUT max_reply_to integer, OUT max_age_s double precision)"
    )
    op.execute(PREVIOUS_A2A_CANCEL)
    op.execute(PREVIOUS_CLAIM)
    op.execute(PREVIOUS_ENQUEUE)
    op.execute(PREVIOUS_HEARTBEAT)
    op.execute(PREVIOUS_MAILBOX_VISIBLE)
    op.execute(PREVIOUS_SETTLE)
    _mail_key_index(unique=False)
    op.drop_table("limits", schema="birddog")
