CREATE OR REPLACE FUNCTION birddog._sees_everything()
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- Operators see every row: superusers, the owner and daemon roles' members, and every
    -- login while the roles are not installed (then all of them act as the owner).
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'birddog_daemon') THEN
        RETURN true;
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN
        RETURN true;
    END IF;
    RETURN pg_catalog.pg_has_role(session_user, 'birddog_owner', 'MEMBER')
        OR pg_catalog.pg_has_role(session_user, 'birddog_daemon', 'MEMBER');
END
$function$
