"""A checked send in one statement: ``birddog.send_mail``.

``birddog send`` and ``ask`` (``PostgresAsks.send``) wrote a mail in one transaction of
seven round trips: begin, lock the key, read the sender's route kind, ask whether the
target is known, look for a job under the key, enqueue, commit. On a busy machine a
thousand asks through a pool of ten queued behind those round trips for longer than
their deadline. ``birddog.send_mail`` runs the same statements in the same order inside
one call, so a checked send is one statement (its own transaction):

1. ``pg_advisory_xact_lock`` on the mail key (two sends of one key cannot both write);
2. the route kind of ``p_mailbox_agent`` (when given): with ``p_require_mailbox``, a route
   that is not a mailbox ends the call (``not_a_mailbox``);
3. ``birddog.session_known`` for the target, else ``unknown``;
4. the first job that carries mail with this key: its payload is returned (``stored``)
   for the caller to compare (a replay, or a conflict) and nothing is written;
5. a mailbox route is wanted when the sender has none; one for an agent other than the
   mail's sender ends the call (``wrong_sender``);
6. ``birddog.enqueue``, its answer returned (``enqueued``), with the route kind read
   again when a wanted route was not added (another process added one meanwhile).

It is ``SECURITY INVOKER``: every statement runs with the caller's rights, exactly as the
statements it replaces did (a sender's login reads only the jobs it may see, and writes
only through ``birddog.enqueue``), so granting it adds no right. ``EXECUTE`` is revoked
from ``PUBLIC`` here and granted per role by ``migrate --roles`` (``roles_grant``).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = (
    "send_mail(text, text, boolean, boolean, text, text, text, text, text, smallint, text, "
    "text, timestamptz, text, timestamptz, double precision)"
)

SEND_MAIL = """
CREATE FUNCTION birddog.send_mail(
    p_key text,
    p_mailbox_agent text,
    p_require_mailbox boolean,
    p_mailbox_is_sender boolean,
    p_to_agent text,
    p_to_session text,
    p_job_id text,
    p_queue text,
    p_lane text,
    p_priority smallint,
    p_payload text,
    p_recovery text,
    p_created_at timestamptz,
    p_traceparent text,
    p_not_before timestamptz,
    p_expires_in_s double precision
) RETURNS TABLE (
    outcome text, route_kind text, stored_payload text, inserted boolean, differing text[],
    mailbox_added boolean
)
LANGUAGE plpgsql SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
DECLARE
    v_kind text;
    v_stored text;
    v_wanted boolean;
    v_enqueued record;
BEGIN
    -- A checked send (birddog send, ask): the statements of one send's transaction, in
    -- order, with the caller's rights; the first check that fails ends the call and says
    -- which (the caller raises its typed error; nothing was written).
    PERFORM pg_advisory_xact_lock(hashtextextended('birddog.ask:' || p_key, 0));
    IF p_mailbox_agent IS NOT NULL THEN
        SELECT r.kind INTO v_kind FROM birddog.routes r WHERE r.agent_id = p_mailbox_agent;
        IF p_require_mailbox AND v_kind IS NOT NULL AND v_kind <> 'mailbox' THEN
            RETURN QUERY SELECT 'not_a_mailbox'::text, v_kind, NULL::text, false, NULL::text[],
                false;
            RETURN;
        END IF;
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
    SELECT e.inserted, e.differing, e.mailbox_added INTO v_enqueued
    FROM birddog.enqueue(
        p_job_id, p_queue, p_lane, p_priority, p_payload, p_recovery, p_created_at,
        p_traceparent, v_wanted, p_not_before, p_expires_in_s
    ) AS e;
    IF v_wanted AND NOT v_enqueued.mailbox_added THEN
        SELECT r.kind INTO v_kind FROM birddog.routes r WHERE r.agent_id = p_mailbox_agent;
    END IF;
    RETURN QUERY SELECT 'enqueued'::text, v_kind, NULL::text, v_enqueued.inserted,
        v_enqueued.differing, v_enqueued.mailbox_added;
END
$fn$"""


def upgrade() -> None:
    op.execute(SEND_MAIL)
    op.execute(f"REVOKE ALL ON FUNCTION birddog.{SIGNATURE} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION birddog.{SIGNATURE}")
