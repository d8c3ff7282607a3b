CREATE OR REPLACE FUNCTION birddog.session_known(p_agent_id text, p_session_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
    -- Whether an agent session can be asked (it has a route, or its session was sent work
    -- before, by anyone, as this agent's session), without showing the caller anyone's jobs.
    SELECT EXISTS (SELECT 1 FROM birddog.routes r WHERE r.agent_id = p_agent_id)
        OR EXISTS (SELECT 1 FROM birddog.jobs j WHERE j.agent_id = p_agent_id AND j.queue = p_session_id)
$function$
