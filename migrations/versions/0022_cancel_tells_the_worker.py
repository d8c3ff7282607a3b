"""A cancellation recorded on a running job tells its worker at once.

``birddog.cancel`` used to record the cancellation of a running job for the worker's
next heartbeat (every lease/3, 20 s by default), so an A2A ``CancelTask`` answered
``WORKING``. It now also sends ``NOTIFY birddog_jobs, 'cancel:<job id>'`` in the same
transaction (delivered at commit); the worker, which already listens on that channel,
heartbeats at once and the heartbeat's answer ends the turn (``birddog.cancels``).

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog.cancel (changed).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | Sequence[str] | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

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
$function$
"""
"""``birddog.cancel(p_job_id text, p_content text, p_now timestamp with time zone, p_max_content_bytes integer, p_wake boolean)`` as revision 0019 left it, as the downgrade restores it."""


def upgrade() -> None:
    op.execute(CANCEL)


def downgrade() -> None:
    op.execute(PREVIOUS_CANCEL)
