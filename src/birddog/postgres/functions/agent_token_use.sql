CREATE OR REPLACE FUNCTION birddog.agent_token_use(p_digest bytea)
 RETURNS TABLE(token_id text, agent_id text, session_id text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    tok birddog.agent_tokens%ROWTYPE;
BEGIN
    SELECT t.* INTO tok FROM birddog.agent_tokens t WHERE t.token_digest = p_digest;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF tok.last_used_at IS NULL OR tok.last_used_at < now() - interval '60 seconds' THEN
        UPDATE birddog.agent_tokens t SET last_used_at = now()
        WHERE t.token_id = tok.token_id;
    END IF;
    RETURN QUERY SELECT tok.token_id, tok.agent_id, tok.session_id;
END
$function$
