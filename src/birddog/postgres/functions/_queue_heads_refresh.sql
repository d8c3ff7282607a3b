CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queue_keys text[])
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
