"""Writes go through the rules: SECURITY DEFINER functions for enqueue, claim, settle, ack.

The worker and sender roles lose their direct ``INSERT``/``UPDATE``/``DELETE`` on
``outbox``, ``jobs``, ``mailbox`` and ``routes`` (``roles_grant``); they call these
functions, which hold the invariants a role's privileges cannot:

- ``birddog.enqueue``: a queued job only (the caller names no state, lease or claim); a
  replay is accepted when identical, and refused naming each field that differs; a
  mailbox route only for the ``from`` agent of the mail being enqueued, when asked.
- ``birddog.claim`` / ``birddog.heartbeat``: a queue's head only, one slot per running job.
- ``birddog.settle``: the claim token must match; a recorded cancellation wins; a stop
  gives the job back while its recovery budget lasts. The replies are derived from the
  job's STORED mail, never given by the caller: one per ``replyTo`` address under
  ``outbox:<mail key>:reply:<index>``, from the mail's ``to``, the settlement's content
  (or "The delegated work ended <outcome> without reply text."), the reply facts
  ``{commandId, outcome, diagnostic?}``; receipts and existing rows are skipped and the
  drain's wake is armed, all in the one call: one round trip per settlement.
- ``birddog.reap``: the reapers (lease recovery, the queued-too-long bounce), each job
  checked again under its lock.
- ``birddog.cancel``: the operator's cancellation.
- ``birddog.ack``: mark mailbox replies read.

The lifecycle and fan-out rules are also written in Python (``birddog.core.lifecycle``,
``birddog.core.fanout``); a contract test settles the same jobs both ways and compares
the rows. Texts that need Python (the diagnostic masker) are computed by the caller and
passed in; the rest (the cut of an oversized cancellation, ids' control characters) is
done here the way the core does it.

Every function a role may call pins ``search_path`` (``pg_catalog, birddog, pg_temp``: a
caller's temporary table never stands in for a BirdDog one) and names every object with
its schema; ``EXECUTE`` is revoked from ``PUBLIC`` and granted per role by ``migrate
--roles``. The helpers (``birddog._*``) are granted to nobody: they run only inside those
functions, under their pinned path, and pin none of their own so that the planner can
inline the small ones (a ``SET`` clause on a function costs a configuration change at
every call: most of a settlement, measured).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Control characters as birddog.core.text.is_control has them (Unicode categories Cc, Cf,
# Zl and Zp, as of Python 3.11's Unicode 14; NUL and surrogates never reach PostgreSQL
# text): an id or key holding one is not BirdDog's, and owes no reply.
CONTROLS = (
    r"[\u0001-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    r"\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    r"\U000e0001\U000e0020-\U000e007f]"
)

HELPERS = {
    # --- who the caller is (migration 0008 makes these real: agent logins, RLS) ----------
    "_caller_agent()": """
CREATE FUNCTION birddog._caller_agent() RETURNS text
LANGUAGE plpgsql STABLE
AS $fn$
BEGIN
    -- The agent the session's login acts as (NULL: the caller is no agent login, and the
    -- functions' rules are the only bound). Nobody is one until agent logins exist.
    RETURN NULL;
END
$fn$""",
    # --- texts the core writes (birddog.core.lifecycle) ----------------------------------
    "_format_bytes(bigint)": """
CREATE FUNCTION birddog._format_bytes(p_size bigint) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $fn$
DECLARE
    v_unit bigint;
    v_tenths numeric;
    v_rest numeric;
BEGIN
    -- format_bytes: '512 bytes', '64 KiB', '1.3 MiB' (one decimal, rounded half to even
    -- as Python's format does, '.0' dropped).
    IF p_size < 1024 THEN
        RETURN p_size::text || CASE WHEN p_size = 1 THEN ' byte' ELSE ' bytes' END;
    END IF;
    v_unit := CASE WHEN p_size < 1048576 THEN 1024 ELSE 1048576 END;
    v_tenths := div(p_size * 10, v_unit);
    v_rest := mod(p_size * 10, v_unit);
    IF 2 * v_rest > v_unit OR (2 * v_rest = v_unit AND mod(v_tenths, 2) = 1) THEN
        v_tenths := v_tenths + 1;
    END IF;
    RETURN div(v_tenths, 10)::text
        || CASE WHEN mod(v_tenths, 10) = 0 THEN '' ELSE '.' || mod(v_tenths, 10)::text END
        || CASE WHEN v_unit = 1024 THEN ' KiB' ELSE ' MiB' END;
END
$fn$""",
    "_utf8_prefix(text,integer)": """
CREATE FUNCTION birddog._utf8_prefix(p_text text, p_bytes integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $fn$
DECLARE
    v_raw bytea := substring(convert_to(p_text, 'UTF8') FROM 1 FOR greatest(p_bytes, 0));
    v_end integer := octet_length(v_raw);
    v_at integer := octet_length(v_raw);
    v_lead integer;
    v_width integer;
BEGIN
    -- The longest prefix of whole characters within p_bytes (Python's decode 'ignore' of
    -- a cut: only a character split at the end is dropped).
    WHILE v_at > 0 AND (get_byte(v_raw, v_at - 1) & 192) = 128 LOOP
        v_at := v_at - 1;
    END LOOP;
    IF v_at > 0 THEN
        v_lead := get_byte(v_raw, v_at - 1);
        v_width := CASE WHEN v_lead < 128 THEN 1 WHEN v_lead >= 240 THEN 4
                        WHEN v_lead >= 224 THEN 3 ELSE 2 END;
        IF v_end - (v_at - 1) < v_width THEN
            v_end := v_at - 1;
        END IF;
    ELSE
        v_end := 0;
    END IF;
    RETURN convert_from(substring(v_raw FROM 1 FOR v_end), 'UTF8');
END
$fn$""",
    "_cancelled(text,text,integer)": """
CREATE FUNCTION birddog._cancelled(
    p_content text, p_diagnostic text, p_limit integer, OUT content text, OUT diagnostic text
)
LANGUAGE plpgsql IMMUTABLE
AS $fn$
DECLARE
    v_size bigint := octet_length(p_content);
    v_mark text;
    v_room integer;
    v_note text;
BEGIN
    -- lifecycle._cancelled: the recorded content, cut to the limit with a visible mark
    -- (bounded_content) and a note joined to the caller's bounded diagnostic.
    IF v_size <= p_limit THEN
        content := p_content;
        diagnostic := p_diagnostic;
        RETURN;
    END IF;
    v_mark := E'\\n[cut by BirdDog: ' || birddog._format_bytes(v_size) || ' is above the limit]';
    v_room := greatest(p_limit - octet_length(v_mark), 0);
    content := CASE WHEN v_room = 0 THEN birddog._utf8_prefix(p_content, p_limit)
                    ELSE birddog._utf8_prefix(p_content, v_room) || v_mark END;
    v_note := 'the cancellation content was ' || birddog._format_bytes(v_size)
        || '; the limit is ' || birddog._format_bytes(p_limit) || ', so it was cut';
    diagnostic := CASE WHEN p_diagnostic IS NULL THEN v_note
                       ELSE left(p_diagnostic || '; ' || v_note, 200) END;
END
$fn$""",
    # The small helpers are PL/pgSQL, not SQL: a SQL function the planner cannot inline is
    # planned again at every call, which cost most of a settlement (measured).
    "_field(jsonb,text,text)": """
CREATE FUNCTION birddog._field(p_object jsonb, p_json_name text, p_python_name text)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $fn$
BEGIN
    -- A model field by its JSON name, else its Python name (models take both).
    IF p_object ? p_json_name THEN
        RETURN p_object -> p_json_name;
    END IF;
    RETURN p_object -> p_python_name;
END
$fn$""",
    "_only_keys(jsonb,text[])": """
CREATE FUNCTION birddog._only_keys(p_object jsonb, p_allowed text[]) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $fn$
BEGIN
    -- An object with no field a model does not know (extra="forbid").
    IF jsonb_typeof(p_object) IS DISTINCT FROM 'object' THEN
        RETURN false;
    END IF;
    RETURN (p_object - p_allowed) = '{}'::jsonb;
END
$fn$""",
    "_max_recoveries(jsonb)": """
CREATE FUNCTION birddog._max_recoveries(p_recovery jsonb) RETURNS integer
LANGUAGE plpgsql IMMUTABLE
AS $fn$
DECLARE
    v_budget jsonb;
BEGIN
    -- job_rows.max_recoveries: {"maxRecoveries": 0..1000} (or its Python name), else 0.
    IF NOT birddog._only_keys(p_recovery, ARRAY['maxRecoveries', 'max_recoveries'])
       OR (SELECT count(*) FROM jsonb_object_keys(p_recovery)) <> 1 THEN
        RETURN 0;
    END IF;
    v_budget := birddog._field(p_recovery, 'maxRecoveries', 'max_recoveries');
    IF jsonb_typeof(v_budget) <> 'number' OR (v_budget #>> '{}') !~ '^[0-9]{1,4}$' THEN
        RETURN 0;
    END IF;
    IF (v_budget #>> '{}')::integer > 1000 THEN
        RETURN 0;
    END IF;
    RETURN (v_budget #>> '{}')::integer;
END
$fn$""",
    # --- reading an agent job's payload as the core does (core.jobs, core.mail) ----------
    "_address(jsonb)": """
CREATE FUNCTION birddog._address(p_value jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $fn$
DECLARE
    v_agent jsonb;
    v_session jsonb;
BEGIN
    -- An AgentAddress as the core writes it ({kind, agentId, sessionId}), or NULL when the
    -- value is not one: no unknown field, kind "agent" if given, both ids 1 to 256
    -- characters without a control character.
    IF jsonb_typeof(p_value) IS DISTINCT FROM 'object'
       OR (p_value - ARRAY['kind', 'agentId', 'agent_id', 'sessionId', 'session_id']) <> '{}'
       OR coalesce(p_value -> 'kind', '"agent"') <> '"agent"' THEN
        RETURN NULL;
    END IF;
    v_agent := CASE WHEN p_value ? 'agentId' THEN p_value -> 'agentId'
                    ELSE p_value -> 'agent_id' END;
    v_session := CASE WHEN p_value ? 'sessionId' THEN p_value -> 'sessionId'
                      ELSE p_value -> 'session_id' END;
    IF jsonb_typeof(v_agent) IS DISTINCT FROM 'string'
       OR jsonb_typeof(v_session) IS DISTINCT FROM 'string'
       OR char_length(v_agent #>> '{}') NOT BETWEEN 1 AND 256
       OR char_length(v_session #>> '{}') NOT BETWEEN 1 AND 256
       OR ((v_agent #>> '{}') || (v_session #>> '{}')) ~ '<controls>' THEN
        RETURN NULL;
    END IF;
    RETURN jsonb_build_object('kind', 'agent', 'agentId', v_agent, 'sessionId', v_session);
END
$fn$""",
    "_agent_mail(text,text,jsonb)": """
CREATE FUNCTION birddog._agent_mail(
    p_job_id text, p_queue text, p_payload jsonb,
    OUT problem text, OUT mail_key text, OUT command_id text, OUT recipient jsonb,
    OUT reply_to jsonb
)
LANGUAGE plpgsql IMMUTABLE
AS $fn$
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
                             'mail']) <> '{}' THEN
        problem := 'payload';
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
       OR (p_job_id || p_queue || (v_session #>> '{}') || (v_command #>> '{}')) ~ '<controls>'
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
       OR (v_key #>> '{}') ~ '<controls>' THEN
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
$fn$""",
    # --- carrying out a decision on a locked job ------------------------------------------
    "_requeue(text,text)": """
CREATE FUNCTION birddog._requeue(p_job_id text, p_diagnostic text) RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
    v_queue text;
BEGIN
    -- A recovery: back in its queue, claim cleared, recovery_count + 1 (NULL diagnostic:
    -- the last one stays); announced on birddog_jobs at commit.
    UPDATE birddog.jobs j
    SET state = 'queued', claim_token = NULL, lease_expires_at = NULL, worker_id = NULL,
        slot = NULL, recovery_count = j.recovery_count + 1,
        diagnostic = coalesce(p_diagnostic, j.diagnostic), updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running'
    RETURNING j.queue INTO v_queue;
    IF v_queue IS NOT NULL THEN
        PERFORM pg_notify('birddog_jobs', v_queue);
    END IF;
END
$fn$""",
    (
        "_settle_job(text,text,jsonb,text,text,text,text,text,boolean,timestamptz,integer,text,"
        "boolean)"
    ): """
CREATE FUNCTION birddog._settle_job(
    p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text,
    p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean,
    p_now timestamptz, p_max_content_bytes integer, p_traceparent text, p_wake boolean,
    OUT keys text[], OUT unreadable text
)
LANGUAGE plpgsql
AS $fn$
DECLARE
    v_mail record;
    v_keys text[];
    v_agents text[];
    v_sessions text[];
    v_replies jsonb[];
    v_inserted text[];
    v_dropped text[];
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
    WHERE j.job_id = p_job_id;
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
        WHERE k.key = ANY(v_inserted) AND NOT (k.key = ANY(v_dropped))
        ORDER BY k.n
    );
END
$fn$""",
}

FUNCTIONS = {
    "mailbox_visible(text,text)": """
CREATE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
BEGIN
    -- Whether the caller may read (and acknowledge) a mailbox row of p_agent_id answering
    -- mail p_in_reply_to. Everyone may, until agent logins exist (migration 0008).
    RETURN true;
END
$fn$""",
    "enqueue(text,text,text,smallint,text,text,timestamptz,text,boolean)": """
CREATE FUNCTION birddog.enqueue(
    p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text,
    p_recovery text, p_created_at timestamptz, p_traceparent text, p_sender_mailbox boolean
)
RETURNS TABLE (inserted boolean, differing text[], mailbox_added boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_payload jsonb := p_payload::jsonb;
    v_recovery jsonb := p_recovery::jsonb;
    v_stored birddog.jobs%ROWTYPE;
    v_from text;
    v_agent text := birddog._caller_agent();
BEGIN
    -- An agent's login sends as itself only: the mail's from is its agent.
    IF v_agent IS NOT NULL
       AND (birddog._field(v_payload -> 'mail', 'from', 'from_') ->> 'agentId')
           IS DISTINCT FROM v_agent
    THEN
        RAISE EXCEPTION 'an agent enqueues mail from itself only (from.agentId %)', v_agent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A queued job, nothing else: state, lease and claim are not the caller's to give. The
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by
    )
    VALUES (
        p_job_id, p_queue, p_lane, p_priority, 'queued', v_payload, v_recovery,
        coalesce(p_created_at, clock_timestamp()), p_traceparent, session_user
    )
    ON CONFLICT (job_id) DO NOTHING;
    IF FOUND THEN
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
        differing := NULL;  -- the conflicting job is gone, or not in this snapshot
        RETURN NEXT;
        RETURN;
    END IF;
    differing := array_remove(ARRAY[
        CASE WHEN v_stored.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN v_stored.lane IS DISTINCT FROM p_lane THEN 'lane' END,
        CASE WHEN v_stored.priority IS DISTINCT FROM p_priority THEN 'priority' END,
        CASE WHEN v_stored.payload IS DISTINCT FROM v_payload THEN 'payload' END,
        CASE WHEN v_stored.recovery IS DISTINCT FROM v_recovery THEN 'recovery' END
    ], NULL);
    RETURN NEXT;
END
$fn$""",
    "claim(text[],integer,timestamptz,text,integer,timestamptz,text)": """
CREATE FUNCTION birddog.claim(
    p_queues text[], p_limit integer, p_lease_until timestamptz, p_worker_id text,
    p_slots integer, p_started_at timestamptz, p_reserved_prefix text
)
RETURNS TABLE (
    job_id text, queue text, lane text, priority smallint, state text, payload text,
    recovery text, outcome text, claim_token uuid, lease_expires_at timestamptz,
    recovery_count integer, cancel_requested_at timestamptz, cancel_content text,
    created_at timestamptz, traceparent text
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
BEGIN
    -- The head of each queue (priority, age, id) with a free slot. An agent's login names
    -- its sessions, and takes only the heads whose mail is addressed to its agent.
    IF v_agent IS NOT NULL AND p_queues IS NULL THEN
        RAISE EXCEPTION 'an agent claims from the sessions it names only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN QUERY
    WITH RECURSIVE every_head AS (
        -- A skip scan of the claim index (queue, priority DESC, created_at, job_id): each
        -- probe lands on the next queue's head, so a claim costs one probe per queue that
        -- has queued jobs, however many jobs each holds.
        (
            SELECT j.queue, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND p_queues IS NULL
            ORDER BY j.queue, j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        )
        UNION ALL
        SELECT next.queue, next.priority, next.created_at, next.job_id
        FROM every_head h
        CROSS JOIN LATERAL (
            SELECT j.queue, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue > h.queue
            ORDER BY j.queue, j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) next
    ),
    -- MATERIALIZED, heads and busy: each is made once. Planned from statistics taken while
    -- every job ran (a fleet that had claimed them all), the planner otherwise thinks one
    -- job is queued and runs the heads again for each queued job (minutes at 2,000).
    heads AS MATERIALIZED (
        SELECT h.queue, h.priority, h.created_at, h.job_id
        FROM every_head h
        WHERE NOT starts_with(h.queue, p_reserved_prefix)
        UNION ALL
        SELECT named.queue, named.priority, named.created_at, named.job_id
        FROM (SELECT DISTINCT g.queue FROM unnest(p_queues) AS g(queue)) q
        CROSS JOIN LATERAL (
            SELECT j.queue, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) named
    ),
    busy AS MATERIALIZED (
        SELECT r.queue FROM birddog.jobs r
        WHERE r.state = 'running'
        GROUP BY r.queue
        HAVING count(*) >= p_slots
    ),
    picked AS (
        -- A head another transaction holds is skipped, never the job behind it taken
        -- instead: only heads are candidates.
        SELECT j.job_id, j.queue
        FROM heads h
        JOIN birddog.jobs j ON j.job_id = h.job_id
        WHERE j.state = 'queued' AND NOT EXISTS (SELECT 1 FROM busy b WHERE b.queue = h.queue)
          AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
        ORDER BY h.priority DESC, h.created_at, h.job_id
        LIMIT p_limit
        FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE birddog.jobs j
    SET state = 'running',
        slot = (
            SELECT min(s.slot) FROM generate_series(0, p_slots - 1) AS s(slot)
            WHERE NOT EXISTS (
                SELECT 1 FROM birddog.jobs r
                WHERE r.queue = p.queue AND r.state = 'running' AND r.slot = s.slot
            )
        ),
        claim_token = gen_random_uuid(),
        lease_expires_at = p_lease_until,
        worker_id = p_worker_id,
        started_at = p_started_at,
        updated_at = now()
    FROM picked p
    WHERE j.job_id = p.job_id
    RETURNING
        j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
        j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
        j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent;
END
$fn$""",
    "heartbeat(text,uuid,timestamptz)": """
CREATE FUNCTION birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamptz)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
DECLARE
    v_cancel boolean;
    v_agent text := birddog._caller_agent();
BEGIN
    -- The lease of a job still running under this claim (an agent's own job, for an
    -- agent's login); whether a cancellation was asked
    -- (NULL: the claim holds nothing).
    UPDATE birddog.jobs j
    SET lease_expires_at = p_lease_until, updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_claim_token
      AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
    RETURNING j.cancel_requested_at IS NOT NULL INTO v_cancel;
    RETURN v_cancel;
END
$fn$""",
    "settle(text,uuid,text,text,text,text,text,text,timestamptz,integer,text,boolean)": """
CREATE FUNCTION birddog.settle(
    p_job_id text, p_claim_token uuid, p_event text, p_outcome text, p_content text,
    p_diagnostic text, p_reply_diagnostic text, p_cancel_diagnostic text,
    p_now timestamptz, p_max_content_bytes integer, p_traceparent text, p_wake boolean
)
RETURNS TABLE (
    decision text, outcome text, cause text, diagnostic text, content text, keys text[],
    unreadable text, reason text
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
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
BEGIN
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
            coalesce(v_job.cancel_content, ''), p_cancel_diagnostic, p_max_content_bytes
        );
        v_outcome := 'cancelled';
        v_content := v_cancel.content;
        v_diagnostic := v_cancel.diagnostic;
        v_reply_diagnostic := NULL;
        cause := 'cancelled';
        content := v_cancel.content;
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
        p_max_content_bytes, p_traceparent, p_wake
    );
    outcome := v_outcome;
    diagnostic := v_diagnostic;
    keys := v_done.keys;
    unreadable := v_done.unreadable;
    RETURN NEXT;
END
$fn$""",
    (
        "reap(text,text[],integer[],text[],text[],timestamptz,timestamptz,text,text,integer,"
        "boolean)"
    ): """
CREATE FUNCTION birddog.reap(
    p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[],
    p_diagnostics text[], p_now timestamptz, p_since timestamptz, p_lease_diagnostic text,
    p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean
)
RETURNS TABLE (job_id text, what text, unreadable text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_at integer;
    v_cancel record;
    v_done record;
BEGIN
    -- The reapers, for the jobs p_job_ids (a job another transaction holds is skipped and
    -- not returned). 'lease_expired': a running job whose lease ended by p_since is queued
    -- again while its budget lasts, else settles outcome_unknown (a recorded cancellation:
    -- cancelled). 'queued_too_long': a job still queued, enqueued by p_since, settles
    -- cancelled with the caller's text for its recovery count (p_contents, p_diagnostics,
    -- one per job; a job whose count moved meanwhile is kept for the next pass).
    FOR v_job IN
        SELECT * FROM birddog.jobs j
        WHERE j.job_id = ANY(p_job_ids)
        ORDER BY j.job_id
        FOR UPDATE SKIP LOCKED
    LOOP
        job_id := v_job.job_id;
        unreadable := NULL;
        what := 'keep';
        IF p_event = 'lease_expired' THEN
            IF v_job.state = 'running'
               AND (v_job.lease_expires_at IS NULL OR v_job.lease_expires_at <= p_since) THEN
                IF v_job.cancel_requested_at IS NOT NULL THEN
                    SELECT * INTO v_cancel FROM birddog._cancelled(
                        coalesce(v_job.cancel_content, ''), p_lease_diagnostic, p_max_content_bytes
                    );
                    SELECT * INTO v_done FROM birddog._settle_job(
                        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                        'cancelled', v_cancel.content, v_cancel.diagnostic, NULL, false,
                        p_now, p_max_content_bytes, NULL, p_wake
                    );
                    what := 'cancelled';
                    unreadable := v_done.unreadable;
                ELSIF v_job.recovery_count < birddog._max_recoveries(v_job.recovery) THEN
                    PERFORM birddog._requeue(v_job.job_id, NULL);
                    what := 'requeued';
                ELSE
                    SELECT * INTO v_done FROM birddog._settle_job(
                        v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                        'outcome_unknown', '', p_lease_diagnostic,
                        p_lease_reply_diagnostic, false, p_now, p_max_content_bytes, NULL, p_wake
                    );
                    what := 'outcome_unknown';
                    unreadable := v_done.unreadable;
                END IF;
            END IF;
        ELSIF p_event = 'queued_too_long' THEN
            v_at := array_position(p_job_ids, v_job.job_id);
            IF v_job.state = 'queued' AND v_job.created_at <= p_since
               AND v_job.recovery_count = p_recovery_counts[v_at] THEN
                SELECT * INTO v_done FROM birddog._settle_job(
                    v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
                    'cancelled', p_contents[v_at], p_diagnostics[v_at], NULL, true,
                    p_now, p_max_content_bytes, NULL, p_wake
                );
                what := 'cancelled';
                unreadable := v_done.unreadable;
            END IF;
        ELSE
            RAISE EXCEPTION 'unknown reaper event %', p_event
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN NEXT;
    END LOOP;
END
$fn$""",
    "cancel(text,text,timestamptz,integer,boolean)": """
CREATE FUNCTION birddog.cancel(
    p_job_id text, p_content text, p_now timestamptz, p_max_content_bytes integer,
    p_wake boolean
)
RETURNS TABLE (decision text, outcome text, keys text[], unreadable text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_cancel record;
    v_done record;
BEGIN
    -- The operator's cancellation: a queued job settles cancelled now (the first recorded
    -- content wins), a running one records it for its worker's next heartbeat.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND THEN
        decision := 'missing';
    ELSIF v_job.state = 'settled' THEN
        decision := 'keep';
        outcome := v_job.outcome;
    ELSIF v_job.state = 'queued' THEN
        SELECT * INTO v_cancel FROM birddog._cancelled(
            CASE WHEN v_job.cancel_requested_at IS NULL THEN p_content
                 ELSE coalesce(v_job.cancel_content, '') END,
            NULL, p_max_content_bytes
        );
        SELECT * INTO v_done FROM birddog._settle_job(
            v_job.job_id, v_job.queue, v_job.payload, v_job.traceparent,
            'cancelled', v_cancel.content, v_cancel.diagnostic, NULL,
            v_job.cancel_requested_at IS NULL, p_now, p_max_content_bytes, NULL, p_wake
        );
        decision := 'settle';
        outcome := 'cancelled';
        keys := v_done.keys;
        unreadable := v_done.unreadable;
    ELSIF v_job.cancel_requested_at IS NOT NULL THEN
        decision := 'keep';
    ELSE
        UPDATE birddog.jobs j
        SET cancel_requested_at = p_now, cancel_content = p_content, updated_at = now()
        WHERE j.job_id = v_job.job_id;
        decision := 'record';
    END IF;
    RETURN NEXT;
END
$fn$""",
    "ack(text[],timestamptz)": """
CREATE FUNCTION birddog.ack(p_keys text[], p_read_at timestamptz)
RETURNS TABLE (key text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    -- Mark mailbox replies read; returns the keys that were unread. Only rows the caller
    -- may read (mailbox_visible): an agent's login acknowledges its own mailbox only.
    RETURN QUERY
    UPDATE birddog.mailbox m
    SET read_at = p_read_at
    WHERE m.key = ANY(p_keys) AND m.read_at IS NULL
      AND birddog.mailbox_visible(m.agent_id, m.in_reply_to)
    RETURNING m.key;
END
$fn$""",
}


def upgrade() -> None:
    # Who enqueued each job (the session's login): a sender reads the jobs it sent, and
    # the replies to them, once mailboxes and jobs are private (migration 0008).
    op.add_column("jobs", sa.Column("sent_by", sa.Text(), nullable=True), schema="birddog")
    for signature, body in {**HELPERS, **FUNCTIONS}.items():
        op.execute(body.replace("<controls>", CONTROLS))
        # Functions are created executable by PUBLIC; migrate --roles grants EXECUTE.
        op.execute(f"REVOKE ALL ON FUNCTION birddog.{signature} FROM PUBLIC")


def downgrade() -> None:
    for signature in reversed([*HELPERS, *FUNCTIONS]):
        op.execute(f"DROP FUNCTION birddog.{signature}")
    op.drop_column("jobs", "sent_by", schema="birddog")
