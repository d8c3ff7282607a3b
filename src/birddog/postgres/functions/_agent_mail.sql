CREATE OR REPLACE FUNCTION birddog._agent_mail(p_job_id text, p_queue text, p_payload jsonb, OUT problem text, OUT mail_key text, OUT command_id text, OUT recipient jsonb, OUT reply_to jsonb)
 RETURNS record
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
DECLARE
    v_mail jsonb;
    v_session jsonb;
    v_command jsonb;
    v_key jsonb;
    v_reply_to jsonb;
    v_created jsonb;
    v_ids text;
BEGIN
    -- decode_agent_job: the mail of a BirdDog agent job, its addresses as the core writes
    -- them (recipient: the mail's to, which every reply is from; reply_to: the replyTo
    -- list). problem is NULL for an agent job (mail_key NULL: it has no mail), else the
    -- field that is not one: such a job owes no reply. Ids are 1 to 256 characters, the
    -- mail key 1 to 512, none with a control character; no field a model does not know.
    IF jsonb_typeof(p_payload) IS DISTINCT FROM 'object'
       OR (p_payload - ARRAY['sessionId', 'session_id', 'commandFactId', 'command_fact_id',
                             'mail', 'kind', 'askerMailbox', 'asker_mailbox']) <> '{}' THEN
        problem := 'payload';
        RETURN;
    END IF;
    -- askerMailbox beside the mail (an ask: its reply to the asker lands in the asker's
    -- mailbox): a boolean, when given.
    IF jsonb_typeof(birddog._field(p_payload, 'askerMailbox', 'asker_mailbox'))
       IS DISTINCT FROM 'boolean'
       AND (p_payload ? 'askerMailbox' OR p_payload ? 'asker_mailbox') THEN
        problem := 'askerMailbox';
        RETURN;
    END IF;
    -- The kind beside the mail (birddog.core.kinds): one of the four, when given.
    IF p_payload ? 'kind' AND coalesce(p_payload ->> 'kind', '') <> ALL (
        ARRAY['task', 'escalation', 'report', 'receipt']
    ) THEN
        problem := 'kind';
        RETURN;
    END IF;
    v_session := CASE WHEN p_payload ? 'sessionId' THEN p_payload -> 'sessionId'
                      ELSE p_payload -> 'session_id' END;
    v_command := CASE WHEN p_payload ? 'commandFactId' THEN p_payload -> 'commandFactId'
                      ELSE p_payload -> 'command_fact_id' END;
    IF jsonb_typeof(v_session) IS DISTINCT FROM 'string'
       OR jsonb_typeof(v_command) IS DISTINCT FROM 'string'
       OR char_length(p_job_id) NOT BETWEEN 1 AND 256
       OR char_length(p_queue) NOT BETWEEN 1 AND 256
       OR char_length(v_session #>> '{}') NOT BETWEEN 1 AND 256
       OR char_length(v_command #>> '{}') NOT BETWEEN 1 AND 256
       OR (p_job_id || p_queue || (v_session #>> '{}') || (v_command #>> '{}')) ~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]'
    THEN
        problem := 'sessionId';
        RETURN;
    END IF;
    IF v_session #>> '{}' <> p_queue THEN
        problem := 'sessionId';
        RETURN;
    END IF;
    v_mail := p_payload -> 'mail';
    IF v_mail IS NULL OR jsonb_typeof(v_mail) = 'null' THEN
        RETURN;
    END IF;
    IF jsonb_typeof(v_mail) <> 'object'
       OR (v_mail - ARRAY['key', 'to', 'from', 'from_', 'replyTo', 'reply_to', 'content',
                          'createdAt', 'created_at']) <> '{}' THEN
        problem := 'mail';
        RETURN;
    END IF;
    v_key := v_mail -> 'key';
    IF jsonb_typeof(v_key) IS DISTINCT FROM 'string'
       OR char_length(v_key #>> '{}') NOT BETWEEN 1 AND 512
       OR (v_key #>> '{}') ~ '[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]' THEN
        problem := 'mail.key';
        RETURN;
    END IF;
    recipient := birddog._address(v_mail -> 'to');
    IF recipient IS NULL THEN
        problem := 'mail.to';
        RETURN;
    END IF;
    IF birddog._address(CASE WHEN v_mail ? 'from' THEN v_mail -> 'from'
                             ELSE v_mail -> 'from_' END) IS NULL THEN
        problem := 'mail.from';
        RETURN;
    END IF;
    v_reply_to := CASE WHEN v_mail ? 'replyTo' THEN v_mail -> 'replyTo'
                       ELSE v_mail -> 'reply_to' END;
    IF jsonb_typeof(v_reply_to) IS DISTINCT FROM 'array' THEN
        problem := 'mail.replyTo';
        RETURN;
    END IF;
    SELECT coalesce(jsonb_agg(birddog._address(a.value) ORDER BY a.n), '[]'::jsonb)
    INTO reply_to
    FROM jsonb_array_elements(v_reply_to) WITH ORDINALITY AS a(value, n);
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(reply_to) AS a(value)
               WHERE jsonb_typeof(a.value) = 'null') THEN
        problem := 'mail.replyTo';
        reply_to := NULL;
        RETURN;
    END IF;
    v_created := CASE WHEN v_mail ? 'createdAt' THEN v_mail -> 'createdAt'
                      ELSE v_mail -> 'created_at' END;
    IF jsonb_typeof(v_mail -> 'content') IS DISTINCT FROM 'string' THEN
        problem := 'mail.content';
    ELSIF jsonb_typeof(v_created) IS DISTINCT FROM 'number'
          OR (v_created #>> '{}') !~ '^[0-9]+$' THEN
        problem := 'mail.createdAt';
    ELSIF recipient ->> 'sessionId' <> v_session #>> '{}' THEN
        problem := 'mail.to.sessionId';
    END IF;
    IF problem IS NOT NULL THEN
        recipient := NULL;
        reply_to := NULL;
        RETURN;
    END IF;
    mail_key := v_key #>> '{}';
    command_id := v_command #>> '{}';
END
$function$
