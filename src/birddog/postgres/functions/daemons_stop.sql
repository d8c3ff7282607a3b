CREATE OR REPLACE FUNCTION birddog.daemons_stop(p_daemon_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
BEGIN
    -- Mark the caller's process p_daemon_id stopped, on its clean stop: stopped now, no
    -- longer running. Only the login that registered the row may (session_user); whether
    -- a running row of its was marked.
    UPDATE birddog.daemons d SET stopped_at = now()
    WHERE d.daemon_id = p_daemon_id AND d.login = session_user AND d.stopped_at IS NULL;
    RETURN FOUND;
END
$function$
