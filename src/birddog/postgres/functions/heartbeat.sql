CREATE OR REPLACE FUNCTION birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
DECLARE
    v_cancel boolean;
    v_agent text := birddog._caller_agent();
    v_max_lease_s double precision := (SELECT l.max_lease_s FROM birddog._limits() l);
BEGIN
    -- The lease of a job still running under this claim (an agent's own job, for an
    -- agent's login), up to the server's max_lease_s from now (birddog._limits), and never
    -- past the cancel grace of a cancellation asked (birddog._cancel_grace); whether a
    -- cancellation was asked (NULL: the claim holds nothing).
    UPDATE birddog.jobs j
    SET lease_expires_at = least(p_lease_until,
                                 clock_timestamp() + make_interval(secs => v_max_lease_s),
                                 j.cancel_requested_at + birddog._cancel_grace()),
        updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_claim_token
      AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
    RETURNING j.cancel_requested_at IS NOT NULL INTO v_cancel;
    RETURN v_cancel;
END
$function$
