CREATE OR REPLACE FUNCTION birddog.live_leave(p_agent_id text, p_session text, p_holder text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
BEGIN
    -- End p_holder's live session of p_agent_id's p_session (a clean exit); whether it had
    -- one. Its queued jobs are announced on birddog_jobs, so a worker takes them now
    -- rather than at its next look. An agent's login ends its own agent's sessions only;
    -- every login ends only the live sessions it announced (session_user).
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent ends live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    DELETE FROM birddog.live_sessions l
    WHERE l.queue_key = v_key AND l.holder = p_holder AND l.login = session_user;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM birddog.jobs j WHERE j.state = 'queued' AND j.queue_key = v_key
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN true;
END
$function$
