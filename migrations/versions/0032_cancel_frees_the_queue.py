"""A cancelled running job frees its queue within a grace, whatever its worker does.

``birddog jobs cancel`` only recorded a running job's cancellation: a worker (or a login
that claimed the job to squat the queue) that never stops kept the queue's head, renewing
its lease for ever. Now:

- ``birddog.limits.cancel_grace_s`` (new column, 60 s, > 0) is how long a running job's
  worker has to stop its turn once a cancellation is asked; it bounds every caller,
  operators included (``birddog._cancel_grace``, new).
- ``birddog.cancel`` cuts a running job's lease to the grace when it records the
  cancellation; ``birddog.heartbeat`` never extends a lease past it. Once the lease
  passes, a reaper settles the job cancelled (as before for a cancelled job whose lease
  ended) and the queue moves on.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog._cancel_grace (new), birddog.cancel (changed),
birddog.heartbeat (changed).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | Sequence[str] | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

CANCEL_GRACE = r"""CREATE OR REPLACE FUNCTION birddog._cancel_grace()
 RETURNS interval
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
    -- How long a running job's worker has to stop its turn once a cancellation is asked:
    -- birddog.limits.cancel_grace_s (60 s by default, should the row be deleted), for every
    -- caller, operators included: the lease never outlives it.
    RETURN make_interval(secs => coalesce((SELECT l.cancel_grace_s FROM birddog.limits l), 60));
END
$function$
"""
"""``birddog._cancel_grace()`` as this revision installs it."""

CANCEL = r"""CREATE OR REPLACE FUNCTION birddog.cancel(p_job_id text, p_content text, p_now timestamp with time zone, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, keys text[], unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_cancel record;
    v_done record;
BEGIN
    -- The operator's cancellation: a queued job settles cancelled now (the first recorded
    -- content wins), a running one records it, tells its worker at once and has its lease
    -- cut to the cancel grace.
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
        -- The lease ends within the cancel grace (birddog.limits.cancel_grace_s, for every
        -- caller): a worker that will not stop its turn no longer holds the queue; once the
        -- lease passes, a reaper settles the job cancelled.
        UPDATE birddog.jobs j
        SET cancel_requested_at = p_now, cancel_content = p_content, updated_at = now(),
            lease_expires_at = least(j.lease_expires_at, p_now + birddog._cancel_grace())
        WHERE j.job_id = v_job.job_id;
        -- Its worker hears it at commit (birddog.cancels), not at its next heartbeat.
        PERFORM pg_notify('birddog_jobs', 'cancel:' || v_job.job_id);
        decision := 'record';
    END IF;
    RETURN NEXT;
END
$function$
"""
"""``birddog.cancel(p_job_id text, p_content text, p_now timestamp with time zone, p_max_content_bytes integer, p_wake boolean)`` as this revision installs it."""

PREVIOUS_CANCEL = r"""CREATE OR REPLACE FUNCTION birddog.cancel(p_job_id text, p_content text, p_now timestamp with time zone, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, keys text[], unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_cancel record;
    v_done record;
BEGIN
    -- The operator's cancellation: a queued job settles cancelled now (the first recorded
    -- content wins), a running one records it and tells its worker at once.
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
        -- Its worker hears it at commit (birddog.cancels), not at its next heartbeat.
        PERFORM pg_notify('birddog_jobs', 'cancel:' || v_job.job_id);
        decision := 'record';
    END IF;
    RETURN NEXT;
END
$function$
"""
"""``birddog.cancel(p_job_id text, p_content text, p_now timestamp with time zone, p_max_content_bytes integer, p_wake boolean)`` as revision 0031 left it, as the downgrade restores it."""

HEARTBEAT = r"""CREATE OR REPLACE FUNCTION birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
DECLARE
    v_cancel boolean;
    v_agent text := birddog._caller_agent();
    v_max_lease_s double precision := (SELECT l.max_lease_s FROM birddog._limits() l);
BEGIN
    -- The lease of a job still running under this claim (an agent's own job, for an
    -- agent's login), up to the server's max_lease_s from now (birddog._limits), and never
    -- past the cancel grace of a cancellation asked (birddog._cancel_grace); whether a
    -- cancellation was asked (NULL: the claim holds nothing).
    UPDATE birddog.jobs j
    SET lease_expires_at = least(p_lease_until,
                                 clock_timestamp() + make_interval(secs => v_max_lease_s),
                                 j.cancel_requested_at + birddog._cancel_grace()),
        updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_claim_token
      AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
    RETURNING j.cancel_requested_at IS NOT NULL INTO v_cancel;
    RETURN v_cancel;
END
$function$
"""
"""``birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)`` as this revision installs it."""

PREVIOUS_HEARTBEAT = r"""CREATE OR REPLACE FUNCTION birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
 SET plan_cache_mode TO 'auto'
AS $function$
DECLARE
    v_cancel boolean;
    v_agent text := birddog._caller_agent();
    v_max_lease_s double precision := (SELECT l.max_lease_s FROM birddog._limits() l);
BEGIN
    -- The lease of a job still running under this claim (an agent's own job, for an
    -- agent's login), up to the server's max_lease_s from now (birddog._limits);
    -- whether a cancellation was asked (NULL: the claim holds nothing).
    UPDATE birddog.jobs j
    SET lease_expires_at = least(p_lease_until,
                                 clock_timestamp() + make_interval(secs => v_max_lease_s)),
        updated_at = now()
    WHERE j.job_id = p_job_id AND j.state = 'running' AND j.claim_token = p_claim_token
      AND (v_agent IS NULL OR (j.payload #>> '{mail,to,agentId}') = v_agent)
    RETURNING j.cancel_requested_at IS NOT NULL INTO v_cancel;
    RETURN v_cancel;
END
$function$
"""
"""``birddog.heartbeat(p_job_id text, p_claim_token uuid, p_lease_until timestamp with time zone)`` as revision 0031 left it, as the downgrade restores it."""


def upgrade() -> None:
    op.add_column(
        "limits",
        sa.Column("cancel_grace_s", sa.Float, nullable=False, server_default=sa.text("60")),
        schema="birddog",
    )
    op.create_check_constraint(
        "limits_cancel_grace_check", "limits", "cancel_grace_s > 0", schema="birddog"
    )
    op.execute(CANCEL_GRACE)
    op.execute("REVOKE ALL ON FUNCTION birddog._cancel_grace() FROM PUBLIC")
    op.execute(CANCEL)
    op.execute(HEARTBEAT)


def downgrade() -> None:
    op.execute("DROP FUNCTION birddog._cancel_grace()")
    op.execute(PREVIOUS_CANCEL)
    op.execute(PREVIOUS_HEARTBEAT)
    op.drop_constraint("limits_cancel_grace_check", "limits", schema="birddog")
    op.drop_column("limits", "cancel_grace_s", schema="birddog")
