CREATE OR REPLACE FUNCTION birddog.record_turn(p_job_id text, p_token uuid, p_host text, p_boot_id text, p_pid integer, p_start_ticks bigint)
 RETURNS text
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
    -- Where the turn of a job still running under this claim runs; NULL: the claim is
    -- gone. Only the four turn columns change, and only under the caller's own claim.
    UPDATE birddog.jobs j
    SET turn_host = p_host, turn_boot_id = p_boot_id, turn_pid = p_pid,
        turn_start_ticks = p_start_ticks
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_token
    RETURNING j.job_id
$function$
