CREATE OR REPLACE FUNCTION birddog._caller_agent()
 RETURNS text
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- The agent the session's login acts as: its birddog.agent_logins row, for a member of
    -- birddog_agent ('' when it has none: it acts as nobody). NULL for every other login.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'birddog_agent') THEN
        RETURN NULL;
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, 'birddog_agent', 'MEMBER') THEN
        RETURN NULL;
    END IF;
    RETURN coalesce(
        (SELECT l.agent_id FROM birddog.agent_logins l WHERE l.login = session_user), ''
    );
END
$function$
