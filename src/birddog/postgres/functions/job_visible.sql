CREATE OR REPLACE FUNCTION birddog.job_visible(p_sent_by text, p_payload jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text;
BEGIN
    -- Whether the caller may read a job: the jobs its login sent, and for an agent's
    -- login the jobs whose mail is from or to its agent (the work it sent and serves).
    IF birddog._sees_everything() OR p_sent_by = session_user THEN
        RETURN true;
    END IF;
    v_agent := birddog._caller_agent();
    RETURN v_agent IS NOT NULL AND v_agent <> ''
       AND v_agent IN (p_payload #>> '{mail,from,agentId}', p_payload #>> '{mail,to,agentId}');
END
$function$
