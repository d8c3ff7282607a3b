"""Digests: informational mail with no live session waits for its route's digest time.

``birddog.routes`` learns when each agent's informational mail (``report``, ``receipt``)
goes as one batched turn: ``digest_daily`` (a time of day, UTC, to the minute) or
``digest_every_s`` (60 s to 7 days, aligned on 1970-01-01 00:00 UTC), at most one of the
two; neither means once a day at 08:00 UTC. ``birddog.jobs.digest_at`` is an
informational job's digest time, set by ``birddog.enqueue`` from its agent's route
(``birddog._digest_at``: the first digest time at or after the mail was sent); its
expiry (``expires_in_s``) counts from then, and so does the bounce of
``birddog.reap('queued_too_long')``. NULL for interactive jobs (a CHECK says so).

``birddog._digest_hold(queue_key, due_at, claimer, at)``: whether a claim leaves a job
(or a queue whose head row is due only later) for its digest: the time is still to come
and the claimer holds no live session of the queue. ``birddog.claim`` asks it of each
candidate queue's head row (in place of the due-at test, so a live holder sees a queue
whose mail waits for its digest), of the job it takes at the head of each queue (the
first one that may be claimed now: a waiting digest never blocks a task behind it) and
of the followers of a batched turn. The queue heads' ``due_at`` (``_queue_heads_refresh``,
``enqueue``, ``queue_heads_repair``) is now the earliest time a queued job's not-before
and digest have both passed, so a worker's claim never passes over queues that only wait
for their digests.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._digest_at (new), birddog._digest_hold (new),
birddog._queue_heads_refresh (changed), birddog.claim (changed), birddog.enqueue
(changed), birddog.queue_heads_repair (changed), birddog.reap (changed).

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0035"
down_revision: str | Sequence[str] | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

DIGEST_AT = r"""CREATE OR REPLACE FUNCTION birddog._digest_at(p_agent_id text, p_at timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
    v_daily time;
    v_every_s double precision;
    v_stride interval;
    v_start timestamptz;
BEGIN
    -- The first digest time of agent p_agent_id's route at or after p_at (birddog.core.digests):
    -- every digest_every_s seconds since 1970-01-01 00:00 UTC, or daily at digest_daily UTC
    -- (08:00 without a route or a schedule of its own).
    SELECT r.digest_daily, r.digest_every_s INTO v_daily, v_every_s
    FROM birddog.routes r WHERE r.agent_id = p_agent_id;
    IF v_every_s IS NOT NULL THEN
        v_stride := make_interval(secs => v_every_s);
        v_start := date_bin(v_stride, p_at, timestamptz '1970-01-01 00:00:00+00');
    ELSE
        v_stride := interval '1 day';
        v_start := date_bin(
            v_stride, p_at,
            timestamptz '1970-01-01 00:00:00+00' + (coalesce(v_daily, time '08:00') - time '00:00')
        );
    END IF;
    RETURN CASE WHEN v_start >= p_at THEN v_start ELSE v_start + v_stride END;
END
$function$
"""
"""``birddog._digest_at(p_agent_id text, p_at timestamp with time zone)`` as this revision installs it."""

DIGEST_HOLD = r"""CREATE OR REPLACE FUNCTION birddog._digest_hold(p_queue_key text, p_due_at timestamp with time zone, p_claimer text, p_at timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    -- Whether a claim by p_claimer at p_at leaves a job of queue p_queue_key (or the queue's
    -- head row) due at p_due_at for its digest: the time is still to come and p_claimer holds
    -- no live session of the queue (a live session takes informational mail at once). NULL
    -- p_due_at: due now. A plain SQL function: the claim's queries inline it.
    SELECT coalesce(p_due_at > p_at, false) AND NOT EXISTS (
        SELECT 1 FROM birddog.live_sessions l
        WHERE l.queue_key = p_queue_key AND l.holder = p_claimer AND l.expires_at > now()
    )
$function$
"""
"""``birddog._digest_hold(p_queue_key text, p_due_at timestamp with time zone, p_claimer text, p_at timestamp with time zone)`` as this revision installs it."""

QUEUE_HEADS_REFRESH = r"""CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queue_keys text[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    -- Queues by key (birddog.jobs.queue_key: agent, unit separator, session); the queue's
    -- name is the key after its first separator (an agent id holds none), its agent the
    -- key before it (NULL for agentless jobs), whether or not a job is queued.
    -- The keys in the columns' own collation: a caller's argument may carry another (a
    -- settlement's comes from a job's row, whose ids sort COLLATE "C"), and a comparison
    -- in another collation than its index's cannot use the index (every probe below would
    -- scan the queue's whole table).
    v_keys text[] COLLATE "default" := p_queue_keys;
    v_queue text COLLATE "default";
    v_head record;
    v_due timestamptz;
    v_running integer;
BEGIN
    IF cardinality(v_keys) = 1 THEN
        -- One queue (a settlement, an enqueue, a claim of one session): the recomputation
        -- below as statements over that queue alone, each kept as a generic plan.
        v_queue := v_keys[1];
        PERFORM 1 FROM birddog.queue_heads h WHERE h.queue_key = v_queue FOR UPDATE;
        SELECT j.agent_id, j.priority, j.created_at, j.job_id INTO v_head
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY j.priority DESC, j.created_at, j.job_id
        LIMIT 1;
        SELECT greatest(j.not_before, j.digest_at) INTO v_due
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY greatest(j.not_before, j.digest_at) NULLS FIRST
        LIMIT 1;
        SELECT count(*)::integer INTO v_running
        FROM birddog.jobs j
        WHERE j.state = 'running' AND j.queue_key = v_queue;
        IF v_head.job_id IS NULL AND v_running = 0 THEN
            DELETE FROM birddog.queue_heads h WHERE h.queue_key = v_queue;
        ELSE
            INSERT INTO birddog.queue_heads AS h (
                queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
            )
            VALUES (v_queue, substr(v_queue, strpos(v_queue, E'\x1f') + 1),
                    nullif(split_part(v_queue, E'\x1f', 1), ''),
                    v_head.priority, v_head.created_at, v_head.job_id, v_due, v_running)
            ON CONFLICT (queue_key) DO UPDATE
            SET agent_id = excluded.agent_id, priority = excluded.priority,
                created_at = excluded.created_at, job_id = excluded.job_id,
                due_at = excluded.due_at, running = excluded.running
            WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
                IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                                  excluded.job_id, excluded.due_at, excluded.running);
        END IF;
        RETURN;
    END IF;
    -- Recompute the heads of p_queue_keys from their jobs. The rows are locked first, in queue
    -- order, by a statement of their own: the recomputation below takes its snapshot only
    -- then, so it sees every change committed by a transaction that held one of them, and
    -- the last transaction to change a queue's jobs leaves its row right.
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue_key = ANY(v_keys)
    ORDER BY h.queue_key
    FOR UPDATE;
    WITH facts AS (
        SELECT q.queue_key, head.agent_id, head.priority, head.created_at, head.job_id,
               due.due_at, run.running
        FROM (SELECT DISTINCT u.queue_key FROM unnest(v_keys) AS u(queue_key)) q
        LEFT JOIN LATERAL (
            SELECT j.agent_id, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) head ON true
        LEFT JOIN LATERAL (
            SELECT greatest(j.not_before, j.digest_at) AS due_at
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY greatest(j.not_before, j.digest_at) NULLS FIRST
            LIMIT 1
        ) due ON true
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS running
            FROM birddog.jobs j
            WHERE j.state = 'running' AND j.queue_key = q.queue_key
        ) run
    ), kept AS (
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        SELECT f.queue_key, substr(f.queue_key, strpos(f.queue_key, E'\x1f') + 1),
               nullif(split_part(f.queue_key, E'\x1f', 1), ''),
               f.priority, f.created_at, f.job_id, f.due_at, f.running
        FROM facts f
        WHERE f.job_id IS NOT NULL OR f.running > 0
        ON CONFLICT (queue_key) DO UPDATE
        SET agent_id = excluded.agent_id, priority = excluded.priority,
            created_at = excluded.created_at, job_id = excluded.job_id,
            due_at = excluded.due_at, running = excluded.running
        WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
            IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                              excluded.job_id, excluded.due_at, excluded.running)
    )
    DELETE FROM birddog.queue_heads h
    USING facts f
    WHERE h.queue_key = f.queue_key AND f.job_id IS NULL AND f.running = 0;
END
$function$
"""
"""``birddog._queue_heads_refresh(p_queue_keys text[])`` as this revision installs it."""

PREVIOUS_QUEUE_HEADS_REFRESH = r"""CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queue_keys text[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    -- Queues by key (birddog.jobs.queue_key: agent, unit separator, session); the queue's
    -- name is the key after its first separator (an agent id holds none), its agent the
    -- key before it (NULL for agentless jobs), whether or not a job is queued.
    -- The keys in the columns' own collation: a caller's argument may carry another (a
    -- settlement's comes from a job's row, whose ids sort COLLATE "C"), and a comparison
    -- in another collation than its index's cannot use the index (every probe below would
    -- scan the queue's whole table).
    v_keys text[] COLLATE "default" := p_queue_keys;
    v_queue text COLLATE "default";
    v_head record;
    v_due timestamptz;
    v_running integer;
BEGIN
    IF cardinality(v_keys) = 1 THEN
        -- One queue (a settlement, an enqueue, a claim of one session): the recomputation
        -- below as statements over that queue alone, each kept as a generic plan.
        v_queue := v_keys[1];
        PERFORM 1 FROM birddog.queue_heads h WHERE h.queue_key = v_queue FOR UPDATE;
        SELECT j.agent_id, j.priority, j.created_at, j.job_id INTO v_head
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY j.priority DESC, j.created_at, j.job_id
        LIMIT 1;
        SELECT j.not_before INTO v_due
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY j.not_before NULLS FIRST
        LIMIT 1;
        SELECT count(*)::integer INTO v_running
        FROM birddog.jobs j
        WHERE j.state = 'running' AND j.queue_key = v_queue;
        IF v_head.job_id IS NULL AND v_running = 0 THEN
            DELETE FROM birddog.queue_heads h WHERE h.queue_key = v_queue;
        ELSE
            INSERT INTO birddog.queue_heads AS h (
                queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
            )
            VALUES (v_queue, substr(v_queue, strpos(v_queue, E'\x1f') + 1),
                    nullif(split_part(v_queue, E'\x1f', 1), ''),
                    v_head.priority, v_head.created_at, v_head.job_id, v_due, v_running)
            ON CONFLICT (queue_key) DO UPDATE
            SET agent_id = excluded.agent_id, priority = excluded.priority,
                created_at = excluded.created_at, job_id = excluded.job_id,
                due_at = excluded.due_at, running = excluded.running
            WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
                IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                                  excluded.job_id, excluded.due_at, excluded.running);
        END IF;
        RETURN;
    END IF;
    -- Recompute the heads of p_queue_keys from their jobs. The rows are locked first, in queue
    -- order, by a statement of their own: the recomputation below takes its snapshot only
    -- then, so it sees every change committed by a transaction that held one of them, and
    -- the last transaction to change a queue's jobs leaves its row right.
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue_key = ANY(v_keys)
    ORDER BY h.queue_key
    FOR UPDATE;
    WITH facts AS (
        SELECT q.queue_key, head.agent_id, head.priority, head.created_at, head.job_id,
               due.due_at, run.running
        FROM (SELECT DISTINCT u.queue_key FROM unnest(v_keys) AS u(queue_key)) q
        LEFT JOIN LATERAL (
            SELECT j.agent_id, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) head ON true
        LEFT JOIN LATERAL (
            SELECT j.not_before AS due_at
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY j.not_before NULLS FIRST
            LIMIT 1
        ) due ON true
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS running
            FROM birddog.jobs j
            WHERE j.state = 'running' AND j.queue_key = q.queue_key
        ) run
    ), kept AS (
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        SELECT f.queue_key, substr(f.queue_key, strpos(f.queue_key, E'\x1f') + 1),
               nullif(split_part(f.queue_key, E'\x1f', 1), ''),
               f.priority, f.created_at, f.job_id, f.due_at, f.running
        FROM facts f
        WHERE f.job_id IS NOT NULL OR f.running > 0
        ON CONFLICT (queue_key) DO UPDATE
        SET agent_id = excluded.agent_id, priority = excluded.priority,
            created_at = excluded.created_at, job_id = excluded.job_id,
            due_at = excluded.due_at, running = excluded.running
        WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
            IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                              excluded.job_id, excluded.due_at, excluded.running)
    )
    DELETE FROM birddog.queue_heads h
    USING facts f
    WHERE h.queue_key = f.queue_key AND f.job_id IS NULL AND f.running = 0;
END
$function$
"""
"""``birddog._queue_heads_refresh(p_queue_keys text[])`` as revision 0034 left it, as the downgrade restores it."""

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
    -- A queue a live session serves is left to it for a grace (birddog._live_hold);
    -- informational mail waits for its digest unless the claimer is its live session
    -- (birddog._digest_hold: the head row's due_at, each job's digest_at).
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
                  AND NOT birddog._digest_hold(h.queue_key, h.due_at, p_worker_id, p_started_at)
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
                  AND NOT birddog._digest_hold(h.queue_key, h.due_at, p_worker_id, p_started_at)
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
                  AND NOT birddog._digest_hold(q.queue_key, q.digest_at, p_worker_id, p_started_at)
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
                      AND NOT birddog._digest_hold(f.queue_key, f.digest_at, p_worker_id,
                                                   p_started_at)
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
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[], p_batch integer)`` as revision 0034 left it, as the downgrade restores it."""

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
    v_kind text;
    v_digest_at timestamptz;
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
    v_kind := CASE WHEN v_to IS NULL THEN 'task' ELSE coalesce(v_payload ->> 'kind', 'task') END;
    -- Informational mail waits for its digest (birddog.core.digests): the first time of its
    -- agent's route's schedule at or after it was sent; its expiry counts from then.
    IF v_kind IN ('report', 'receipt') THEN
        v_digest_at := birddog._digest_at(v_to, v_created);
    END IF;
    -- A queued job, nothing else: state, lease and claim are not the caller's to give. The
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent. A mail's
    -- kind is the payload's (a task when it names none: the TypeScript BirdDog's mail); a
    -- job that is not BirdDog mail is a task, whatever its own payload calls a kind.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at, kind, digest_at
    )
    VALUES (
        p_job_id, p_queue, p_lane, v_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before,
        coalesce(v_digest_at, v_created) + v_expires, v_kind, v_digest_at
    )
    -- Any unique conflict: the job id taken, or the mail key another job's (a mail key
    -- names one job: its replies, their visibility and acknowledgement follow that job).
    ON CONFLICT DO NOTHING
    RETURNING j.queue_key INTO v_queue_key;
    IF FOUND THEN
        -- Its queue's head: this job, when it comes first (or the queue had none queued);
        -- the queue due as soon as this job may be claimed (its not-before and its digest
        -- passed), if sooner. The upsert works on
        -- the row's latest version, whoever changed it last.
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        VALUES (
            v_queue_key, p_queue, v_to, v_priority, v_created, p_job_id,
            greatest(p_not_before, v_digest_at), 0
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
        CASE WHEN (v_stored.expires_at - coalesce(v_stored.digest_at, v_stored.created_at))
                  IS DISTINCT FROM v_expires
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
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as revision 0034 left it, as the downgrade restores it."""

QUEUE_HEADS_REPAIR = r"""CREATE OR REPLACE FUNCTION birddog.queue_heads_repair()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_queues text[];
BEGIN
    -- Compare every queue head with what the jobs say (one pass over the queued and
    -- running jobs) and recompute the rows that differ, or are missing, or are left over;
    -- returns how many queues were repaired. Rows written only by BirdDog's functions
    -- never differ: this is for jobs written by hand.
    WITH queued AS (
        SELECT DISTINCT ON (j.queue_key) j.queue_key, j.priority, j.created_at, j.job_id
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        ORDER BY j.queue_key, j.priority DESC, j.created_at, j.job_id
    ), due AS (
        SELECT j.queue_key,
               CASE WHEN bool_and(greatest(j.not_before, j.digest_at) IS NOT NULL)
                    THEN min(greatest(j.not_before, j.digest_at)) END AS due_at
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        GROUP BY j.queue_key
    ), running AS (
        SELECT j.queue_key, count(*)::integer AS running
        FROM birddog.jobs j
        WHERE j.state = 'running'
        GROUP BY j.queue_key
    ), truth AS (
        SELECT coalesce(q.queue_key, r.queue_key) AS queue_key,
               -- The queue's agent, as _queue_heads_refresh writes it (the key before its
               -- separator), whether or not a job is queued.
               nullif(split_part(coalesce(q.queue_key, r.queue_key), E'\x1f', 1), '') AS agent_id,
               q.priority, q.created_at, q.job_id, d.due_at, coalesce(r.running, 0) AS running
        FROM queued q
        JOIN due d ON d.queue_key = q.queue_key
        FULL JOIN running r ON r.queue_key = q.queue_key
    )
    SELECT coalesce(
        array_agg(coalesce(t.queue_key, h.queue_key) ORDER BY coalesce(t.queue_key, h.queue_key)),
        '{}'
    )
    INTO v_queues
    FROM truth t
    FULL JOIN birddog.queue_heads h ON h.queue_key = t.queue_key
    WHERE (t.agent_id, t.priority, t.created_at, t.job_id, t.due_at, t.running)
        IS DISTINCT FROM (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running);
    IF cardinality(v_queues) > 0 THEN
        PERFORM birddog._queue_heads_refresh(v_queues);
    END IF;
    RETURN cardinality(v_queues);
END
$function$
"""
"""``birddog.queue_heads_repair()`` as this revision installs it."""

PREVIOUS_QUEUE_HEADS_REPAIR = r"""CREATE OR REPLACE FUNCTION birddog.queue_heads_repair()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_queues text[];
BEGIN
    -- Compare every queue head with what the jobs say (one pass over the queued and
    -- running jobs) and recompute the rows that differ, or are missing, or are left over;
    -- returns how many queues were repaired. Rows written only by BirdDog's functions
    -- never differ: this is for jobs written by hand.
    WITH queued AS (
        SELECT DISTINCT ON (j.queue_key) j.queue_key, j.priority, j.created_at, j.job_id
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        ORDER BY j.queue_key, j.priority DESC, j.created_at, j.job_id
    ), due AS (
        SELECT j.queue_key,
               CASE WHEN bool_and(j.not_before IS NOT NULL) THEN min(j.not_before) END AS due_at
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        GROUP BY j.queue_key
    ), running AS (
        SELECT j.queue_key, count(*)::integer AS running
        FROM birddog.jobs j
        WHERE j.state = 'running'
        GROUP BY j.queue_key
    ), truth AS (
        SELECT coalesce(q.queue_key, r.queue_key) AS queue_key,
               -- The queue's agent, as _queue_heads_refresh writes it (the key before its
               -- separator), whether or not a job is queued.
               nullif(split_part(coalesce(q.queue_key, r.queue_key), E'\x1f', 1), '') AS agent_id,
               q.priority, q.created_at, q.job_id, d.due_at, coalesce(r.running, 0) AS running
        FROM queued q
        JOIN due d ON d.queue_key = q.queue_key
        FULL JOIN running r ON r.queue_key = q.queue_key
    )
    SELECT coalesce(
        array_agg(coalesce(t.queue_key, h.queue_key) ORDER BY coalesce(t.queue_key, h.queue_key)),
        '{}'
    )
    INTO v_queues
    FROM truth t
    FULL JOIN birddog.queue_heads h ON h.queue_key = t.queue_key
    WHERE (t.agent_id, t.priority, t.created_at, t.job_id, t.due_at, t.running)
        IS DISTINCT FROM (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running);
    IF cardinality(v_queues) > 0 THEN
        PERFORM birddog._queue_heads_refresh(v_queues);
    END IF;
    RETURN cardinality(v_queues);
END
$function$
"""
"""``birddog.queue_heads_repair()`` as revision 0034 left it, as the downgrade restores it."""

REAP = r"""CREATE OR REPLACE FUNCTION birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(job_id text, what text, unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_at integer;
    v_cancel record;
    v_done record;
BEGIN
    -- The reapers, for the jobs p_job_ids (a job another transaction holds is skipped and
    -- not returned). 'lease_expired': a running job whose lease ended by p_since is queued
    -- again while its budget lasts, else settles outcome_unknown (a recorded cancellation:
    -- cancelled). 'queued_too_long': a job still queued, enqueued (and its digest due) by
    -- p_since, settles
    -- cancelled with the caller's text for its recovery count (p_contents, p_diagnostics,
    -- one per job; a job whose count moved meanwhile is kept for the next pass).
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue_key IN (
        SELECT j.queue_key FROM birddog.jobs j WHERE j.job_id = ANY(p_job_ids)
    )
    ORDER BY h.queue_key
    FOR UPDATE;
    FOR v_job IN
        SELECT * FROM birddog.jobs j
        WHERE j.job_id = ANY(p_job_ids)
        ORDER BY j.job_id
        FOR UPDATE SKIP LOCKED
    LOOP
        job_id := v_job.job_id;
        unreadable := NULL;
        what := 'keep';
        IF p_event = 'lease_expired' THEN
            IF v_job.state = 'running'
               AND (v_job.lease_expires_at IS NULL OR v_job.lease_expires_at <= p_since) THEN
                IF v_job.cancel_requested_at IS NOT NULL THEN
                    SELECT * INTO v_cancel FROM birddog._cancelled(
                        coalesce(v_job.cancel_content, ''), p_lease_diagnostic, p_max_content_bytes
                    );
                    SELECT * INTO v_done FROM birddog._settle_job(
                        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                        'cancelled', v_cancel.content, v_cancel.diagnostic, NULL, false,
                        p_now, p_max_content_bytes, NULL, p_wake
                    );
                    what := 'cancelled';
                    unreadable := v_done.unreadable;
                ELSIF v_job.recovery_count < birddog._max_recoveries(v_job.recovery) THEN
                    PERFORM birddog._requeue(v_job.job_id, NULL);
                    what := 'requeued';
                ELSE
                    SELECT * INTO v_done FROM birddog._settle_job(
                        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                        'outcome_unknown', '', p_lease_diagnostic,
                        p_lease_reply_diagnostic, false, p_now, p_max_content_bytes, NULL, p_wake
                    );
                    what := 'outcome_unknown';
                    unreadable := v_done.unreadable;
                END IF;
            END IF;
        ELSIF p_event = 'queued_too_long' THEN
            v_at := array_position(p_job_ids, v_job.job_id);
            IF v_job.state = 'queued'
               AND ((v_job.created_at <= p_since
                     AND (v_job.digest_at IS NULL OR v_job.digest_at <= p_since))
                    OR v_job.expires_at <= p_now)
               AND v_job.recovery_count = p_recovery_counts[v_at] THEN
                SELECT * INTO v_done FROM birddog._settle_job(
                    v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                    'cancelled', p_contents[v_at], p_diagnostics[v_at], NULL, true,
                    p_now, p_max_content_bytes, NULL, p_wake
                );
                what := 'cancelled';
                unreadable := v_done.unreadable;
            END IF;
        ELSE
            RAISE EXCEPTION 'unknown reaper event %', p_event
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NEXT;
    END LOOP;
END
$function$
"""
"""``birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)`` as this revision installs it."""

PREVIOUS_REAP = r"""CREATE OR REPLACE FUNCTION birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(job_id text, what text, unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_at integer;
    v_cancel record;
    v_done record;
BEGIN
    -- The reapers, for the jobs p_job_ids (a job another transaction holds is skipped and
    -- not returned). 'lease_expired': a running job whose lease ended by p_since is queued
    -- again while its budget lasts, else settles outcome_unknown (a recorded cancellation:
    -- cancelled). 'queued_too_long': a job still queued, enqueued by p_since, settles
    -- cancelled with the caller's text for its recovery count (p_contents, p_diagnostics,
    -- one per job; a job whose count moved meanwhile is kept for the next pass).
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue_key IN (
        SELECT j.queue_key FROM birddog.jobs j WHERE j.job_id = ANY(p_job_ids)
    )
    ORDER BY h.queue_key
    FOR UPDATE;
    FOR v_job IN
        SELECT * FROM birddog.jobs j
        WHERE j.job_id = ANY(p_job_ids)
        ORDER BY j.job_id
        FOR UPDATE SKIP LOCKED
    LOOP
        job_id := v_job.job_id;
        unreadable := NULL;
        what := 'keep';
        IF p_event = 'lease_expired' THEN
            IF v_job.state = 'running'
               AND (v_job.lease_expires_at IS NULL OR v_job.lease_expires_at <= p_since) THEN
                IF v_job.cancel_requested_at IS NOT NULL THEN
                    SELECT * INTO v_cancel FROM birddog._cancelled(
                        coalesce(v_job.cancel_content, ''), p_lease_diagnostic, p_max_content_bytes
                    );
                    SELECT * INTO v_done FROM birddog._settle_job(
                        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                        'cancelled', v_cancel.content, v_cancel.diagnostic, NULL, false,
                        p_now, p_max_content_bytes, NULL, p_wake
                    );
                    what := 'cancelled';
                    unreadable := v_done.unreadable;
                ELSIF v_job.recovery_count < birddog._max_recoveries(v_job.recovery) THEN
                    PERFORM birddog._requeue(v_job.job_id, NULL);
                    what := 'requeued';
                ELSE
                    SELECT * INTO v_done FROM birddog._settle_job(
                        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                        'outcome_unknown', '', p_lease_diagnostic,
                        p_lease_reply_diagnostic, false, p_now, p_max_content_bytes, NULL, p_wake
                    );
                    what := 'outcome_unknown';
                    unreadable := v_done.unreadable;
                END IF;
            END IF;
        ELSIF p_event = 'queued_too_long' THEN
            v_at := array_position(p_job_ids, v_job.job_id);
            IF v_job.state = 'queued'
               AND (v_job.created_at <= p_since OR v_job.expires_at <= p_now)
               AND v_job.recovery_count = p_recovery_counts[v_at] THEN
                SELECT * INTO v_done FROM birddog._settle_job(
                    v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                    'cancelled', p_contents[v_at], p_diagnostics[v_at], NULL, true,
                    p_now, p_max_content_bytes, NULL, p_wake
                );
                what := 'cancelled';
                unreadable := v_done.unreadable;
            END IF;
        ELSE
            RAISE EXCEPTION 'unknown reaper event %', p_event
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NEXT;
    END LOOP;
END
$function$
"""
"""``birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)`` as revision 0034 left it, as the downgrade restores it."""


JOB_TIMES = (
    "created_at",
    "updated_at",
    "started_at",
    "lease_expires_at",
    "cancel_requested_at",
    "settled_at",
    "not_before",
    "expires_at",
)
"""The jobs' times that revision 0012's finite check names, in its order."""


def finite_check(columns: Sequence[str]) -> str:
    """A check that every one of ``columns`` is finite (NULL passes, as in any CHECK)."""
    return " AND ".join(f"isfinite({column})" for column in columns)


def upgrade() -> None:
    op.execute("ALTER TABLE birddog.routes ADD COLUMN digest_daily time without time zone")
    op.execute("ALTER TABLE birddog.routes ADD COLUMN digest_every_s double precision")
    op.execute(
        "ALTER TABLE birddog.routes ADD CONSTRAINT routes_digest_one_check "
        "CHECK (digest_daily IS NULL OR digest_every_s IS NULL)"
    )
    op.execute(
        "ALTER TABLE birddog.routes ADD CONSTRAINT routes_digest_daily_check "
        "CHECK (digest_daily = date_trunc('minute', digest_daily::interval)::time)"
    )
    op.execute(
        "ALTER TABLE birddog.routes ADD CONSTRAINT routes_digest_every_check "
        "CHECK (digest_every_s >= 60 AND digest_every_s <= 604800)"
    )
    op.execute("ALTER TABLE birddog.jobs ADD COLUMN digest_at timestamp with time zone")
    op.execute(
        "ALTER TABLE birddog.jobs ADD CONSTRAINT jobs_digest_at_check "
        "CHECK (digest_at IS NULL OR kind IN ('report', 'receipt'))"
    )
    # Every stored time is finite (revision 0005): the table's check covers the new one.
    op.execute("ALTER TABLE birddog.jobs DROP CONSTRAINT jobs_times_finite_check")
    op.execute(
        "ALTER TABLE birddog.jobs ADD CONSTRAINT jobs_times_finite_check "
        f"CHECK ({finite_check((*JOB_TIMES, 'digest_at'))})"
    )
    op.execute(DIGEST_AT)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog._digest_at(p_agent_id text, p_at timestamp with time zone) FROM PUBLIC"
    )
    op.execute(DIGEST_HOLD)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog._digest_hold(p_queue_key text, p_due_at timestamp with time zone, p_claimer text, p_at timestamp with time zone) FROM PUBLIC"
    )
    op.execute(QUEUE_HEADS_REFRESH)
    op.execute(CLAIM)
    op.execute(ENQUEUE)
    op.execute(QUEUE_HEADS_REPAIR)
    op.execute(REAP)


def downgrade() -> None:
    op.execute("DROP FUNCTION birddog._digest_at(p_agent_id text, p_at timestamp with time zone)")
    op.execute(
        "DROP FUNCTION birddog._digest_hold(p_queue_key text, p_due_at timestamp with time zone, p_claimer text, p_at timestamp with time zone)"
    )
    op.execute(PREVIOUS_QUEUE_HEADS_REFRESH)
    op.execute(PREVIOUS_CLAIM)
    op.execute(PREVIOUS_ENQUEUE)
    op.execute(PREVIOUS_QUEUE_HEADS_REPAIR)
    op.execute(PREVIOUS_REAP)
    op.execute("ALTER TABLE birddog.jobs DROP CONSTRAINT jobs_times_finite_check")
    op.execute(
        "ALTER TABLE birddog.jobs ADD CONSTRAINT jobs_times_finite_check "
        f"CHECK ({finite_check(JOB_TIMES)})"
    )
    op.execute("ALTER TABLE birddog.jobs DROP CONSTRAINT jobs_digest_at_check")
    op.execute("ALTER TABLE birddog.jobs DROP COLUMN digest_at")
    op.execute("ALTER TABLE birddog.routes DROP CONSTRAINT routes_digest_every_check")
    op.execute("ALTER TABLE birddog.routes DROP CONSTRAINT routes_digest_daily_check")
    op.execute("ALTER TABLE birddog.routes DROP CONSTRAINT routes_digest_one_check")
    op.execute("ALTER TABLE birddog.routes DROP COLUMN digest_every_s")
    op.execute("ALTER TABLE birddog.routes DROP COLUMN digest_daily")
