"""Every job has a kind: what its mail is for (``birddog.core.kinds``).

``task`` and ``escalation`` are interactive, ``report`` and ``receipt`` informational. The
kind lives in the job beside the mail, never in the mail's JSON (which stays the TypeScript
BirdDog's): a column ``birddog.jobs.kind`` (``task`` for every job written before, and for a
payload that names none), filled by ``birddog.enqueue`` from the payload's ``kind`` key and
checked to be one of the four. The operators' ``birddog.pending`` view shows the kind of
the mail each pending reply answers.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog.enqueue (changed).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
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
    -- login that enqueued it is kept (sent_by): a sender reads the jobs it sent. Its kind
    -- is the payload's (a task when it names none: the TypeScript BirdDog's mail).
    INSERT INTO birddog.jobs AS j (
        job_id, queue, lane, priority, state, payload, recovery, created_at, traceparent,
        sent_by, agent_id, not_before, expires_at, kind
    )
    VALUES (
        p_job_id, p_queue, p_lane, p_priority, 'queued', v_payload, v_recovery,
        v_created, p_traceparent, session_user, v_to, p_not_before, v_created + v_expires,
        coalesce(v_payload ->> 'kind', 'task')
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
"""``birddog.enqueue(p_job_id text, p_queue text, p_lane text, p_priority smallint, p_payload text, p_recovery text, p_created_at timestamp with time zone, p_traceparent text, p_sender_mailbox boolean, p_not_before timestamp with time zone, p_expires_in_s double precision)`` as revision 0022 left it, as the downgrade restores it."""


SCHEMA = "birddog"

# The view of 0003 with the kind of the mail each reply answers, as the last column
# (CREATE OR REPLACE VIEW may add columns at the end only). The job is found by its
# mail's key (the index of 0004); a reply whose job was pruned shows no kind.
PENDING_COLUMNS = """
SELECT
    o.key,
    o.recipient_agent_id,
    o.recipient_session_id,
    o.in_reply_to,
    o.command_id,
    o.outcome,
    coalesce(NOT r.enabled, false) AS held,
    r.held_at AS held_since,
    coalesce(o.lease_expires_at > now(), false) AS in_flight,
    o.attempts,
    o.deferrals,
    o.last_error,
    o.created_at,
    CASE
        WHEN NOT coalesce(r.enabled, true)
            THEN greatest(coalesce(r.held_at, now()) - o.created_at, interval '0')
        ELSE now() - o.created_at
    END AS age,
    o.due_at AS next_try_at,
    CASE
        WHEN NOT coalesce(r.enabled, true) THEN 'held'
        WHEN o.lease_expires_at > now() THEN 'in_flight'
        WHEN o.due_at <= now() THEN 'due'
        ELSE 'waiting'
    END AS status"""

KIND_COLUMN = """,
    (
        SELECT j.kind FROM birddog.jobs j
        WHERE (j.payload #>> '{mail,key}') = o.in_reply_to
        ORDER BY j.created_at, j.job_id
        LIMIT 1
    ) AS kind"""

PENDING_FROM = """
FROM birddog.outbox o
LEFT JOIN birddog.routes r ON r.agent_id = o.recipient_agent_id
WHERE o.state = 'pending'
"""

PENDING_VIEW = (
    "CREATE OR REPLACE VIEW birddog.pending AS" + PENDING_COLUMNS + KIND_COLUMN + PENDING_FROM
)
PREVIOUS_PENDING_VIEW = "CREATE VIEW birddog.pending AS" + PENDING_COLUMNS + PENDING_FROM


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("kind", sa.Text, nullable=False, server_default=sa.text("'task'")),
        schema=SCHEMA,
    )
    op.create_check_constraint(
        "jobs_kind_check",
        "jobs",
        "kind IN ('task', 'escalation', 'report', 'receipt')",
        schema=SCHEMA,
    )
    op.execute(ENQUEUE)
    op.execute(PENDING_VIEW)


def downgrade() -> None:
    op.execute(PREVIOUS_ENQUEUE)
    # The view without its last column: CREATE OR REPLACE cannot drop one.
    op.execute("DROP VIEW birddog.pending")
    op.execute(PREVIOUS_PENDING_VIEW)
    op.drop_constraint("jobs_kind_check", "jobs", schema=SCHEMA)
    op.drop_column("jobs", "kind", schema=SCHEMA)
