"""Each role sees only its own secrets: process rows through functions, a login's own.

``birddog.daemons`` gains ``login`` (``session_user`` by default; rows already there get
the migrating login): each process row belongs to the login that registered it.
``birddog.daemons_beat(daemon_id, kind, host, pid)`` inserts the caller's row or sees it
now (the server's time, never the caller's), touches no row of another login (false),
records a ``drain`` for an operator's login only (the daemon role, the owner, a
superuser), and forgets rows not seen for an hour but the last of each kind;
``birddog.daemons_stop(daemon_id)`` marks the caller's own row stopped. The worker and
agents' logins lose every direct write on the table, so a worker's login can no longer
insert a fake drain or age, stop or delete the real one's row (``birddog status``).

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog.daemons_beat (new), birddog.daemons_stop (new).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0029"
down_revision: str | Sequence[str] | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A revision installs the same thing forever: each function's text is frozen
# here, as PostgreSQL prints it (its signature on one line).
# ruff: noqa: E501

DAEMONS_BEAT = r"""CREATE OR REPLACE FUNCTION birddog.daemons_beat(p_daemon_id text, p_kind text, p_host text, p_pid integer)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
BEGIN
    -- Record that the caller's process p_daemon_id (a drain daemon or a worker) is alive:
    -- its row in birddog.daemons is inserted, or seen now and running again. A row belongs
    -- to the login that registered it (session_user): another login's row is never
    -- touched (false). Only an operator's login (the daemon role, the owner, a superuser)
    -- records a drain; the times are the server's (a row is never aged, never dated ahead).
    -- Then rows not seen for an hour are forgotten, but the last of each kind, so `birddog
    -- check` can still say when a daemon last beat.
    IF p_kind IS NULL OR p_kind NOT IN ('drain', 'worker') THEN
        RAISE EXCEPTION 'a process row is a drain or a worker, not %', coalesce(p_kind, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_kind = 'drain' AND NOT birddog._sees_everything() THEN
        RAISE EXCEPTION 'only an operator''s login records a drain daemon'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(length(p_daemon_id), 0) NOT BETWEEN 1 AND 300
       OR coalesce(length(p_host), 0) NOT BETWEEN 1 AND 256
       OR coalesce(p_pid, 0) < 1 THEN
        RAISE EXCEPTION 'a process row needs an id of 1 to 300 characters, a host of 1 to 256 and a pid'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO birddog.daemons AS d (daemon_id, kind, host, pid, login, started_at, seen_at)
    VALUES (p_daemon_id, p_kind, p_host, p_pid, session_user, now(), now())
    ON CONFLICT (daemon_id) DO UPDATE SET seen_at = now(), stopped_at = NULL
    WHERE d.login = session_user AND d.kind = excluded.kind;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM birddog.daemons d
    WHERE d.seen_at < now() - interval '1 hour'
      AND d.daemon_id <> ALL (
          SELECT DISTINCT ON (l.kind) l.daemon_id
          FROM birddog.daemons l
          ORDER BY l.kind, l.seen_at DESC
      );
    RETURN true;
END
$function$
"""
"""``birddog.daemons_beat(p_daemon_id text, p_kind text, p_host text, p_pid integer)`` as this revision installs it."""

DAEMONS_STOP = r"""CREATE OR REPLACE FUNCTION birddog.daemons_stop(p_daemon_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
BEGIN
    -- Mark the caller's process p_daemon_id stopped, on its clean stop: stopped now, no
    -- longer running. Only the login that registered the row may (session_user); whether
    -- a running row of its was marked.
    UPDATE birddog.daemons d SET stopped_at = now()
    WHERE d.daemon_id = p_daemon_id AND d.login = session_user AND d.stopped_at IS NULL;
    RETURN FOUND;
END
$function$
"""
"""``birddog.daemons_stop(p_daemon_id text)`` as this revision installs it."""


def upgrade() -> None:
    # Each process row belongs to the login that registered it (rows already there: the
    # migrating login's); daemons_beat and daemons_stop touch only the caller's own.
    op.execute("ALTER TABLE birddog.daemons ADD COLUMN login text NOT NULL DEFAULT session_user")
    op.execute(DAEMONS_BEAT)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.daemons_beat(p_daemon_id text, p_kind text, p_host text, p_pid integer) FROM PUBLIC"
    )
    op.execute(DAEMONS_STOP)
    op.execute("REVOKE ALL ON FUNCTION birddog.daemons_stop(p_daemon_id text) FROM PUBLIC")


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION birddog.daemons_beat(p_daemon_id text, p_kind text, p_host text, p_pid integer)"
    )
    op.execute("DROP FUNCTION birddog.daemons_stop(p_daemon_id text)")
    op.execute("ALTER TABLE birddog.daemons DROP COLUMN login")
