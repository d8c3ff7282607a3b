CREATE OR REPLACE FUNCTION birddog.cancel(p_job_id text, p_content text, p_now timestamp with time zone, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, keys text[], unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_cancel record;
    v_done record;
BEGIN
    -- The operator's cancellation: a queued job settles cancelled now (the first recorded
    -- content wins), a running one records it, tells its worker at once and has its lease
    -- cut to the cancel grace.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        decision := 'missing';
    ELSIF v_job.state = 'settled' THEN
        decision := 'keep';
        outcome := v_job.outcome;
    ELSIF v_job.state = 'queued' THEN
        SELECT * INTO v_cancel FROM birddog._cancelled(
            CASE WHEN v_job.cancel_requested_at IS NULL THEN p_content
                 ELSE coalesce(v_job.cancel_content, '') END,
            NULL, p_max_content_bytes
        );
        SELECT * INTO v_done FROM birddog._settle_job(
            v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
            'cancelled', v_cancel.content, v_cancel.diagnostic, NULL,
            v_job.cancel_requested_at IS NULL, p_now, p_max_content_bytes, NULL, p_wake
        );
        decision := 'settle';
        outcome := 'cancelled';
        keys := v_done.keys;
        unreadable := v_done.unreadable;
    ELSIF v_job.cancel_requested_at IS NOT NULL THEN
        decision := 'keep';
    ELSE
        -- The lease ends within the cancel grace (birddog.limits.cancel_grace_s, for every
        -- caller): a worker that will not stop its turn no longer holds the queue; once the
        -- lease passes, a reaper settles the job cancelled.
        UPDATE birddog.jobs j
        SET cancel_requested_at = p_now, cancel_content = p_content, updated_at = now(),
            lease_expires_at = least(j.lease_expires_at, p_now + birddog._cancel_grace())
        WHERE j.job_id = v_job.job_id;
        -- Its worker hears it at commit (birddog.cancels), not at its next heartbeat.
        PERFORM pg_notify('birddog_jobs', 'cancel:' || v_job.job_id);
        decision := 'record';
    END IF;
    RETURN NEXT;
END
$function$
