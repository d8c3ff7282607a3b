CREATE OR REPLACE FUNCTION birddog.ask_standing(p_key text, p_agent_id text, p_session_id text, p_within_s double precision)
 RETURNS TABLE(workers_recent integer, daemons_recent integer, reply_key text, reply_state text, reply_attempts integer, reply_due_at timestamp with time zone, last_error text, dead_reason text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
    -- The workers and drain daemons running that beat within p_within_s seconds, and the
    -- reply to mail p_key owed to p_agent_id:p_session_id (state, attempts, last error;
    -- never its content), when the caller may read that reply in the mailbox.
    SELECT
        (SELECT count(*) FROM birddog.daemons d
         WHERE d.kind = 'worker' AND d.stopped_at IS NULL
           AND d.seen_at > now() - make_interval(secs => p_within_s))::integer,
        (SELECT count(*) FROM birddog.daemons d
         WHERE d.kind = 'drain' AND d.stopped_at IS NULL
           AND d.seen_at > now() - make_interval(secs => p_within_s))::integer,
        o.key, o.state, coalesce(o.attempts, 0), o.due_at, o.last_error, o.dead_reason
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (
        SELECT o.key, o.state, o.attempts, o.due_at, o.last_error, o.dead_reason
        FROM birddog.outbox o
        WHERE o.recipient_agent_id = p_agent_id AND o.recipient_session_id = p_session_id
          AND o.in_reply_to = p_key AND birddog.mailbox_visible(p_agent_id, p_key)
        ORDER BY o.key
        LIMIT 1
    ) o ON true
$function$
