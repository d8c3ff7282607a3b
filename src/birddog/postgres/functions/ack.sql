CREATE OR REPLACE FUNCTION birddog.ack(p_keys text[], p_read_at timestamp with time zone)
 RETURNS TABLE(key text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
BEGIN
    -- Lost in a server crash, an acknowledgement leaves the reply unread (revision
    -- 0017): no WAL flush for it, until the caller's transaction ends.
    PERFORM set_config('synchronous_commit', 'off', true);
    -- Mark mailbox replies read; returns the keys that were unread. Only rows the caller
    -- may read (mailbox_visible): an agent's login acknowledges its own mailbox only.
    RETURN QUERY
    UPDATE birddog.mailbox m
    SET read_at = p_read_at
    WHERE m.key = ANY(p_keys) AND m.read_at IS NULL
      AND birddog.mailbox_visible(m.agent_id, m.in_reply_to)
    RETURNING m.key;
END
$function$
