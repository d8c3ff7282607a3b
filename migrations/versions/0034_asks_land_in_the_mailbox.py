"""Every ask's answer lands in the asker's mailbox, whatever its route becomes.

- ``birddog.send_mail`` marks every ask (``askerMailbox: true`` beside the mail), not only
  one from an agent whose route posts to a URL at the time it asks: the mark was decided
  at ask time from the route, so an asker whose mailbox route became an inbox URL, or was
  held, before the answer settled had its reply posted to the URL or held, and the
  waiting ask never saw it. A plain send is still never marked.
- ``birddog._settle_job`` delivers the marked reply to the asker into its mailbox whatever
  the route is by then (another kind, held), as before; and a row already owed to the
  asker under that reply key (left by an earlier job with the same mail key that was
  pruned since, pending or dead) gives way to that delivery, so the reply arrives once,
  in the mailbox; a row a drain holds under a live lease is left to the drain.
- ``birddog._agent_mail``: its comment only (the mark is an ask's).

Jobs enqueued before this revision keep the mark they were sent with (an ask from an
agent whose route was a mailbox then has none: its reply follows the route it finds, as
before; a send and such an ask cannot be told apart afterwards). No table changes.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._agent_mail (changed), birddog._settle_job (changed),
birddog.send_mail (changed).

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | Sequence[str] | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

AGENT_MAIL = r"""CREATE OR REPLACE FUNCTION birddog._agent_mail(p_job_id text, p_queue text, p_payload jsonb, OUT problem text, OUT mail_key text, OUT command_id text, OUT recipient jsonb, OUT reply_to jsonb)
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
"""
"""``birddog._agent_mail(p_job_id text, p_queue text, p_payload jsonb, OUT problem text, OUT mail_key text, OUT command_id text, OUT recipient jsonb, OUT reply_to jsonb)`` as this revision installs it."""

PREVIOUS_AGENT_MAIL = r"""CREATE OR REPLACE FUNCTION birddog._agent_mail(p_job_id text, p_queue text, p_payload jsonb, OUT problem text, OUT mail_key text, OUT command_id text, OUT recipient jsonb, OUT reply_to jsonb)
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
    -- askerMailbox beside the mail (an ask from an agent whose route posts to a URL): a
    -- boolean, when given.
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
"""
"""``birddog._agent_mail(p_job_id text, p_queue text, p_payload jsonb, OUT problem text, OUT mail_key text, OUT command_id text, OUT recipient jsonb, OUT reply_to jsonb)`` as revision 0033 left it, as the downgrade restores it."""

SETTLE_JOB = r"""CREATE OR REPLACE FUNCTION birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)
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
"""
"""``birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)`` as this revision installs it."""

PREVIOUS_SETTLE_JOB = r"""CREATE OR REPLACE FUNCTION birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)
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
    -- The reply to the asker of an ask marked askerMailbox (its route posts to a URL) is
    -- delivered here too, whatever that route: the ask waits on the mailbox.
    IF birddog._field(p_payload, 'askerMailbox', 'asker_mailbox') = 'true'::jsonb THEN
        v_asker := birddog._address(birddog._field(p_payload -> 'mail', 'from', 'from_'));
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
"""
"""``birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)`` as revision 0033 left it, as the downgrade restores it."""

SEND_MAIL = r"""CREATE OR REPLACE FUNCTION birddog.send_mail(p_key text, p_mailbox_agent text, p_require_mailbox boolean, p_mailbox_is_sender boolean, p_to_agent text, p_to_session text, p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_not_before timestamp with time zone, p_expires_in_s double precision)
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
"""
"""``birddog.send_mail(p_key text, p_mailbox_agent text, p_require_mailbox boolean, p_mailbox_is_sender boolean, p_to_agent text, p_to_session text, p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as this revision installs it."""

PREVIOUS_SEND_MAIL = r"""CREATE OR REPLACE FUNCTION birddog.send_mail(p_key text, p_mailbox_agent text, p_require_mailbox boolean, p_mailbox_is_sender boolean, p_to_agent text, p_to_session text, p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_not_before timestamp with time zone, p_expires_in_s double precision)
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
    -- An ask from an agent whose route posts to a URL: its job says so (askerMailbox,
    -- beside the mail), and the settlement delivers the reply to the asker into the
    -- asker's mailbox, where the ask waits (birddog._settle_job). Every other reply to
    -- the agent still follows its route.
    v_payload := p_payload;
    IF p_require_mailbox AND p_mailbox_is_sender AND v_kind IS NOT NULL
       AND v_kind <> 'mailbox' THEN
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
"""
"""``birddog.send_mail(p_key text, p_mailbox_agent text, p_require_mailbox boolean, p_mailbox_is_sender boolean, p_to_agent text, p_to_session text, p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as revision 0033 left it, as the downgrade restores it."""


def upgrade() -> None:
    op.execute(AGENT_MAIL)
    op.execute(SETTLE_JOB)
    op.execute(SEND_MAIL)


def downgrade() -> None:
    op.execute(PREVIOUS_AGENT_MAIL)
    op.execute(PREVIOUS_SETTLE_JOB)
    op.execute(PREVIOUS_SEND_MAIL)
