CREATE OR REPLACE FUNCTION birddog.a2a_reply_to_add(p_job_id text, p_address jsonb, p_caller_agent text, OUT result text)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_address jsonb;
    v_job birddog.jobs%ROWTYPE;
    v_agent text;
BEGIN
    -- Add p_address to job p_job_id's mail's replyTo (a push config set later).
    v_address := birddog._address(p_address);
    IF v_address IS NULL THEN
        RAISE EXCEPTION 'a reply address is an agent address object (kind, agentId, sessionId)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT j.* INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND OR jsonb_typeof(v_job.payload #> '{mail,replyTo}') IS DISTINCT FROM 'array' THEN
        result := 'missing';
        RETURN;
    END IF;
    -- A job this login may not read is not there for it (its existence stays unknown).
    IF NOT birddog.job_visible(v_job.sent_by, v_job.payload) THEN
        result := 'missing';
        RETURN;
    END IF;
    -- The caller's token names p_caller_agent (the HTTP layer checked it): the mail must be
    -- from that agent, and an agent's login speaks for itself only.
    v_agent := birddog._caller_agent();
    IF p_caller_agent IS NULL
       OR (v_job.payload #>> '{mail,from,agentId}') IS DISTINCT FROM p_caller_agent
       OR (v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_caller_agent) THEN
        result := 'not_caller';
        RETURN;
    END IF;
    IF v_job.state = 'settled' THEN
        result := 'settled';
        RETURN;
    END IF;
    IF (v_job.payload #> '{mail,replyTo}') @> jsonb_build_array(v_address) THEN
        result := 'present';
        RETURN;
    END IF;
    UPDATE birddog.jobs j
    SET payload = jsonb_set(j.payload, '{mail,replyTo}', (j.payload #> '{mail,replyTo}') || jsonb_build_array(v_address)),
        updated_at = now()
    WHERE j.job_id = v_job.job_id;
    result := 'added';
END
$function$
