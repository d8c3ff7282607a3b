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
        SELECT DISTINCT ON (j.queue) j.queue, j.agent_id, j.priority, j.created_at, j.job_id
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        ORDER BY j.queue, j.priority DESC, j.created_at, j.job_id
    ), due AS (
        SELECT j.queue,
               CASE WHEN bool_and(j.not_before IS NOT NULL) THEN min(j.not_before) END AS due_at
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        GROUP BY j.queue
    ), running AS (
        SELECT j.queue, count(*)::integer AS running
        FROM birddog.jobs j
        WHERE j.state = 'running'
        GROUP BY j.queue
    ), truth AS (
        SELECT coalesce(q.queue, r.queue) AS queue, q.agent_id, q.priority, q.created_at,
               q.job_id, d.due_at, coalesce(r.running, 0) AS running
        FROM queued q
        JOIN due d ON d.queue = q.queue
        FULL JOIN running r ON r.queue = q.queue
    )
    SELECT coalesce(array_agg(coalesce(t.queue, h.queue) ORDER BY coalesce(t.queue, h.queue)), '{}')
    INTO v_queues
    FROM truth t
    FULL JOIN birddog.queue_heads h ON h.queue = t.queue
    WHERE (t.agent_id, t.priority, t.created_at, t.job_id, t.due_at, t.running)
        IS DISTINCT FROM (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running);
    IF cardinality(v_queues) > 0 THEN
        PERFORM birddog._queue_heads_refresh(v_queues);
    END IF;
    RETURN cardinality(v_queues);
END
$function$
