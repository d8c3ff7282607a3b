CREATE OR REPLACE FUNCTION birddog.a2a_push_route(p_agent_id text)
 RETURNS TABLE(agent_id text, url text, secret text, enabled boolean, kind text, batch_size integer, held_at timestamp with time zone, previous_secret text, previous_secret_until timestamp with time zone, post_timeout_s double precision, max_age_s double precision, max_attempts integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
    -- The route of one A2A push config (kind a2a, agent id a2a-push:...), URL and sealed
    -- secret included: what `birddog a2a` stored for a caller and reads back. Never another
    -- route's URL or secret (no row).
    SELECT r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
           r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s,
           r.max_attempts
    FROM birddog.routes r
    WHERE r.agent_id = p_agent_id AND r.kind = 'a2a' AND starts_with(r.agent_id, 'a2a-push:')
$function$
