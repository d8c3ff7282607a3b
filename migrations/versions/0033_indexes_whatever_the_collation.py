"""Settlements find their queue head and their recipients' routes by index again.

A PL/pgSQL function takes the collation of its arguments for its parameters and text
variables, and a non-default collation beats the default: ``birddog._settle_job`` is
called with a job's row, whose ids sort ``COLLATE "C"``, so its variables (the queue key,
the reply recipients) and the queue key it hands ``birddog._queue_heads_refresh`` were
"C", and every comparison with a column of the database's collation (``queue_heads``'
key, the jobs' queue key, ``routes.agent_id``) could use no index: each settlement read
the whole of ``queue_heads``, the queued and running jobs and ``routes`` (1 ms per
settlement at 2,000 jobs, growing with the tables). Now both declare their text
variables ``COLLATE "default"``, so a comparison takes the column's own collation.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._queue_heads_refresh (changed), birddog._settle_job
(changed).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | Sequence[str] | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

QUEUE_HEADS_REFRESH = r"""CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queue_keys text[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    -- Queues by key (birddog.jobs.queue_key: agent, unit separator, session); the queue's
    -- name is the key after its first separator (an agent id holds none), its agent the
    -- key before it (NULL for agentless jobs), whether or not a job is queued.
    -- The keys in the columns' own collation: a caller's argument may carry another (a
    -- settlement's comes from a job's row, whose ids sort COLLATE "C"), and a comparison
    -- in another collation than its index's cannot use the index (every probe below would
    -- scan the queue's whole table).
    v_keys text[] COLLATE "default" := p_queue_keys;
    v_queue text COLLATE "default";
    v_head record;
    v_due timestamptz;
    v_running integer;
BEGIN
    IF cardinality(v_keys) = 1 THEN
        -- One queue (a settlement, an enqueue, a claim of one session): the recomputation
        -- below as statements over that queue alone, each kept as a generic plan.
        v_queue := v_keys[1];
        PERFORM 1 FROM birddog.queue_heads h WHERE h.queue_key = v_queue FOR UPDATE;
        SELECT j.agent_id, j.priority, j.created_at, j.job_id INTO v_head
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY j.priority DESC, j.created_at, j.job_id
        LIMIT 1;
        SELECT j.not_before INTO v_due
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY j.not_before NULLS FIRST
        LIMIT 1;
        SELECT count(*)::integer INTO v_running
        FROM birddog.jobs j
        WHERE j.state = 'running' AND j.queue_key = v_queue;
        IF v_head.job_id IS NULL AND v_running = 0 THEN
            DELETE FROM birddog.queue_heads h WHERE h.queue_key = v_queue;
        ELSE
            INSERT INTO birddog.queue_heads AS h (
                queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
            )
            VALUES (v_queue, substr(v_queue, strpos(v_queue, E'\x1f') + 1),
                    nullif(split_part(v_queue, E'\x1f', 1), ''),
                    v_head.priority, v_head.created_at, v_head.job_id, v_due, v_running)
            ON CONFLICT (queue_key) DO UPDATE
            SET agent_id = excluded.agent_id, priority = excluded.priority,
                created_at = excluded.created_at, job_id = excluded.job_id,
                due_at = excluded.due_at, running = excluded.running
            WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
                IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                                  excluded.job_id, excluded.due_at, excluded.running);
        END IF;
        RETURN;
    END IF;
    -- Recompute the heads of p_queue_keys from their jobs. The rows are locked first, in queue
    -- order, by a statement of their own: the recomputation below takes its snapshot only
    -- then, so it sees every change committed by a transaction that held one of them, and
    -- the last transaction to change a queue's jobs leaves its row right.
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue_key = ANY(v_keys)
    ORDER BY h.queue_key
    FOR UPDATE;
    WITH facts AS (
        SELECT q.queue_key, head.agent_id, head.priority, head.created_at, head.job_id,
               due.due_at, run.running
        FROM (SELECT DISTINCT u.queue_key FROM unnest(v_keys) AS u(queue_key)) q
        LEFT JOIN LATERAL (
            SELECT j.agent_id, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) head ON true
        LEFT JOIN LATERAL (
            SELECT j.not_before AS due_at
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY j.not_before NULLS FIRST
            LIMIT 1
        ) due ON true
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS running
            FROM birddog.jobs j
            WHERE j.state = 'running' AND j.queue_key = q.queue_key
        ) run
    ), kept AS (
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        SELECT f.queue_key, substr(f.queue_key, strpos(f.queue_key, E'\x1f') + 1),
               nullif(split_part(f.queue_key, E'\x1f', 1), ''),
               f.priority, f.created_at, f.job_id, f.due_at, f.running
        FROM facts f
        WHERE f.job_id IS NOT NULL OR f.running > 0
        ON CONFLICT (queue_key) DO UPDATE
        SET agent_id = excluded.agent_id, priority = excluded.priority,
            created_at = excluded.created_at, job_id = excluded.job_id,
            due_at = excluded.due_at, running = excluded.running
        WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
            IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                              excluded.job_id, excluded.due_at, excluded.running)
    )
    DELETE FROM birddog.queue_heads h
    USING facts f
    WHERE h.queue_key = f.queue_key AND f.job_id IS NULL AND f.running = 0;
END
$function$
"""
"""``birddog._queue_heads_refresh(p_queue_keys text[])`` as this revision installs it."""

PREVIOUS_QUEUE_HEADS_REFRESH = r"""CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queue_keys text[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    -- Queues by key (birddog.jobs.queue_key: agent, unit separator, session); the queue's
    -- name is the key after its first separator (an agent id holds none), its agent the
    -- key before it (NULL for agentless jobs), whether or not a job is queued.
    v_queue text;
    v_head record;
    v_due timestamptz;
    v_running integer;
BEGIN
    IF cardinality(p_queue_keys) = 1 THEN
        -- One queue (a settlement, an enqueue, a claim of one session): the recomputation
        -- below as statements over that queue alone, each kept as a generic plan.
        v_queue := p_queue_keys[1];
        PERFORM 1 FROM birddog.queue_heads h WHERE h.queue_key = v_queue FOR UPDATE;
        SELECT j.agent_id, j.priority, j.created_at, j.job_id INTO v_head
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY j.priority DESC, j.created_at, j.job_id
        LIMIT 1;
        SELECT j.not_before INTO v_due
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue_key = v_queue
        ORDER BY j.not_before NULLS FIRST
        LIMIT 1;
        SELECT count(*)::integer INTO v_running
        FROM birddog.jobs j
        WHERE j.state = 'running' AND j.queue_key = v_queue;
        IF v_head.job_id IS NULL AND v_running = 0 THEN
            DELETE FROM birddog.queue_heads h WHERE h.queue_key = v_queue;
        ELSE
            INSERT INTO birddog.queue_heads AS h (
                queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
            )
            VALUES (v_queue, substr(v_queue, strpos(v_queue, E'\x1f') + 1),
                    nullif(split_part(v_queue, E'\x1f', 1), ''),
                    v_head.priority, v_head.created_at, v_head.job_id, v_due, v_running)
            ON CONFLICT (queue_key) DO UPDATE
            SET agent_id = excluded.agent_id, priority = excluded.priority,
                created_at = excluded.created_at, job_id = excluded.job_id,
                due_at = excluded.due_at, running = excluded.running
            WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
                IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                                  excluded.job_id, excluded.due_at, excluded.running);
        END IF;
        RETURN;
    END IF;
    -- Recompute the heads of p_queue_keys from their jobs. The rows are locked first, in queue
    -- order, by a statement of their own: the recomputation below takes its snapshot only
    -- then, so it sees every change committed by a transaction that held one of them, and
    -- the last transaction to change a queue's jobs leaves its row right.
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue_key = ANY(p_queue_keys)
    ORDER BY h.queue_key
    FOR UPDATE;
    WITH facts AS (
        SELECT q.queue_key, head.agent_id, head.priority, head.created_at, head.job_id,
               due.due_at, run.running
        FROM (SELECT DISTINCT u.queue_key FROM unnest(p_queue_keys) AS u(queue_key)) q
        LEFT JOIN LATERAL (
            SELECT j.agent_id, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) head ON true
        LEFT JOIN LATERAL (
            SELECT j.not_before AS due_at
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue_key = q.queue_key
            ORDER BY j.not_before NULLS FIRST
            LIMIT 1
        ) due ON true
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS running
            FROM birddog.jobs j
            WHERE j.state = 'running' AND j.queue_key = q.queue_key
        ) run
    ), kept AS (
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        SELECT f.queue_key, substr(f.queue_key, strpos(f.queue_key, E'\x1f') + 1),
               nullif(split_part(f.queue_key, E'\x1f', 1), ''),
               f.priority, f.created_at, f.job_id, f.due_at, f.running
        FROM facts f
        WHERE f.job_id IS NOT NULL OR f.running > 0
        ON CONFLICT (queue_key) DO UPDATE
        SET agent_id = excluded.agent_id, priority = excluded.priority,
            created_at = excluded.created_at, job_id = excluded.job_id,
            due_at = excluded.due_at, running = excluded.running
        WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
            IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                              excluded.job_id, excluded.due_at, excluded.running)
    )
    DELETE FROM birddog.queue_heads h
    USING facts f
    WHERE h.queue_key = f.queue_key AND f.job_id IS NULL AND f.running = 0;
END
$function$
"""
"""``birddog._queue_heads_refresh(p_queue_keys text[])`` as revision 0032 left it, as the downgrade restores it."""

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
"""``birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)`` as this revision installs it."""

PREVIOUS_SETTLE_JOB = r"""CREATE OR REPLACE FUNCTION birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_mail record;
    v_keys text[];
    v_agents text[];
    v_sessions text[];
    v_replies jsonb[];
    v_inserted text[];
    v_dropped text[];
    v_direct text[];
    v_queue_key text;
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
"""``birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)`` as revision 0032 left it, as the downgrade restores it."""


def upgrade() -> None:
    op.execute(QUEUE_HEADS_REFRESH)
    op.execute(SETTLE_JOB)


def downgrade() -> None:
    op.execute(PREVIOUS_QUEUE_HEADS_REFRESH)
    op.execute(PREVIOUS_SETTLE_JOB)
