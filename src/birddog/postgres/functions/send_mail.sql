CREATE OR REPLACE FUNCTION birddog.send_mail(p_key text, p_mailbox_agent text, p_require_mailbox boolean, p_mailbox_is_sender boolean, p_to_agent text, p_to_session text, p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_not_before timestamp with time zone, p_expires_in_s double precision)
 RETURNS TABLE(outcome text, route_kind text, stored_payload text, inserted boolean, differing text[], mailbox_added boolean)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
DECLARE
    v_kind text;
    v_stored text;
    v_wanted boolean;
    v_payload text;
    v_enqueued record;
BEGIN
    -- A checked send (birddog send, ask): the statements of one send's transaction, in
    -- order, with the caller's rights; the first check that fails ends the call and says
    -- which (the caller raises its typed error; nothing was written).
    PERFORM pg_advisory_xact_lock(hashtextextended('birddog.ask:' || p_key, 0));
    IF p_mailbox_agent IS NOT NULL THEN
        SELECT r.kind INTO v_kind FROM birddog.routes r WHERE r.agent_id = p_mailbox_agent;
    END IF;
    IF NOT birddog.session_known(p_to_agent, p_to_session) THEN
        RETURN QUERY SELECT 'unknown'::text, v_kind, NULL::text, false, NULL::text[], false;
        RETURN;
    END IF;
    SELECT j.payload::text INTO v_stored
    FROM birddog.jobs j
    WHERE (j.payload #>> '{mail,key}') = p_key
    ORDER BY j.created_at, j.job_id
    LIMIT 1;
    IF FOUND THEN
        RETURN QUERY SELECT 'stored'::text, v_kind, v_stored, false, NULL::text[], false;
        RETURN;
    END IF;
    v_wanted := p_mailbox_agent IS NOT NULL AND v_kind IS NULL;
    IF v_wanted AND NOT p_mailbox_is_sender THEN
        RETURN QUERY SELECT 'wrong_sender'::text, v_kind, NULL::text, false, NULL::text[], false;
        RETURN;
    END IF;
    -- Every ask: its job says so (askerMailbox, beside the mail), whatever the asker's
    -- route now, and the settlement delivers the reply to the asker into the asker's
    -- mailbox, where the ask waits, whatever that route is then (another kind, held:
    -- birddog._settle_job). Decided here once, so a route changed in between changes
    -- nothing for the ask. A plain send is not marked: its replies follow the route.
    v_payload := p_payload;
    IF p_require_mailbox AND p_mailbox_is_sender THEN
        v_payload := (p_payload::jsonb || '{"askerMailbox": true}'::jsonb)::text;
    END IF;
    SELECT e.inserted, e.differing, e.mailbox_added INTO v_enqueued
    FROM birddog.enqueue(
        p_job_id, p_queue, p_lane, p_priority, v_payload, p_recovery, p_created_at,
        p_traceparent, v_wanted, p_not_before, p_expires_in_s
    ) AS e;
    IF v_wanted AND NOT v_enqueued.mailbox_added THEN
        SELECT r.kind INTO v_kind FROM birddog.routes r WHERE r.agent_id = p_mailbox_agent;
    END IF;
    RETURN QUERY SELECT 'enqueued'::text, v_kind, NULL::text, v_enqueued.inserted,
        v_enqueued.differing, v_enqueued.mailbox_added;
END
$function$
