CREATE OR REPLACE FUNCTION birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_in_s double precision DEFAULT NULL::double precision)
 RETURNS TABLE(inserted boolean, differing text[], mailbox_added boolean)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_payload jsonb := p_payload::jsonb;
    v_recovery jsonb := p_recovery::jsonb;
    v_stored birddog.jobs%ROWTYPE;
    v_from text;
    v_agent text := birddog._caller_agent();
    v_limits record;
    v_priority smallint := p_priority;
    v_created timestamptz := coalesce(p_created_at, clock_timestamp());
    v_reply_to jsonb;
    v_expires interval := make_interval(secs => p_expires_in_s);
    v_to text;
    v_queue_key text;
    v_kind text;
    v_digest_at timestamptz;
BEGIN
    -- An agent's login sends as itself only: the mail's from is its agent.
    IF v_agent IS NOT NULL
       AND (birddog._field(v_payload -> 'mail', 'from', 'from_') ->> 'agentId')
           IS DISTINCT FROM v_agent
    THEN
        RAISE EXCEPTION 'an agent enqueues mail from itself only (from.agentId %)', v_agent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF p_expires_in_s IS NOT NULL AND NOT p_expires_in_s > 0 THEN
        RAISE EXCEPTION 'a job expires a positive number of seconds after it is enqueued'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The server's limits (birddog._limits), never the caller's own: sizes and the replyTo
    -- count refused, priority and age clamped (a bound caller's job is never older than
    -- max_age_s, nor newer than now, nor above max_priority either way).
    SELECT * INTO v_limits FROM birddog._limits();
    IF v_limits.bound THEN
        IF greatest(char_length(p_job_id), char_length(p_queue), char_length(p_lane)) > 256
           OR octet_length(p_recovery) > 4096 OR octet_length(p_traceparent) > 512 THEN
            RAISE EXCEPTION 'a job id, queue and lane are at most 256 characters, its recovery and traceparent a few'
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        IF octet_length(v_payload #>> '{mail,content}') > v_limits.max_content_bytes THEN
            RAISE EXCEPTION 'the mail content is %; the server''s limit is %',
                birddog._format_bytes(octet_length(v_payload #>> '{mail,content}')),
                birddog._format_bytes(v_limits.max_content_bytes)
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        -- Beside the content: addresses, key and ids, a quarter of a MiB at the most.
        IF octet_length(p_payload) > v_limits.max_content_bytes::bigint + 262144 THEN
            RAISE EXCEPTION 'the job payload is %; the server''s limit is % beside the content',
                birddog._format_bytes(octet_length(p_payload)), birddog._format_bytes(262144)
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        v_reply_to := birddog._field(v_payload -> 'mail', 'replyTo', 'reply_to');
        IF jsonb_typeof(v_reply_to) = 'array'
           AND jsonb_array_length(v_reply_to) > v_limits.max_reply_to THEN
            RAISE EXCEPTION 'the mail has % replyTo addresses; the server''s limit is %',
                jsonb_array_length(v_reply_to), v_limits.max_reply_to
                USING ERRCODE = 'program_limit_exceeded';
        END IF;
        v_priority := greatest(-v_limits.max_priority, least(v_limits.max_priority, p_priority));
        v_created := least(
            greatest(v_created, clock_timestamp() - make_interval(secs => v_limits.max_age_s)),
            clock_timestamp()
        );
    END IF;
    -- The agent the mail is addressed to (NULL: no mail, or not BirdDog's).
    v_to := birddog._address(v_payload -> 'mail' -> 'to') ->> 'agentId';
    v_kind := CASE WHEN v_to IS NULL THEN 'task' ELSE coalesce(v_payload ->> 'kind', 'task') END;
    -- Informational mail waits for its digest (birddog.core.digests): the first time of its
    -- agent's route's schedule at or after it was sent; its expiry counts from then.
    IF v_kind IN ('report', 'receipt') THEN
        v_digest_at := birddog._digest_at(v_to, v_created);
    END IF;
    -- A queued job, nothing else: state, lease and claim are not the caller's to give. The
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent. A mail's
    -- kind is the payload's (a task when it names none: the TypeScript BirdDog's mail); a
    -- job that is not BirdDog mail is a task, whatever its own payload calls a kind.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at, kind, digest_at
    )
    VALUES (
        p_job_id, p_queue, p_lane, v_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before,
        coalesce(v_digest_at, v_created) + v_expires, v_kind, v_digest_at
    )
    -- Any unique conflict: the job id taken, or the mail key another job's (a mail key
    -- names one job: its replies, their visibility and acknowledgement follow that job).
    ON CONFLICT DO NOTHING
    RETURNING j.queue_key INTO v_queue_key;
    IF FOUND THEN
        -- Its queue's head: this job, when it comes first (or the queue had none queued);
        -- the queue due as soon as this job may be claimed (its not-before and its digest
        -- passed), if sooner. The upsert works on
        -- the row's latest version, whoever changed it last.
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        VALUES (
            v_queue_key, p_queue, v_to, v_priority, v_created, p_job_id,
            greatest(p_not_before, v_digest_at), 0
        )
        ON CONFLICT (queue_key) DO UPDATE
        SET agent_id = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                 excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                            THEN excluded.agent_id ELSE h.agent_id END,
            priority = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                 excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                            THEN excluded.priority ELSE h.priority END,
            created_at = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                                   excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                              THEN excluded.created_at ELSE h.created_at END,
            job_id = CASE WHEN h.job_id IS NULL OR (-excluded.priority, excluded.created_at,
                               excluded.job_id) < (-h.priority, h.created_at, h.job_id)
                          THEN excluded.job_id ELSE h.job_id END,
            due_at = CASE WHEN h.job_id IS NULL THEN excluded.due_at
                          WHEN h.due_at IS NULL OR excluded.due_at IS NULL THEN NULL
                          ELSE least(h.due_at, excluded.due_at) END;
        PERFORM pg_notify('birddog_jobs', p_queue);
        mailbox_added := false;
        IF p_sender_mailbox THEN
            -- The asker's own mailbox: only the sender of the mail just enqueued, and only
            -- when it has no route (no URL, no secret: the routes check admits no other).
            v_from := birddog._field(v_payload -> 'mail', 'from', 'from_') ->> 'agentId';
            IF v_from IS NULL THEN
                RAISE EXCEPTION 'a mailbox route is given only to the sender of mail'
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            INSERT INTO birddog.routes AS r (agent_id, kind, enabled)
            VALUES (v_from, 'mailbox', true)
            ON CONFLICT (agent_id) DO NOTHING;
            mailbox_added := FOUND;
        END IF;
        inserted := true;
        differing := '{}';
        RETURN NEXT;
        RETURN;
    END IF;
    -- A replay: accepted only when every field matches the stored job.
    inserted := false;
    mailbox_added := false;
    SELECT * INTO v_stored FROM birddog.jobs j WHERE j.job_id = p_job_id;
    IF NOT FOUND THEN
        -- No job has this id: the mail key is another job's ('mail.key', and nothing of
        -- that job), or the conflicting job is gone or not in this snapshot (NULL).
        differing := CASE WHEN EXISTS (
            SELECT 1 FROM birddog.jobs j
            WHERE (j.payload #>> '{mail,key}') = (v_payload #>> '{mail,key}')
        ) THEN ARRAY['mail.key'] END;
        RETURN NEXT;
        RETURN;
    END IF;
    IF NOT birddog.job_visible(v_stored.sent_by, v_stored.payload) THEN
        -- A job the caller may not read: the id is taken ('job_id'), and nothing more (no
        -- field, no queue, no state).
        differing := ARRAY['job_id'];
        RETURN NEXT;
        RETURN;
    END IF;
    differing := array_remove(ARRAY[
        CASE WHEN v_stored.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN v_stored.lane IS DISTINCT FROM p_lane THEN 'lane' END,
        CASE WHEN v_stored.priority IS DISTINCT FROM v_priority THEN 'priority' END,
        CASE WHEN v_stored.payload IS DISTINCT FROM v_payload THEN 'payload' END,
        CASE WHEN v_stored.recovery IS DISTINCT FROM v_recovery THEN 'recovery' END,
        CASE WHEN v_stored.not_before IS DISTINCT FROM p_not_before THEN 'not_before' END,
        CASE WHEN (v_stored.expires_at - coalesce(v_stored.digest_at, v_stored.created_at))
                  IS DISTINCT FROM v_expires
             THEN 'expires_in_s' END
    ], NULL);
    RETURN NEXT;
END
$function$
