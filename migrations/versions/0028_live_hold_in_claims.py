"""Live sessions first: announced by their functions, and held back from workers' claims.

``birddog.live_heartbeat(agent, session, holder, ttl_s)`` announces or renews a live
session until now plus the TTL, which the server bounds to 1..15 s (5 s asked, renewed
every 1.5 s), and tells the workers (``NOTIFY birddog_jobs``) of queued jobs whose grace
ended since the holder's previous beat, so they come back when it ends rather than at
their backstop; ``birddog.live_leave`` ends one on a clean exit and tells them of the
queue's jobs at once. Both bind an agent's login to its own agent; operator logins (an
MCP server, a worker) name the agent.

``birddog._live_hold(queue_key, since, claimer, at)``: whether a claim must leave a job
to its queue's live session: one is live and held by another, none by the claimer, and
the job has not waited its route's ``live_grace_s`` (30 s by default) since it was sent.
``birddog.claim`` asks it of each candidate queue head, of the head it takes and of the
followers of a batched turn; the live session's own claims (next_task, worker --live:
their worker id is the holder) are never held. A plain SQL function, inlined.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._live_hold (new), birddog.claim (changed),
birddog.live_heartbeat (new), birddog.live_leave (new).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0028"
down_revision: str | Sequence[str] | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

LIVE_HOLD = r"""CREATE OR REPLACE FUNCTION birddog._live_hold(p_queue_key text, p_since timestamp with time zone, p_claimer text, p_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    -- Whether a claim by p_claimer at p_at leaves a job of queue p_queue_key, sent at
    -- p_since, to the queue's live session: a live session of the queue (its TTL not passed)
    -- is held by another, none by p_claimer, and the job has not yet waited the grace of its
    -- agent's route (live_grace_s, 30 s by default). A plain SQL function: the claim's
    -- queries inline it (an index probe per candidate queue; none when nothing is live).
    SELECT EXISTS (
        SELECT 1 FROM birddog.live_sessions l
        LEFT JOIN birddog.routes r ON r.agent_id = l.agent_id
        WHERE l.queue_key = p_queue_key AND l.expires_at > now()
          AND p_since + make_interval(secs => coalesce(r.live_grace_s, 30)) > p_at
    ) AND NOT EXISTS (
        SELECT 1 FROM birddog.live_sessions l
        WHERE l.queue_key = p_queue_key AND l.holder = p_claimer AND l.expires_at > now()
    )
$function$
"""
"""``birddog._live_hold(p_queue_key text, p_since timestamp with time zone, p_claimer text, p_at timestamp with time zone)`` as this revision installs it."""

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
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[], p_batch integer)`` as revision 0027 left it, as the downgrade restores it."""

LIVE_HEARTBEAT = r"""CREATE OR REPLACE FUNCTION birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
    -- The TTL is the server's to bound: a holder that stops beating stops counting within
    -- seconds, whatever it asked for.
    v_ttl double precision := least(greatest(coalesce(p_ttl_s, 5), 1), 15);
    v_previous timestamptz;
    v_until timestamptz;
BEGIN
    -- Announce (or renew) p_holder's live session of p_agent_id's p_session until now plus
    -- the TTL; when it is due. An agent's login announces its own agent's sessions only.
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent announces live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(length(p_agent_id), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_session), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_holder), 0) NOT BETWEEN 1 AND 256
       OR strpos(p_agent_id, E'\x1f') > 0 THEN
        RAISE EXCEPTION 'a live session needs an agent id, a session id and a holder of 1 to 256 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_until := now() + make_interval(secs => v_ttl);
    SELECT l.seen_at INTO v_previous
    FROM birddog.live_sessions l
    WHERE l.queue_key = v_key AND l.holder = p_holder AND l.expires_at > now()
    FOR UPDATE;
    INSERT INTO birddog.live_sessions AS l (holder, agent_id, session, started_at, seen_at, expires_at)
    VALUES (p_holder, p_agent_id, p_session, now(), now(), v_until)
    ON CONFLICT (queue_key, holder) DO UPDATE
    SET seen_at = now(), expires_at = excluded.expires_at,
        -- A row whose TTL had passed is a new live session.
        started_at = CASE WHEN v_previous IS NULL THEN now() ELSE l.started_at END;
    -- Rows whose holder is gone for a while (its process died without leaving).
    DELETE FROM birddog.live_sessions l WHERE l.expires_at < now() - interval '1 minute';
    -- A worker waits for a notification (or its backstop): tell it of the jobs of this
    -- queue whose grace ended since the previous beat, so it comes back when the grace ends.
    IF v_previous IS NOT NULL AND EXISTS (
        SELECT 1 FROM birddog.jobs j
        LEFT JOIN birddog.routes r ON r.agent_id = p_agent_id
        WHERE j.state = 'queued' AND j.queue_key = v_key
          AND j.created_at + make_interval(secs => coalesce(r.live_grace_s, 30))
              BETWEEN v_previous AND now()
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN v_until;
END
$function$
"""
"""``birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)`` as this revision installs it."""

LIVE_LEAVE = r"""CREATE OR REPLACE FUNCTION birddog.live_leave(p_agent_id text, p_session text, p_holder text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
BEGIN
    -- End p_holder's live session of p_agent_id's p_session (a clean exit); whether it had
    -- one. Its queued jobs are announced on birddog_jobs, so a worker takes them now
    -- rather than at its next look. An agent's login ends its own agent's sessions only.
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent ends live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    DELETE FROM birddog.live_sessions l WHERE l.queue_key = v_key AND l.holder = p_holder;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM birddog.jobs j WHERE j.state = 'queued' AND j.queue_key = v_key
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN true;
END
$function$
"""
"""``birddog.live_leave(p_agent_id text, p_session text, p_holder text)`` as this revision installs it."""


def upgrade() -> None:
    op.execute(LIVE_HOLD)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog._live_hold(p_queue_key text, p_since timestamp with time zone, p_claimer text, p_at timestamp with time zone) FROM PUBLIC"
    )
    op.execute(CLAIM)
    op.execute(LIVE_HEARTBEAT)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision) FROM PUBLIC"
    )
    op.execute(LIVE_LEAVE)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.live_leave(p_agent_id text, p_session text, p_holder text) FROM PUBLIC"
    )


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION birddog._live_hold(p_queue_key text, p_since timestamp with time zone, p_claimer text, p_at timestamp with time zone)"
    )
    op.execute(
        "DROP FUNCTION birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)"
    )
    op.execute("DROP FUNCTION birddog.live_leave(p_agent_id text, p_session text, p_holder text)")
    op.execute(PREVIOUS_CLAIM)
