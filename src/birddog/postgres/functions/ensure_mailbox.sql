CREATE OR REPLACE FUNCTION birddog.ensure_mailbox(p_agent_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
BEGIN
    -- Give an agent without a route a mailbox route (no URL, no secret); whether one was
    -- added. Only an operator, or the agent's own login, may: for any other login nothing
    -- is added (a sender gets its own mailbox with the first mail it sends, through
    -- enqueue), so no login gives another agent a route.
    IF NOT (birddog._sees_everything() OR birddog._caller_agent() = p_agent_id) THEN
        RETURN false;
    END IF;
    INSERT INTO birddog.routes AS r (agent_id, kind, enabled)
    VALUES (p_agent_id, 'mailbox', true)
    ON CONFLICT (agent_id) DO NOTHING;
    RETURN FOUND;
END
$function$
