CREATE OR REPLACE FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[] DEFAULT NULL::text[], p_batch integer DEFAULT 1)
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
