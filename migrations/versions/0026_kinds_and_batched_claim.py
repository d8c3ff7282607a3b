"""A claim takes a batched turn; a job's payload names its kind.

An agent's turn is the expensive unit, not a mail: a worker with ``--batch N`` claims, in
the same call of ``birddog.claim``, each head it takes and up to ``N - 1`` more jobs of
that head's queue (the same agent and session, ``queue_key``) that may be claimed now (in
claim order, under the same filters and row locks). Those run without a slot of their
own: the head's slot is the turn's, and the worker settles the head last, so one turn at
a time per session still holds. The new last parameter ``p_batch`` (default 1: the claim
as before) changes the signature, so the function is dropped and created again;
``birddog migrate`` grants it again to the roles when they are installed.

``birddog.enqueue`` fills ``birddog.jobs.kind`` (revision 0025) from the payload's
``kind`` key (``task`` when it names none, as every mail of the TypeScript BirdDog; a job
that is not BirdDog mail is a ``task`` whatever its payload says), and
``birddog._agent_mail`` (how a settlement reads the mail it owes replies for) takes that
key beside the mail; before, a job of kind report or receipt would have settled without
its replies.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._agent_mail (changed), birddog.claim (changed),
birddog.enqueue (changed).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | Sequence[str] | None = "0025"
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
                             'mail', 'kind']) <> '{}' THEN
        problem := 'payload';
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
"""``birddog._agent_mail(p_job_id text, p_queue text, p_payload jsonb, OUT problem text, OUT mail_key text, OUT command_id text, OUT recipient jsonb, OUT reply_to jsonb)`` as revision 0025 left it, as the downgrade restores it."""

CLAIM = r"""CREATE OR REPLACE FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[] DEFAULT NULL::text[], p_batch integer DEFAULT 1)
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
    v_leads text[];
    v_followers text[];
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
        , taken AS (
            UPDATE birddog.jobs j
            SET state = 'running', slot = s.slot, claim_token = gen_random_uuid(),
                lease_expires_at = p_lease_until, worker_id = p_worker_id,
                started_at = p_started_at, updated_at = now()
            FROM slotted s
            WHERE j.job_id = s.job_id AND s.slot IS NOT NULL
            RETURNING j.job_id
        )
        SELECT coalesce(array_agg(t.job_id), '{}') INTO v_leads FROM taken t;
        v_taken := cardinality(v_leads);
        v_followers := '{}';
        IF p_batch > 1 AND v_taken > 0 THEN
            -- A batched turn: behind each head taken, up to p_batch - 1 more jobs of its
            -- queue that may be claimed now, in claim order, running with no slot of their
            -- own (the head's slot is the turn's: the worker settles the head last).
            WITH behind AS (
                SELECT q.job_id
                FROM birddog.jobs l
                CROSS JOIN LATERAL (
                    SELECT f.job_id FROM birddog.jobs f
                    WHERE f.state = 'queued' AND f.queue_key = l.queue_key
                      AND (f.not_before IS NULL OR f.not_before <= p_started_at)
                      AND (f.expires_at IS NULL OR f.expires_at > p_started_at)
                      AND (p_agents IS NULL OR f.queue = ANY(p_queues)
                           OR f.agent_id = ANY(p_agents))
                      AND (v_agent IS NULL OR f.agent_id = v_agent)
                    ORDER BY f.priority DESC, f.created_at, f.job_id
                    LIMIT p_batch - 1
                ) q
                WHERE l.job_id = ANY(v_leads)
            ), locked AS (
                SELECT j.job_id FROM birddog.jobs j
                WHERE j.job_id IN (SELECT b.job_id FROM behind b) AND j.state = 'queued'
                FOR UPDATE OF j SKIP LOCKED
            ), followed AS (
                UPDATE birddog.jobs j
                SET state = 'running', slot = NULL, claim_token = gen_random_uuid(),
                    lease_expires_at = p_lease_until, worker_id = p_worker_id,
                    started_at = p_started_at, updated_at = now()
                FROM locked k
                WHERE j.job_id = k.job_id
                RETURNING j.job_id
            )
            SELECT coalesce(array_agg(f.job_id), '{}') INTO v_followers FROM followed f;
        END IF;
        RETURN QUERY
        SELECT
            j.job_id, j.queue, j.lane, j.priority, j.state, j.payload::text, j.recovery::text,
            j.outcome, j.claim_token, j.lease_expires_at, j.recovery_count,
            j.cancel_requested_at, j.cancel_content, j.created_at, j.traceparent, j.not_before,
            j.expires_at
        FROM birddog.jobs j
        WHERE j.job_id = ANY(v_leads || v_followers)
        ORDER BY j.queue_key, j.slot NULLS LAST, j.priority DESC, j.created_at, j.job_id;
        PERFORM birddog._queue_heads_refresh(v_queues);
        v_total := v_total + v_taken;
        EXIT WHEN v_total >= p_limit;
    END LOOP;
END
$function$
"""
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[], p_batch integer)`` as this revision installs it."""

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
"""``birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[])`` as revision 0025 left it, as the downgrade restores it."""

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
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent. A mail's
    -- kind is the payload's (a task when it names none: the TypeScript BirdDog's mail); a
    -- job that is not BirdDog mail is a task, whatever its own payload calls a kind.
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at, kind
    )
    VALUES (
        p_job_id, p_queue, p_lane, p_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before, v_created + v_expires,
        CASE WHEN v_to IS NULL THEN 'task' ELSE coalesce(v_payload ->> 'kind', 'task') END
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
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as revision 0025 left it, as the downgrade restores it."""


def upgrade() -> None:
    op.execute(
        "DROP FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[])"
    )
    op.execute(AGENT_MAIL)
    op.execute(CLAIM)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[], p_batch integer) FROM PUBLIC"
    )
    op.execute(ENQUEUE)


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[], p_batch integer)"
    )
    op.execute(PREVIOUS_AGENT_MAIL)
    op.execute(PREVIOUS_CLAIM)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.claim(p_queues text[], p_limit integer, p_lease_until timestamp with time zone, p_worker_id text, p_slots integer, p_started_at timestamp with time zone, p_reserved_prefix text, p_agents text[]) FROM PUBLIC"
    )
    op.execute(PREVIOUS_ENQUEUE)
