CREATE OR REPLACE FUNCTION birddog.a2a_push_route_add(p_agent_id text, p_url text, p_secret text)
 RETURNS TABLE(agent_id text, url text, secret text, enabled boolean, kind text, batch_size integer, held_at timestamp with time zone, previous_secret text, previous_secret_until timestamp with time zone, post_timeout_s double precision, max_age_s double precision, max_attempts integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    -- Store an A2A push config as its route: kind a2a, an agent id a2a-push:..., an http(s)
    -- URL (which `birddog a2a` checked against the push egress policy, and every drain
    -- checks again when it connects) and the caller's sealed secret; one post per reply,
    -- enabled. No row when that agent id has a route already. Never any other kind of
    -- route: a login with only this function cannot say where another agent's replies go.
    IF p_agent_id IS NULL OR NOT starts_with(p_agent_id, 'a2a-push:')
       OR length(p_agent_id) > 256 THEN
        RAISE EXCEPTION 'a push config''s route has an agent id a2a-push:...'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_url IS NULL OR length(p_url) > 4096 OR p_url !~* '^https?://'
       OR coalesce(length(p_secret), 0) NOT BETWEEN 1 AND 8192 THEN
        RAISE EXCEPTION 'a push config''s route needs an http(s) URL and a secret'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    INSERT INTO birddog.routes AS r (agent_id, url, secret, enabled, kind, batch_size)
    VALUES (p_agent_id, p_url, p_secret, true, 'a2a', 1)
    ON CONFLICT (agent_id) DO NOTHING
    RETURNING r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
              r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s,
              r.max_attempts;
END
$function$
