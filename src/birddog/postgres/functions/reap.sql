CREATE OR REPLACE FUNCTION birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)
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
