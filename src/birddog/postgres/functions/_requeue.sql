CREATE OR REPLACE FUNCTION birddog._requeue(p_job_id text, p_diagnostic text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_queue text;
    v_queue_key text;
BEGIN
    -- A recovery: back in its queue, claim cleared, recovery_count + 1 (NULL diagnostic:
    -- the last one stays); announced on birddog_jobs at commit.
    UPDATE birddog.jobs j
    SET state = 'queued', claim_token = NULL, lease_expires_at = NULL, worker_id = NULL,
        slot = NULL, recovery_count = j.recovery_count + 1,
        diagnostic = coalesce(p_diagnostic, j.diagnostic), updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running'
    RETURNING j.queue, j.queue_key INTO v_queue, v_queue_key;
    IF v_queue IS NOT NULL THEN
        PERFORM birddog._queue_heads_refresh(ARRAY[v_queue_key]);
    END IF;
    IF v_queue IS NOT NULL THEN
        PERFORM pg_notify('birddog_jobs', v_queue);
    END IF;
END
$function$
