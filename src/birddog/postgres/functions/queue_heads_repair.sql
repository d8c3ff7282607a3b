CREATE OR REPLACE FUNCTION birddog.queue_heads_repair()
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
