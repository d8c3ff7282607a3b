"""Mail keys name one job; replays and limits tell a caller nothing it may not read.

- ``jobs_mail_key_idx`` becomes unique: no two jobs carry the same mail key, so a reply's
  visibility and acknowledgement (``birddog.mailbox_visible``, by ``in_reply_to``) follow
  the job that produced it. ``birddog.enqueue`` meets a key another job carries with
  ``differing = {mail.key}`` (nothing of that job). The upgrade stops, naming the count,
  when jobs already share a key (prune or delete them first).
- ``birddog.enqueue``'s replay answer for a job the caller may not read
  (``birddog.job_visible``) is ``differing = {job_id}``: the id is taken, no field, no
  queue, no state.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog.enqueue (changed), birddog.mailbox_visible (changed).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | Sequence[str] | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

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
    -- Any unique conflict: the job id taken, or the mail key another job's (a mail key
    -- names one job: its replies, their visibility and acknowledgement follow that job).
    ON CONFLICT DO NOTHING
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
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as revision 0028 left it, as the downgrade restores it."""

MAILBOX_VISIBLE = r"""CREATE OR REPLACE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text;
BEGIN
    -- Whether the caller may read (and acknowledge) a mailbox row of p_agent_id answering
    -- mail p_in_reply_to: an operator every row; an agent's login its own mailbox only; a
    -- sender's login the replies to the mail it sent (the ask it waits on), nothing else.
    -- A mail key is one job's (jobs_mail_key_idx is unique, and enqueue refuses a key
    -- another job carries), so a reply's visibility follows the job that produced it: a
    -- login cannot reuse another's key to read or acknowledge its replies.
    IF birddog._sees_everything() THEN
        RETURN true;
    END IF;
    v_agent := birddog._caller_agent();
    IF v_agent IS NOT NULL THEN
        RETURN p_agent_id = v_agent;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') = p_in_reply_to AND j.sent_by = session_user
    );
END
$function$
"""
"""``birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)`` as this revision installs it."""

PREVIOUS_MAILBOX_VISIBLE = r"""CREATE OR REPLACE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text;
BEGIN
    -- Whether the caller may read (and acknowledge) a mailbox row of p_agent_id answering
    -- mail p_in_reply_to: an operator every row; an agent's login its own mailbox only; a
    -- sender's login the replies to the mail it sent (the ask it waits on), nothing else.
    IF birddog._sees_everything() THEN
        RETURN true;
    END IF;
    v_agent := birddog._caller_agent();
    IF v_agent IS NOT NULL THEN
        RETURN p_agent_id = v_agent;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') = p_in_reply_to AND j.sent_by = session_user
    );
END
$function$
"""
"""``birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)`` as revision 0028 left it, as the downgrade restores it."""


MAIL_KEY = "(payload #>> '{mail,key}')"

SHARED_KEYS = r"""DO $shared$
DECLARE
    v_shared bigint;
BEGIN
    SELECT count(*) INTO v_shared FROM (
        SELECT 1 FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') IS NOT NULL
        GROUP BY (j.payload #>> '{mail,key}')
        HAVING count(*) > 1
    ) AS s;
    IF v_shared > 0 THEN
        RAISE EXCEPTION '% mail keys are carried by more than one job; a mail key now names one job', v_shared
            USING HINT = 'list them with: SELECT payload #>> ''{mail,key}'', array_agg(job_id) FROM birddog.jobs GROUP BY 1 HAVING count(*) > 1; prune or delete the extra jobs, then migrate again';
    END IF;
END
$shared$"""
"""Stop the upgrade when jobs already share a mail key (the unique index cannot be made)."""


def _mail_key_index(*, unique: bool) -> None:
    op.drop_index("jobs_mail_key_idx", table_name="jobs", schema="birddog")
    op.create_index(
        "jobs_mail_key_idx",
        "jobs",
        [sa.text(MAIL_KEY)],
        unique=unique,
        schema="birddog",
        postgresql_where=sa.text(f"{MAIL_KEY} IS NOT NULL"),
    )


def upgrade() -> None:
    op.execute(SHARED_KEYS)
    _mail_key_index(unique=True)
    op.execute(ENQUEUE)
    op.execute(MAILBOX_VISIBLE)


def downgrade() -> None:
    op.execute(PREVIOUS_ENQUEUE)
    op.execute(PREVIOUS_MAILBOX_VISIBLE)
    _mail_key_index(unique=False)
