CREATE OR REPLACE FUNCTION birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_mail record;
    -- In the database's collation, whatever the caller's arguments carry (a job's ids sort
    -- COLLATE "C", and would give it to every text variable here): a comparison then takes
    -- the column's own collation, so the routes' and queue heads' indexes serve it.
    v_keys text[] COLLATE "default";
    v_agents text[] COLLATE "default";
    v_sessions text[] COLLATE "default";
    v_replies jsonb[];
    v_inserted text[] COLLATE "default";
    v_dropped text[] COLLATE "default";
    v_direct text[] COLLATE "default";
    v_queue_key text COLLATE "default";
    v_asker jsonb;
BEGIN
    -- Settle the locked job and write the replies its STORED mail owes (fanout.replies_for),
    -- then arm the wake (outbox_insert_rows + wake_schedule): all in the caller's
    -- transaction, so the settlement never commits without its fan-out.
    UPDATE birddog.jobs j
    SET state = 'settled', outcome = p_outcome, result_content = p_content,
        diagnostic = p_diagnostic,
        cancel_requested_at = CASE WHEN p_records_cancellation
                                   THEN coalesce(j.cancel_requested_at, p_now)
                                   ELSE j.cancel_requested_at END,
        cancel_content = CASE WHEN NOT p_records_cancellation OR j.cancel_requested_at IS NOT NULL
                              THEN j.cancel_content ELSE p_content END,
        settled_at = p_now, lease_expires_at = NULL, slot = NULL, updated_at = now()
    WHERE j.job_id = p_job_id
    RETURNING j.queue_key INTO v_queue_key;
    PERFORM birddog._queue_heads_refresh(ARRAY[v_queue_key]);
    keys := '{}';
    SELECT * INTO v_mail FROM birddog._agent_mail(p_job_id, p_queue, p_payload);
    unreadable := v_mail.problem;
    IF unreadable IS NULL AND octet_length(p_content) > p_max_content_bytes THEN
        unreadable := 'content';
    END IF;
    IF unreadable IS NOT NULL OR v_mail.mail_key IS NULL THEN
        RETURN;
    END IF;
    SELECT
        array_agg('outbox:' || v_mail.mail_key || ':reply:' || (r.n - 1) ORDER BY r.n),
        array_agg(r.address ->> 'agentId' ORDER BY r.n),
        array_agg(r.address ->> 'sessionId' ORDER BY r.n),
        array_agg(
            jsonb_build_object(
                'key', 'outbox:' || v_mail.mail_key || ':reply:' || (r.n - 1),
                'inReplyTo', v_mail.mail_key,
                'to', r.address,
                'from', v_mail.recipient,
                'replyTo', '[]'::jsonb,
                'content', CASE WHEN p_content = ''
                                THEN 'The delegated work ended ' || p_outcome
                                     || ' without reply text.'
                                ELSE p_content END,
                'createdAt', floor(extract(epoch FROM p_now) * 1000)::bigint,
                'reply', jsonb_build_object('commandId', v_mail.command_id, 'outcome', p_outcome)
                    || CASE
                        WHEN p_reply_diagnostic IS NOT NULL
                         AND p_outcome IN ('failed', 'interrupted', 'outcome_unknown')
                        THEN jsonb_build_object('diagnostic', p_reply_diagnostic)
                        ELSE '{}'::jsonb
                    END
            )
            ORDER BY r.n
        )
    INTO v_keys, v_agents, v_sessions, v_replies
    FROM jsonb_array_elements(v_mail.reply_to) WITH ORDINALITY AS r(address, n);
    IF v_keys IS NULL THEN
        RETURN;
    END IF;
    -- A reply to an agent whose route is a mailbox (enabled) is delivered here, with its
    -- receipt, as the drain would: nothing about such a recipient can fail, so the reply
    -- skips the daemon's hop and an ask hears back at the settlement's commit. A key
    -- that already has a row or a receipt is left to the path below (which skips it).
    -- The reply to the asker of an ask (marked askerMailbox: send_mail marks every ask)
    -- is delivered here too, whatever that route is now (an inbox URL, held, another kind
    -- than when it asked): the ask waits on the mailbox.
    IF birddog._field(p_payload, 'askerMailbox', 'asker_mailbox') = 'true'::jsonb THEN
        v_asker := birddog._address(birddog._field(p_payload -> 'mail', 'from', 'from_'));
        -- A row already owed to the asker under its reply key (one job per mail key, and
        -- a job settles once: left by an earlier job with this key since pruned, or by a
        -- fan-out of the caller's own) gives way to this delivery, so the reply reaches
        -- the mailbox once and never the route. A row a drain holds under a live lease
        -- is left to it: it may be posting now (the path below then skips the key).
        DELETE FROM birddog.outbox o
        USING unnest(v_keys, v_agents, v_sessions) AS r(key, agent_id, session_id)
        WHERE o.key = r.key
          AND r.agent_id = v_asker ->> 'agentId' AND r.session_id = v_asker ->> 'sessionId'
          AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= p_now);
    END IF;
    WITH direct AS (
        SELECT r.key, r.agent_id, r.session_id, r.reply
        FROM unnest(v_keys, v_agents, v_sessions, v_replies) AS r(key, agent_id, session_id, reply)
        LEFT JOIN birddog.routes rt ON rt.agent_id = r.agent_id
        WHERE ((rt.kind = 'mailbox' AND rt.enabled)
               OR (r.agent_id = v_asker ->> 'agentId' AND r.session_id = v_asker ->> 'sessionId'))
          AND NOT EXISTS (SELECT 1 FROM birddog.outbox o WHERE o.key = r.key)
    ), receipted AS (
        INSERT INTO birddog.receipts AS rc (
            key, delivered_at, attempts, recipient_agent_id, recipient_session_id, command_id,
            outcome, attempt_log
        )
        SELECT d.key, p_now, 1, d.agent_id, d.session_id, v_mail.command_id, p_outcome,
               -- The attempt the drain would log for a mailbox delivery (attempt_entry).
               jsonb_build_array(jsonb_build_object(
                   'at', to_char(p_now AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                   'result', 'accepted', 'status', NULL, 'ms', 0, 'error', NULL
               ))
        FROM direct d
        ON CONFLICT (key) DO NOTHING
        RETURNING rc.key
    ), delivered AS (
        INSERT INTO birddog.mailbox (
            key, agent_id, session_id, in_reply_to, command_id, outcome, reply, delivered_at
        )
        SELECT d.key, d.agent_id, d.session_id, v_mail.mail_key, v_mail.command_id,
               p_outcome, d.reply, p_now
        FROM direct d
        JOIN receipted x ON x.key = d.key
        ON CONFLICT (key) DO NOTHING
    )
    SELECT coalesce(array_agg(x.key), '{}') INTO v_direct FROM receipted x;
    IF cardinality(v_direct) > 0 THEN
        -- Announced at commit, once per agent, as the drain's outbox_notify_mailbox does.
        PERFORM pg_notify('birddog_mailbox', a.agent_id)
        FROM (
            SELECT DISTINCT r.agent_id
            FROM unnest(v_keys, v_agents) AS r(key, agent_id)
            WHERE r.key = ANY(v_direct)
        ) AS a;
        keys := ARRAY(
            SELECT k.key FROM unnest(v_keys) WITH ORDINALITY AS k(key, n)
            WHERE k.key = ANY(v_direct)
            ORDER BY k.n
        );
    END IF;
    -- The settlement side of the wake protocol (wake_guard): the wake statement below
    -- takes its snapshot only after this lock is granted.
    PERFORM pg_advisory_xact_lock_shared(27700487749136231);
    WITH inserted AS (
        INSERT INTO birddog.outbox AS o (
            key, recipient_agent_id, recipient_session_id, in_reply_to, command_id, outcome,
            reply, state, attempts, deferrals, due_at, created_at, traceparent
        )
        SELECT r.key, r.agent_id, r.session_id, v_mail.mail_key, v_mail.command_id,
               p_outcome, r.reply, 'pending', 0, 0, p_now, p_now,
               coalesce(p_traceparent, p_job_traceparent)
        FROM unnest(v_keys, v_agents, v_sessions, v_replies) AS r(key, agent_id, session_id, reply)
        WHERE NOT EXISTS (SELECT 1 FROM birddog.receipts rc WHERE rc.key = r.key)
        ON CONFLICT (key) DO NOTHING
        RETURNING o.key
    )
    SELECT coalesce(array_agg(i.key), '{}') INTO v_inserted FROM inserted i;
    IF cardinality(v_inserted) = 0 THEN
        RETURN;
    END IF;
    -- A fresh snapshot: drop the rows whose receipt committed while their insert waited,
    -- and arm the wake (moved or made, and announced, only when it would come later).
    WITH gone AS (
        DELETE FROM birddog.outbox o
        USING birddog.receipts rc
        WHERE o.key = ANY(v_inserted) AND rc.key = o.key
        RETURNING o.key
    ), moved AS (
        UPDATE birddog.wake w
        SET wake_at = p_now
        WHERE w.id AND p_wake AND (w.wake_at IS NULL OR w.wake_at > p_now)
        RETURNING pg_notify('birddog_wake', '')
    ), made AS (
        INSERT INTO birddog.wake AS w (id, wake_at)
        SELECT true, p_now
        WHERE p_wake AND NOT EXISTS (SELECT 1 FROM birddog.wake)
        ON CONFLICT (id) DO UPDATE SET wake_at = least(w.wake_at, excluded.wake_at)
        RETURNING pg_notify('birddog_wake', '')
    )
    SELECT coalesce(array_agg(g.key), '{}') INTO v_dropped FROM gone g;
    keys := ARRAY(
        SELECT k.key FROM unnest(v_keys) WITH ORDINALITY AS k(key, n)
        WHERE (k.key = ANY(v_inserted) AND NOT (k.key = ANY(v_dropped)))
           OR k.key = ANY(v_direct)
        ORDER BY k.n
    );
END
$function$
