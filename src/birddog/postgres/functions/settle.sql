CREATE OR REPLACE FUNCTION birddog.settle(p_job_id text, p_claim_token uuid, p_event text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_cancel_diagnostic text, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, cause text, diagnostic text, content text, keys text[], unreadable text, reason text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_claim boolean;
    v_replay boolean;
    v_cancel record;
    v_done record;
    v_outcome text;
    v_content text;
    v_diagnostic text;
    v_reply_diagnostic text;
    v_agent text := birddog._caller_agent();
    -- The content limit: the caller's, never above the server's (birddog._limits).
    v_max_content_bytes integer := least(
        p_max_content_bytes, (SELECT l.max_content_bytes FROM birddog._limits() l)
    );
BEGIN
    -- Diagnostics are one bounded line (bounded_diagnostic: 200 characters), whoever calls.
    p_diagnostic := left(p_diagnostic, 200);
    p_reply_diagnostic := left(p_reply_diagnostic, 200);
    p_cancel_diagnostic := left(p_cancel_diagnostic, 200);
    -- What a worker reports about a job it holds (lifecycle.decide for a result, p_event
    -- 'result', or a stop, 'stop'), carried out in one call. The caller gives the texts
    -- Python makes: for a result, the settlement without a cancellation (p_outcome,
    -- p_content, p_diagnostic: a result that cannot be stored already made 'failed'); for
    -- a stop, the bounded diagnostic. p_reply_diagnostic is what a reply carries for it;
    -- p_cancel_diagnostic the bounded diagnostic a recorded cancellation settles with.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        decision := 'missing';
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_agent IS NOT NULL AND (v_job.payload #>> '{mail,to,agentId}') IS DISTINCT FROM v_agent
    THEN
        decision := 'refuse';
        reason := 'the job is not addressed to this agent';
        RETURN NEXT;
        RETURN;
    END IF;
    v_claim := p_claim_token IS NOT NULL AND v_job.claim_token = p_claim_token;
    IF v_job.state = 'settled' THEN
        -- The same claim settling again is a replay of what is stored, not an error.
        IF p_event = 'result' THEN
            v_replay := v_claim AND v_job.outcome = coalesce(
                CASE WHEN v_job.cancel_requested_at IS NOT NULL THEN 'cancelled' END, p_outcome
            );
        ELSE
            v_replay := v_claim AND v_job.outcome IN ('interrupted', 'cancelled');
        END IF;
        IF coalesce(v_replay, false) THEN
            decision := 'keep';
            outcome := v_job.outcome;
            keys := '{}';
            RETURN NEXT;
            RETURN;
        END IF;
        decision := 'refuse';
        reason := 'the job is already settled ' || coalesce(v_job.outcome, 'with no outcome');
        RETURN NEXT;
        RETURN;
    END IF;
    IF v_job.state <> 'running' OR NOT v_claim THEN
        decision := 'refuse';
        reason := 'the job is not running under this claim (it is ' || v_job.state || ')';
        RETURN NEXT;
        RETURN;
    END IF;
    decision := 'settle';
    IF v_job.cancel_requested_at IS NOT NULL THEN
        -- A recorded cancellation wins over whatever the worker reports.
        SELECT * INTO v_cancel FROM birddog._cancelled(
            coalesce(v_job.cancel_content, ''), p_cancel_diagnostic, v_max_content_bytes
        );
        v_outcome := 'cancelled';
        v_content := v_cancel.content;
        v_diagnostic := v_cancel.diagnostic;
        v_reply_diagnostic := NULL;
        cause := 'cancelled';
        content := v_cancel.content;
    ELSIF p_event = 'result' AND octet_length(p_content) > v_max_content_bytes THEN
        -- A result above the server's limit settles failed, as result_settlement makes one
        -- above the worker's: nothing of it is stored or fanned out.
        v_outcome := 'failed';
        v_content := '';
        v_diagnostic := 'handler returned ' || birddog._format_bytes(octet_length(p_content))
            || '; the limit is ' || birddog._format_bytes(v_max_content_bytes);
        v_reply_diagnostic := v_diagnostic;
        cause := 'unstorable_result';
        content := '';
    ELSIF p_event = 'result' THEN
        v_outcome := p_outcome;
        v_content := p_content;
        v_diagnostic := p_diagnostic;
        v_reply_diagnostic := p_reply_diagnostic;
    ELSIF v_job.recovery_count < birddog._max_recoveries(v_job.recovery) THEN
        PERFORM birddog._requeue(v_job.job_id, p_diagnostic);
        decision := 'requeue';
        diagnostic := p_diagnostic;
        keys := '{}';
        RETURN NEXT;
        RETURN;
    ELSE
        v_outcome := 'interrupted';
        v_content := '';
        v_diagnostic := p_diagnostic;
        v_reply_diagnostic := p_reply_diagnostic;
        cause := 'interrupted';
    END IF;
    SELECT * INTO v_done FROM birddog._settle_job(
        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
        v_outcome, v_content, v_diagnostic, v_reply_diagnostic, false, p_now,
        v_max_content_bytes, p_traceparent, p_wake
    );
    outcome := v_outcome;
    diagnostic := v_diagnostic;
    keys := v_done.keys;
    unreadable := v_done.unreadable;
    RETURN NEXT;
END
$function$
