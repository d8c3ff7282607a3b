CREATE OR REPLACE FUNCTION birddog.daemons_beat(p_daemon_id text, p_kind text, p_host text, p_pid integer)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
BEGIN
    -- Record that the caller's process p_daemon_id (a drain daemon or a worker) is alive:
    -- its row in birddog.daemons is inserted, or seen now and running again. A row belongs
    -- to the login that registered it (session_user): another login's row is never
    -- touched (false). Only an operator's login (the daemon role, the owner, a superuser)
    -- records a drain; the times are the server's (a row is never aged, never dated ahead).
    -- Then rows not seen for an hour are forgotten, but the last of each kind, so `birddog
    -- check` can still say when a daemon last beat.
    IF p_kind IS NULL OR p_kind NOT IN ('drain', 'worker') THEN
        RAISE EXCEPTION 'a process row is a drain or a worker, not %', coalesce(p_kind, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_kind = 'drain' AND NOT birddog._sees_everything() THEN
        RAISE EXCEPTION 'only an operator''s login records a drain daemon'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(length(p_daemon_id), 0) NOT BETWEEN 1 AND 300
       OR coalesce(length(p_host), 0) NOT BETWEEN 1 AND 256
       OR coalesce(p_pid, 0) < 1 THEN
        RAISE EXCEPTION 'a process row needs an id of 1 to 300 characters, a host of 1 to 256 and a pid'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO birddog.daemons AS d (daemon_id, kind, host, pid, login, started_at, seen_at)
    VALUES (p_daemon_id, p_kind, p_host, p_pid, session_user, now(), now())
    ON CONFLICT (daemon_id) DO UPDATE SET seen_at = now(), stopped_at = NULL
    WHERE d.login = session_user AND d.kind = excluded.kind;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM birddog.daemons d
    WHERE d.seen_at < now() - interval '1 hour'
      AND d.daemon_id <> ALL (
          SELECT DISTINCT ON (l.kind) l.daemon_id
          FROM birddog.daemons l
          ORDER BY l.kind, l.seen_at DESC
      );
    RETURN true;
END
$function$
