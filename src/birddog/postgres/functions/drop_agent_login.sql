CREATE OR REPLACE FUNCTION birddog.drop_agent_login(p_agent_id text)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_login text;
BEGIN
    -- End an agent's login: forgotten, and dropped (with the caller's rights). Returns it.
    DELETE FROM birddog.agent_logins l WHERE l.agent_id = p_agent_id RETURNING l.login INTO v_login;
    IF v_login IS NOT NULL THEN
        EXECUTE format('DROP ROLE IF EXISTS %I', v_login);
    END IF;
    RETURN v_login;
END
$function$
