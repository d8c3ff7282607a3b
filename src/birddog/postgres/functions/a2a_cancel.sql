CREATE OR REPLACE FUNCTION birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)
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
