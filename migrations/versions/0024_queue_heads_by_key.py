"""The job functions keep one queue head per (agent, session): no sender heads another's queue.

Revision 0023 keyed the queues by ``birddog.jobs.queue_key`` (agent, unit separator,
session); here the functions that keep the heads follow: ``_queue_heads_refresh`` takes
queue keys and names each head's agent from its key, ``enqueue``, ``_requeue``,
``_settle_job``, ``reap`` and ``queue_heads_repair`` pass the job's key, and ``claim``
walks heads by key (a worker naming sessions still names them by session; an agent's
login is offered its own heads only). ``session_known`` asks whether this agent's session
was sent work, not whether any session of that id was.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._queue_heads_refresh (changed), birddog._requeue
(changed), birddog._settle_job (changed), birddog.claim (changed), birddog.enqueue
(changed), birddog.queue_heads_repair (changed), birddog.reap (changed),
birddog.session_known (changed).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
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
"""``birddog._queue_heads_refresh(p_queue_keys text[])`` as this revision installs it."""

PREVIOUS_QUEUE_HEADS_REFRESH = r"""CREATE OR REPLACE FUNCTION birddog._queue_heads_refresh(p_queues text[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_queue text;
    v_head record;
    v_due timestamptz;
    v_running integer;
BEGIN
    IF cardinality(p_queues) = 1 THEN
        -- One queue (a settlement, an enqueue, a claim of one session): the recomputation
        -- below as statements over that queue alone, each kept as a generic plan.
        v_queue := p_queues[1];
        PERFORM 1 FROM birddog.queue_heads h WHERE h.queue = v_queue FOR UPDATE;
        SELECT j.agent_id, j.priority, j.created_at, j.job_id INTO v_head
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue = v_queue
        ORDER BY j.priority DESC, j.created_at, j.job_id
        LIMIT 1;
        SELECT j.not_before INTO v_due
        FROM birddog.jobs j
        WHERE j.state = 'queued' AND j.queue = v_queue
        ORDER BY j.not_before NULLS FIRST
        LIMIT 1;
        SELECT count(*)::integer INTO v_running
        FROM birddog.jobs j
        WHERE j.state = 'running' AND j.queue = v_queue;
        IF v_head.job_id IS NULL AND v_running = 0 THEN
            DELETE FROM birddog.queue_heads h WHERE h.queue = v_queue;
        ELSE
            INSERT INTO birddog.queue_heads AS h (
                queue, agent_id, priority, created_at, job_id, due_at, running
            )
            VALUES (v_queue, v_head.agent_id, v_head.priority, v_head.created_at,
                    v_head.job_id, v_due, v_running)
            ON CONFLICT (queue) DO UPDATE
            SET agent_id = excluded.agent_id, priority = excluded.priority,
                created_at = excluded.created_at, job_id = excluded.job_id,
                due_at = excluded.due_at, running = excluded.running
            WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
                IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                                  excluded.job_id, excluded.due_at, excluded.running);
        END IF;
        RETURN;
    END IF;
    -- Recompute the heads of p_queues from their jobs. The rows are locked first, in queue
    -- order, by a statement of their own: the recomputation below takes its snapshot only
    -- then, so it sees every change committed by a transaction that held one of them, and
    -- the last transaction to change a queue's jobs leaves its row right.
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue = ANY(p_queues)
    ORDER BY h.queue
    FOR UPDATE;
    WITH facts AS (
        SELECT q.queue, head.agent_id, head.priority, head.created_at, head.job_id,
               due.due_at, run.running
        FROM (SELECT DISTINCT u.queue FROM unnest(p_queues) AS u(queue)) q
        LEFT JOIN LATERAL (
            SELECT j.agent_id, j.priority, j.created_at, j.job_id
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.priority DESC, j.created_at, j.job_id
            LIMIT 1
        ) head ON true
        LEFT JOIN LATERAL (
            SELECT j.not_before AS due_at
            FROM birddog.jobs j
            WHERE j.state = 'queued' AND j.queue = q.queue
            ORDER BY j.not_before NULLS FIRST
            LIMIT 1
        ) due ON true
        CROSS JOIN LATERAL (
            SELECT count(*)::integer AS running
            FROM birddog.jobs j
            WHERE j.state = 'running' AND j.queue = q.queue
        ) run
    ), kept AS (
        INSERT INTO birddog.queue_heads AS h (
            queue, agent_id, priority, created_at, job_id, due_at, running
        )
        SELECT f.queue, f.agent_id, f.priority, f.created_at, f.job_id, f.due_at, f.running
        FROM facts f
        WHERE f.job_id IS NOT NULL OR f.running > 0
        ON CONFLICT (queue) DO UPDATE
        SET agent_id = excluded.agent_id, priority = excluded.priority,
            created_at = excluded.created_at, job_id = excluded.job_id,
            due_at = excluded.due_at, running = excluded.running
        WHERE (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running)
            IS DISTINCT FROM (excluded.agent_id, excluded.priority, excluded.created_at,
                              excluded.job_id, excluded.due_at, excluded.running)
    )
    DELETE FROM birddog.queue_heads h
    USING facts f
    WHERE h.queue = f.queue AND f.job_id IS NULL AND f.running = 0;
END
$function$
"""
"""``birddog._queue_heads_refresh(p_queues text[])`` as revision 0023 left it, as the downgrade restores it."""

REQUEUE = r"""CREATE OR REPLACE FUNCTION birddog._requeue(p_job_id text, p_diagnostic text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_queue text;
    v_queue_key text;
BEGIN
    -- A recovery: back in its queue, claim cleared, recovery_count + 1 (NULL diagnostic:
    -- the last one stays); announced on birddog_jobs at commit.
    UPDATE birddog.jobs j
    SET state = 'queued', claim_token = NULL, lease_expires_at = NULL, worker_id = NULL,
        slot = NULL, recovery_count = j.recovery_count + 1,
        diagnostic = coalesce(p_diagnostic, j.diagnostic), updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running'
    RETURNING j.queue, j.queue_key INTO v_queue, v_queue_key;
    IF v_queue IS NOT NULL THEN
        PERFORM birddog._queue_heads_refresh(ARRAY[v_queue_key]);
    END IF;
    IF v_queue IS NOT NULL THEN
        PERFORM pg_notify('birddog_jobs', v_queue);
    END IF;
END
$function$
"""
"""``birddog._requeue(p_job_id text, p_diagnostic text)`` as this revision installs it."""

PREVIOUS_REQUEUE = r"""CREATE OR REPLACE FUNCTION birddog._requeue(p_job_id text, p_diagnostic text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
        PERFORM birddog._queue_heads_refresh(ARRAY[v_queue]);
    END IF;
    IF v_queue IS NOT NULL THEN
        PERFORM pg_notify('birddog_jobs', v_queue);
    END IF;
END
$function$
"""
"""``birddog._requeue(p_job_id text, p_diagnostic text)`` as revision 0023 left it, as the downgrade restores it."""

SETTLE_JOB = r"""CREATE OR REPLACE FUNCTION birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)
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
    WITH direct AS (
        SELECT r.key, r.agent_id, r.session_id, r.reply
        FROM unnest(v_keys, v_agents, v_sessions, v_replies) AS r(key, agent_id, session_id, reply)
        JOIN birddog.routes rt ON rt.agent_id = r.agent_id
        WHERE rt.kind = 'mailbox' AND rt.enabled
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
    PERFORM birddog._queue_heads_refresh(ARRAY[p_queue]);
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
    WITH direct AS (
        SELECT r.key, r.agent_id, r.session_id, r.reply
        FROM unnest(v_keys, v_agents, v_sessions, v_replies) AS r(key, agent_id, session_id, reply)
        JOIN birddog.routes rt ON rt.agent_id = r.agent_id
        WHERE rt.kind = 'mailbox' AND rt.enabled
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
"""``birddog._settle_job(p_job_id text, p_queue text, p_payload jsonb, p_job_traceparent text, p_outcome text, p_content text, p_diagnostic text, p_reply_diagnostic text, p_records_cancellation boolean, p_now timestamp with time zone, p_max_content_bytes integer, p_traceparent text, p_wake boolean, OUT keys text[], OUT unreadable text)`` as revision 0023 left it, as the downgrade restores it."""

CLAIM = r"""CREATE OR REPLACE FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[] DEFAULT NULL::text[])
 RETURNS TABLE(job_id text, queue text, lane text, priority smallint, state text, payload text, recovery text, outcome text, claim_token uuid, lease_expires_at timestamp with time zone, recovery_count integer, cancel_requested_at timestamp with time zone, cancel_content text, created_at timestamp with time zone, traceparent text, not_before timestamp with time zone, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
    v_every boolean := p_queues IS NULL AND p_agents IS NULL;
    -- Queues by key (birddog.jobs.queue_key): agent, unit separator, session.
    v_queues text[];
    v_tried text[] := '{}';
    v_taken integer;
    v_total integer := 0;
BEGIN
    -- The head of each queue (priority, age, id) that may be claimed at p_started_at (its
    -- not-before passed, not expired) with a free slot: of every queue but the reserved
    -- ones, or of the queues p_queues names and the sessions of the agents p_agents names.
    -- An agent's login claims only its own jobs, from the sessions or agent it names.
    IF v_agent IS NOT NULL AND p_queues IS NULL
       AND (p_agents IS NULL OR EXISTS (
           SELECT 1 FROM unnest(p_agents) AS a(agent) WHERE a.agent IS DISTINCT FROM v_agent
       )) THEN
        RAISE EXCEPTION 'an agent claims from the sessions it names, or as itself, only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A few passes: a candidate whose head cannot be taken (another transaction holds it, a
    -- head row out of date) is refreshed and left out of the next pass.
    -- The passes go on until p_limit jobs are taken or no candidate is left, so a
    -- claim that takes fewer than it asks for found no other queue to take from.
    FOR v_pass IN 1..5 LOOP
        -- The candidates, locked (SKIP LOCKED: a claimer never waits, and one queue's
        -- candidates are never two claimers' at once), in head order.
        IF v_every THEN
            v_queues := ARRAY(
                SELECT h.queue_key FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots AND NOT starts_with(h.queue, p_reserved_prefix)
                  AND NOT (h.queue_key = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        ELSE
            v_queues := ARRAY(
                SELECT h.queue_key FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots
                  AND (h.queue = ANY(p_queues)
                       OR (h.agent_id = ANY(p_agents)
                           AND NOT starts_with(h.queue, p_reserved_prefix)))
                  AND (v_agent IS NULL OR h.agent_id = v_agent)
                  AND NOT (h.queue_key = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        END IF;
        EXIT WHEN cardinality(v_queues) = 0;
        v_tried := v_tried || v_queues;
        RETURN QUERY
        WITH picked AS (
            -- Each candidate's first job that may be claimed now, read from the jobs: a head
            -- another transaction holds is skipped, never the job behind it taken instead.
            SELECT j.job_id, j.queue_key
            FROM unnest(v_queues) WITH ORDINALITY AS c(queue_key, n)
            CROSS JOIN LATERAL (
                SELECT q.job_id FROM birddog.jobs q
                WHERE q.state = 'queued' AND q.queue_key = c.queue_key
                  AND (q.not_before IS NULL OR q.not_before <= p_started_at)
                  AND (q.expires_at IS NULL OR q.expires_at > p_started_at)
                ORDER BY q.priority DESC, q.created_at, q.job_id
                LIMIT 1
            ) head
            JOIN birddog.jobs j ON j.job_id = head.job_id
            WHERE j.state = 'queued'
              AND (p_agents IS NULL OR j.queue = ANY(p_queues) OR j.agent_id = ANY(p_agents))
              AND (v_agent IS NULL OR j.agent_id = v_agent)
            ORDER BY c.n
            FOR UPDATE OF j SKIP LOCKED
        ),
        slotted AS (
            -- The lowest free slot, counted from the running jobs themselves (none free:
            -- the queue is busy, whatever its head row says).
            SELECT p.job_id, (
                SELECT min(s.slot) FROM generate_series(0, p_slots - 1) AS s(slot)
                WHERE NOT EXISTS (
                    SELECT 1 FROM birddog.jobs r
                    WHERE r.queue_key = p.queue_key AND r.state = 'running' AND r.slot = s.slot
                )
            ) AS slot
            FROM picked p
        )
        UPDATE birddog.jobs j
        SET state = 'running', slot = s.slot, claim_token = gen_random_uuid(),
            lease_expires_at = p_lease_until, worker_id = p_worker_id,
            started_at = p_started_at, updated_at = now()
        FROM slotted s
        WHERE j.job_id = s.job_id AND s.slot IS NOT NULL
        RETURNING
            j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
            j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
            j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent, j.not_before,
            j.expires_at;
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        PERFORM birddog._queue_heads_refresh(v_queues);
        v_total := v_total + v_taken;
        EXIT WHEN v_total >= p_limit;
    END LOOP;
END
$function$
"""
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[])`` as this revision installs it."""

PREVIOUS_CLAIM = r"""CREATE OR REPLACE FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[] DEFAULT NULL::text[])
 RETURNS TABLE(job_id text, queue text, lane text, priority smallint, state text, payload text, recovery text, outcome text, claim_token uuid, lease_expires_at timestamp with time zone, recovery_count integer, cancel_requested_at timestamp with time zone, cancel_content text, created_at timestamp with time zone, traceparent text, not_before timestamp with time zone, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
    v_agent text := birddog._caller_agent();
    v_every boolean := p_queues IS NULL AND p_agents IS NULL;
    v_queues text[];
    v_tried text[] := '{}';
    v_taken integer;
    v_total integer := 0;
BEGIN
    -- The head of each queue (priority, age, id) that may be claimed at p_started_at (its
    -- not-before passed, not expired) with a free slot: of every queue but the reserved
    -- ones, or of the queues p_queues names and the sessions of the agents p_agents names.
    -- An agent's login claims only its own jobs, from the sessions or agent it names.
    IF v_agent IS NOT NULL AND p_queues IS NULL
       AND (p_agents IS NULL OR EXISTS (
           SELECT 1 FROM unnest(p_agents) AS a(agent) WHERE a.agent IS DISTINCT FROM v_agent
       )) THEN
        RAISE EXCEPTION 'an agent claims from the sessions it names, or as itself, only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- A few passes: a candidate whose head cannot be taken (another transaction holds it, a
    -- head row out of date) is refreshed and left out of the next pass.
    -- The passes go on until p_limit jobs are taken or no candidate is left, so a
    -- claim that takes fewer than it asks for found no other queue to take from.
    FOR v_pass IN 1..5 LOOP
        -- The candidates, locked (SKIP LOCKED: a claimer never waits, and one queue's
        -- candidates are never two claimers' at once), in head order.
        IF v_every THEN
            v_queues := ARRAY(
                SELECT h.queue FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots AND NOT starts_with(h.queue, p_reserved_prefix)
                  AND NOT (h.queue = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        ELSE
            v_queues := ARRAY(
                SELECT h.queue FROM birddog.queue_heads h
                WHERE h.job_id IS NOT NULL
                  AND (h.due_at IS NULL OR h.due_at <= p_started_at)
                  AND h.running < p_slots
                  AND (h.queue = ANY(p_queues)
                       OR (h.agent_id = ANY(p_agents)
                           AND NOT starts_with(h.queue, p_reserved_prefix)))
                  AND NOT (h.queue = ANY(v_tried))
                ORDER BY h.priority DESC, h.created_at, h.job_id
                LIMIT p_limit - v_total
                FOR UPDATE SKIP LOCKED
            );
        END IF;
        EXIT WHEN cardinality(v_queues) = 0;
        v_tried := v_tried || v_queues;
        RETURN QUERY
        WITH picked AS (
            -- Each candidate's first job that may be claimed now, read from the jobs: a head
            -- another transaction holds is skipped, never the job behind it taken instead.
            SELECT j.job_id, j.queue
            FROM unnest(v_queues) WITH ORDINALITY AS c(queue, n)
            CROSS JOIN LATERAL (
                SELECT q.job_id FROM birddog.jobs q
                WHERE q.state = 'queued' AND q.queue = c.queue
                  AND (q.not_before IS NULL OR q.not_before <= p_started_at)
                  AND (q.expires_at IS NULL OR q.expires_at > p_started_at)
                ORDER BY q.priority DESC, q.created_at, q.job_id
                LIMIT 1
            ) head
            JOIN birddog.jobs j ON j.job_id = head.job_id
            WHERE j.state = 'queued'
              AND (p_agents IS NULL OR j.queue = ANY(p_queues) OR j.agent_id = ANY(p_agents))
              AND (v_agent IS NULL OR j.agent_id = v_agent)
            ORDER BY c.n
            FOR UPDATE OF j SKIP LOCKED
        ),
        slotted AS (
            -- The lowest free slot, counted from the running jobs themselves (none free:
            -- the queue is busy, whatever its head row says).
            SELECT p.job_id, (
                SELECT min(s.slot) FROM generate_series(0, p_slots - 1) AS s(slot)
                WHERE NOT EXISTS (
                    SELECT 1 FROM birddog.jobs r
                    WHERE r.queue = p.queue AND r.state = 'running' AND r.slot = s.slot
                )
            ) AS slot
            FROM picked p
        )
        UPDATE birddog.jobs j
        SET state = 'running', slot = s.slot, claim_token = gen_random_uuid(),
            lease_expires_at = p_lease_until, worker_id = p_worker_id,
            started_at = p_started_at, updated_at = now()
        FROM slotted s
        WHERE j.job_id = s.job_id AND s.slot IS NOT NULL
        RETURNING
            j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
            j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
            j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent, j.not_before,
            j.expires_at;
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        PERFORM birddog._queue_heads_refresh(v_queues);
        v_total := v_total + v_taken;
        EXIT WHEN v_total >= p_limit;
    END LOOP;
END
$function$
"""
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[])`` as revision 0023 left it, as the downgrade restores it."""

ENQUEUE = r"""CREATE OR REPLACE FUNCTION birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_in_s double precision DEFAULT NULL::double precision)
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
    v_created timestamptz := coalesce(p_created_at, clock_timestamp());
    v_expires interval := make_interval(secs => p_expires_in_s);
    v_to text;
    v_queue_key text;
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
    -- The agent the mail is addressed to (NULL: no mail, or not BirdDog's).
    v_to := birddog._address(v_payload -> 'mail' -> 'to') ->> 'agentId';
    -- A queued job, nothing else: state, lease and claim are not the caller's to give. The
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at
    )
    VALUES (
        p_job_id, p_queue, p_lane, p_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before, v_created + v_expires
    )
    ON CONFLICT (job_id) DO NOTHING
    RETURNING j.queue_key INTO v_queue_key;
    IF FOUND THEN
        -- Its queue's head: this job, when it comes first (or the queue had none queued);
        -- the queue due as soon as this job may be claimed, if sooner. The upsert works on
        -- the row's latest version, whoever changed it last.
        INSERT INTO birddog.queue_heads AS h (
            queue_key, queue, agent_id, priority, created_at, job_id, due_at, running
        )
        VALUES (
            v_queue_key, p_queue, v_to, p_priority, v_created, p_job_id,
            p_not_before, 0
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
        differing := NULL;  -- the conflicting job is gone, or not in this snapshot
        RETURN NEXT;
        RETURN;
    END IF;
    differing := array_remove(ARRAY[
        CASE WHEN v_stored.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN v_stored.lane IS DISTINCT FROM p_lane THEN 'lane' END,
        CASE WHEN v_stored.priority IS DISTINCT FROM p_priority THEN 'priority' END,
        CASE WHEN v_stored.payload IS DISTINCT FROM v_payload THEN 'payload' END,
        CASE WHEN v_stored.recovery IS DISTINCT FROM v_recovery THEN 'recovery' END,
        CASE WHEN v_stored.not_before IS DISTINCT FROM p_not_before THEN 'not_before' END,
        CASE WHEN (v_stored.expires_at - v_stored.created_at) IS DISTINCT FROM v_expires
             THEN 'expires_in_s' END
    ], NULL);
    RETURN NEXT;
END
$function$
"""
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as this revision installs it."""

PREVIOUS_ENQUEUE = r"""CREATE OR REPLACE FUNCTION birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_in_s double precision DEFAULT NULL::double precision)
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
    v_created timestamptz := coalesce(p_created_at, clock_timestamp());
    v_expires interval := make_interval(secs => p_expires_in_s);
    v_to text;
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
    -- The agent the mail is addressed to (NULL: no mail, or not BirdDog's).
    v_to := birddog._address(v_payload -> 'mail' -> 'to') ->> 'agentId';
    -- A queued job, nothing else: state, lease and claim are not the caller's to give. The
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at
    )
    VALUES (
        p_job_id, p_queue, p_lane, p_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before, v_created + v_expires
    )
    ON CONFLICT (job_id) DO NOTHING;
    IF FOUND THEN
        -- Its queue's head: this job, when it comes first (or the queue had none queued);
        -- the queue due as soon as this job may be claimed, if sooner. The upsert works on
        -- the row's latest version, whoever changed it last.
        INSERT INTO birddog.queue_heads AS h (
            queue, agent_id, priority, created_at, job_id, due_at, running
        )
        VALUES (
            p_queue, v_to, p_priority, v_created, p_job_id,
            p_not_before, 0
        )
        ON CONFLICT (queue) DO UPDATE
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
        differing := NULL;  -- the conflicting job is gone, or not in this snapshot
        RETURN NEXT;
        RETURN;
    END IF;
    differing := array_remove(ARRAY[
        CASE WHEN v_stored.queue IS DISTINCT FROM p_queue THEN 'queue' END,
        CASE WHEN v_stored.lane IS DISTINCT FROM p_lane THEN 'lane' END,
        CASE WHEN v_stored.priority IS DISTINCT FROM p_priority THEN 'priority' END,
        CASE WHEN v_stored.payload IS DISTINCT FROM v_payload THEN 'payload' END,
        CASE WHEN v_stored.recovery IS DISTINCT FROM v_recovery THEN 'recovery' END,
        CASE WHEN v_stored.not_before IS DISTINCT FROM p_not_before THEN 'not_before' END,
        CASE WHEN (v_stored.expires_at - v_stored.created_at) IS DISTINCT FROM v_expires
             THEN 'expires_in_s' END
    ], NULL);
    RETURN NEXT;
END
$function$
"""
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as revision 0023 left it, as the downgrade restores it."""

QUEUE_HEADS_REPAIR = r"""CREATE OR REPLACE FUNCTION birddog.queue_heads_repair()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_queues text[];
BEGIN
    -- Compare every queue head with what the jobs say (one pass over the queued and
    -- running jobs) and recompute the rows that differ, or are missing, or are left over;
    -- returns how many queues were repaired. Rows written only by BirdDog's functions
    -- never differ: this is for jobs written by hand.
    WITH queued AS (
        SELECT DISTINCT ON (j.queue_key) j.queue_key, j.priority, j.created_at, j.job_id
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        ORDER BY j.queue_key, j.priority DESC, j.created_at, j.job_id
    ), due AS (
        SELECT j.queue_key,
               CASE WHEN bool_and(j.not_before IS NOT NULL) THEN min(j.not_before) END AS due_at
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        GROUP BY j.queue_key
    ), running AS (
        SELECT j.queue_key, count(*)::integer AS running
        FROM birddog.jobs j
        WHERE j.state = 'running'
        GROUP BY j.queue_key
    ), truth AS (
        SELECT coalesce(q.queue_key, r.queue_key) AS queue_key,
               -- The queue's agent, as _queue_heads_refresh writes it (the key before its
               -- separator), whether or not a job is queued.
               nullif(split_part(coalesce(q.queue_key, r.queue_key), E'\x1f', 1), '') AS agent_id,
               q.priority, q.created_at, q.job_id, d.due_at, coalesce(r.running, 0) AS running
        FROM queued q
        JOIN due d ON d.queue_key = q.queue_key
        FULL JOIN running r ON r.queue_key = q.queue_key
    )
    SELECT coalesce(
        array_agg(coalesce(t.queue_key, h.queue_key) ORDER BY coalesce(t.queue_key, h.queue_key)),
        '{}'
    )
    INTO v_queues
    FROM truth t
    FULL JOIN birddog.queue_heads h ON h.queue_key = t.queue_key
    WHERE (t.agent_id, t.priority, t.created_at, t.job_id, t.due_at, t.running)
        IS DISTINCT FROM (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running);
    IF cardinality(v_queues) > 0 THEN
        PERFORM birddog._queue_heads_refresh(v_queues);
    END IF;
    RETURN cardinality(v_queues);
END
$function$
"""
"""``birddog.queue_heads_repair()`` as this revision installs it."""

PREVIOUS_QUEUE_HEADS_REPAIR = r"""CREATE OR REPLACE FUNCTION birddog.queue_heads_repair()
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_queues text[];
BEGIN
    -- Compare every queue head with what the jobs say (one pass over the queued and
    -- running jobs) and recompute the rows that differ, or are missing, or are left over;
    -- returns how many queues were repaired. Rows written only by BirdDog's functions
    -- never differ: this is for jobs written by hand.
    WITH queued AS (
        SELECT DISTINCT ON (j.queue) j.queue, j.agent_id, j.priority, j.created_at, j.job_id
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        ORDER BY j.queue, j.priority DESC, j.created_at, j.job_id
    ), due AS (
        SELECT j.queue,
               CASE WHEN bool_and(j.not_before IS NOT NULL) THEN min(j.not_before) END AS due_at
        FROM birddog.jobs j
        WHERE j.state = 'queued'
        GROUP BY j.queue
    ), running AS (
        SELECT j.queue, count(*)::integer AS running
        FROM birddog.jobs j
        WHERE j.state = 'running'
        GROUP BY j.queue
    ), truth AS (
        SELECT coalesce(q.queue, r.queue) AS queue, q.agent_id, q.priority, q.created_at,
               q.job_id, d.due_at, coalesce(r.running, 0) AS running
        FROM queued q
        JOIN due d ON d.queue = q.queue
        FULL JOIN running r ON r.queue = q.queue
    )
    SELECT coalesce(array_agg(coalesce(t.queue, h.queue) ORDER BY coalesce(t.queue, h.queue)), '{}')
    INTO v_queues
    FROM truth t
    FULL JOIN birddog.queue_heads h ON h.queue = t.queue
    WHERE (t.agent_id, t.priority, t.created_at, t.job_id, t.due_at, t.running)
        IS DISTINCT FROM (h.agent_id, h.priority, h.created_at, h.job_id, h.due_at, h.running);
    IF cardinality(v_queues) > 0 THEN
        PERFORM birddog._queue_heads_refresh(v_queues);
    END IF;
    RETURN cardinality(v_queues);
END
$function$
"""
"""``birddog.queue_heads_repair()`` as revision 0023 left it, as the downgrade restores it."""

REAP = r"""CREATE OR REPLACE FUNCTION birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(job_id text, what text, unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
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
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue_key IN (
        SELECT j.queue_key FROM birddog.jobs j WHERE j.job_id = ANY(p_job_ids)
    )
    ORDER BY h.queue_key
    FOR UPDATE;
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
            IF v_job.state = 'queued'
               AND (v_job.created_at <= p_since OR v_job.expires_at <= p_now)
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
$function$
"""
"""``birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)`` as this revision installs it."""

PREVIOUS_REAP = r"""CREATE OR REPLACE FUNCTION birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(job_id text, what text, unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
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
    PERFORM 1 FROM birddog.queue_heads h
    WHERE h.queue IN (
        SELECT j.queue FROM birddog.jobs j WHERE j.job_id = ANY(p_job_ids)
    )
    ORDER BY h.queue
    FOR UPDATE;
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
            IF v_job.state = 'queued'
               AND (v_job.created_at <= p_since OR v_job.expires_at <= p_now)
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
$function$
"""
"""``birddog.reap(p_event text, p_job_ids text[], p_recovery_counts integer[], p_contents text[], p_diagnostics text[], p_now timestamp with time zone, p_since timestamp with time zone, p_lease_diagnostic text, p_lease_reply_diagnostic text, p_max_content_bytes integer, p_wake boolean)`` as revision 0023 left it, as the downgrade restores it."""

SESSION_KNOWN = r"""CREATE OR REPLACE FUNCTION birddog.session_known(p_agent_id text, p_session_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
    -- Whether an agent session can be asked (it has a route, or its session was sent work
    -- before, by anyone, as this agent's session), without showing the caller anyone's jobs.
    SELECT EXISTS (SELECT 1 FROM birddog.routes r WHERE r.agent_id = p_agent_id)
        OR EXISTS (SELECT 1 FROM birddog.jobs j WHERE j.agent_id = p_agent_id AND j.queue = p_session_id)
$function$
"""
"""``birddog.session_known(p_agent_id text, p_session_id text)`` as this revision installs it."""

PREVIOUS_SESSION_KNOWN = r"""CREATE OR REPLACE FUNCTION birddog.session_known(p_agent_id text, p_session_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
    -- Whether an agent session can be asked (it has a route, or its session was sent work
    -- before, by anyone), without showing the caller anyone's jobs.
    SELECT EXISTS (SELECT 1 FROM birddog.routes r WHERE r.agent_id = p_agent_id)
        OR EXISTS (SELECT 1 FROM birddog.jobs j WHERE j.queue = p_session_id)
$function$
"""
"""``birddog.session_known(p_agent_id text, p_session_id text)`` as revision 0023 left it, as the downgrade restores it."""


def upgrade() -> None:
    op.execute("DROP FUNCTION birddog._queue_heads_refresh(p_queues text[])")
    op.execute(QUEUE_HEADS_REFRESH)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog._queue_heads_refresh(p_queue_keys text[]) FROM PUBLIC"
    )
    op.execute(REQUEUE)
    op.execute(SETTLE_JOB)
    op.execute(CLAIM)
    op.execute(ENQUEUE)
    op.execute(QUEUE_HEADS_REPAIR)
    op.execute(REAP)
    op.execute(SESSION_KNOWN)


def downgrade() -> None:
    op.execute("DROP FUNCTION birddog._queue_heads_refresh(p_queue_keys text[])")
    op.execute(PREVIOUS_QUEUE_HEADS_REFRESH)
    op.execute("REVOKE ALL ON FUNCTION birddog._queue_heads_refresh(p_queues text[]) FROM PUBLIC")
    op.execute(PREVIOUS_REQUEUE)
    op.execute(PREVIOUS_SETTLE_JOB)
    op.execute(PREVIOUS_CLAIM)
    op.execute(PREVIOUS_ENQUEUE)
    op.execute(PREVIOUS_QUEUE_HEADS_REPAIR)
    op.execute(PREVIOUS_REAP)
    op.execute(PREVIOUS_SESSION_KNOWN)
