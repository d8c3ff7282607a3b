CREATE OR REPLACE FUNCTION birddog.create_agent_login(p_agent_id text, p_password text)
 RETURNS text
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_login text;
BEGIN
    -- A login for one agent, under the rules of birddog_agent; returns its name. Roles
    -- belong to the whole server, so the name holds a digest of the database's name and
    -- the agent id: two databases' agents never share one. Run with the caller's rights:
    -- an operator who may create roles.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'birddog_agent') THEN
        RAISE EXCEPTION 'agent logins need the roles: run birddog migrate --roles first'
            USING ERRCODE = 'undefined_object';
    END IF;
    v_login := 'bd_agent_'
        || left(regexp_replace(lower(p_agent_id), '[^a-z0-9_]', '_', 'g'), 24) || '_'
        || left(encode(sha256(convert_to(current_database() || '/' || p_agent_id, 'UTF8')),
                       'hex'), 12);
    EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE birddog_agent', v_login, p_password);
    INSERT INTO birddog.agent_logins (login, agent_id) VALUES (v_login, p_agent_id);
    RETURN v_login;
END
$function$
