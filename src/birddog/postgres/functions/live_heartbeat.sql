CREATE OR REPLACE FUNCTION birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
    -- The TTL is the server's to bound: a holder that stops beating stops counting within
    -- seconds, whatever it asked for.
    v_ttl double precision := least(greatest(coalesce(p_ttl_s, 5), 1), 15);
    v_previous timestamptz;
    v_until timestamptz;
BEGIN
    -- Announce (or renew) p_holder's live session of p_agent_id's p_session until now plus
    -- the TTL; when it is due. An agent's login announces its own agent's sessions only.
    -- A row belongs to the login that announced it (session_user): another login's holder
    -- is neither renewed nor taken over (refused) until its row is gone.
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent announces live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(length(p_agent_id), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_session), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_holder), 0) NOT BETWEEN 1 AND 256
       OR strpos(p_agent_id, E'\x1f') > 0 THEN
        RAISE EXCEPTION 'a live session needs an agent id, a session id and a holder of 1 to 256 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_until := now() + make_interval(secs => v_ttl);
    SELECT l.seen_at INTO v_previous
    FROM birddog.live_sessions l
    WHERE l.queue_key = v_key AND l.holder = p_holder AND l.expires_at > now()
      AND l.login = session_user
    FOR UPDATE;
    INSERT INTO birddog.live_sessions AS l (holder, agent_id, session, login, started_at, seen_at, expires_at)
    VALUES (p_holder, p_agent_id, p_session, session_user, now(), now(), v_until)
    ON CONFLICT (queue_key, holder) DO UPDATE
    SET seen_at = now(), expires_at = excluded.expires_at,
        -- A row whose TTL had passed is a new live session.
        started_at = CASE WHEN v_previous IS NULL THEN now() ELSE l.started_at END
    WHERE l.login = session_user;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'another login holds this live session'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Rows whose holder is gone for a while (its process died without leaving).
    DELETE FROM birddog.live_sessions l WHERE l.expires_at < now() - interval '1 minute';
    -- A worker waits for a notification (or its backstop): tell it of the jobs of this
    -- queue whose grace ended since the previous beat, so it comes back when the grace ends.
    IF v_previous IS NOT NULL AND EXISTS (
        SELECT 1 FROM birddog.jobs j
        LEFT JOIN birddog.routes r ON r.agent_id = p_agent_id
        WHERE j.state = 'queued' AND j.queue_key = v_key
          AND j.created_at + make_interval(secs => coalesce(r.live_grace_s, 30))
              BETWEEN v_previous AND now()
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN v_until;
END
$function$
