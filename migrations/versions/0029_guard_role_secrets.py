"""Each role sees only its own secrets: process rows by login, ``birddog a2a`` on its own role.

``birddog.daemons`` gains ``login`` (``session_user`` by default; rows already there get
the migrating login): each process row belongs to the login that registered it.
``birddog.daemons_beat(daemon_id, kind, host, pid)`` inserts the caller's row or sees it
now (the server's time, never the caller's), touches no row of another login (false),
records a ``drain`` for an operator's login only (the daemon role, the owner, a
superuser), and forgets rows not seen for an hour but the last of each kind;
``birddog.daemons_stop(daemon_id)`` marks the caller's own row stopped. The worker and
agents' logins lose every direct write on the table, so a worker's login can no longer
insert a fake drain or age, stop or delete the real one's row (``birddog status``).

The A2A server's writes and its reads of routes go through functions, so it runs as
``birddog_a2a`` (``birddog migrate --roles``) instead of the daemon role:
``birddog.a2a_push_route(agent_id)`` reads a push config's route (kind ``a2a``, agent id
``a2a-push:...``) and no other, ``birddog.a2a_push_route_add(agent_id, url, secret)``
writes only such a route, and ``birddog.a2a_cancel(job_id, caller_agent, ...)`` is the
operator's ``birddog.cancel`` on a job the login may read whose mail is from the caller's
agent (any other is ``missing``). The grants themselves (``roles_grant``, applied again
by every ``birddog migrate``) also take ``jobs.claim_token`` from every role but the
daemon's: a claim token is known only to the claimer ``birddog.claim`` handed it to.

The functions' text is frozen below, as src/birddog/postgres/functions/ had it when this
revision was written: birddog.a2a_cancel (new), birddog.a2a_push_route (new),
birddog.a2a_push_route_add (new), birddog.daemons_beat (new), birddog.daemons_stop
(new).

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

A2A_CANCEL = r"""CREATE OR REPLACE FUNCTION birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)
 RETURNS TABLE(decision text, outcome text, keys text[], unreadable text)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
#variable_conflict use_column
DECLARE
    v_job birddog.jobs%ROWTYPE;
    v_agent text := birddog._caller_agent();
BEGIN
    -- An A2A caller's CancelTask: birddog.cancel (cancel-wins, now by the server's clock)
    -- on a job whose mail is from p_caller_agent (the caller's token names it: the HTTP
    -- layer checked it) and that this login may read; any other job is 'missing' (its
    -- existence stays unknown). An agent's login cancels its own agent's mail only.
    SELECT * INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND
       OR NOT birddog.job_visible(v_job.sent_by, v_job.payload)
       OR p_caller_agent IS NULL
       OR (v_job.payload #>> '{mail,from,agentId}') IS DISTINCT FROM p_caller_agent
       OR (v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_caller_agent) THEN
        decision := 'missing';
        RETURN NEXT;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT c.decision, c.outcome, c.keys, c.unreadable
    FROM birddog.cancel(p_job_id, p_content, now(), p_max_content_bytes, p_wake) AS c;
END
$function$
"""
"""``birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)`` as this revision installs it."""

A2A_PUSH_ROUTE = r"""CREATE OR REPLACE FUNCTION birddog.a2a_push_route(p_agent_id text)
 RETURNS TABLE(agent_id text, url text, secret text, enabled boolean, kind text, batch_size integer, held_at timestamp with time zone, previous_secret text, previous_secret_until timestamp with time zone, post_timeout_s double precision, max_age_s double precision, max_attempts integer)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
    -- The route of one A2A push config (kind a2a, agent id a2a-push:...), URL and sealed
    -- secret included: what `birddog a2a` stored for a caller and reads back. Never another
    -- route's URL or secret (no row).
    SELECT r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
           r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s,
           r.max_attempts
    FROM birddog.routes r
    WHERE r.agent_id = p_agent_id AND r.kind = 'a2a' AND starts_with(r.agent_id, 'a2a-push:')
$function$
"""
"""``birddog.a2a_push_route(p_agent_id text)`` as this revision installs it."""

A2A_PUSH_ROUTE_ADD = r"""CREATE OR REPLACE FUNCTION birddog.a2a_push_route_add(p_agent_id text, p_url text, p_secret text)
 RETURNS TABLE(agent_id text, url text, secret text, enabled boolean, kind text, batch_size integer, held_at timestamp with time zone, previous_secret text, previous_secret_until timestamp with time zone, post_timeout_s double precision, max_age_s double precision, max_attempts integer)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    -- Store an A2A push config as its route: kind a2a, an agent id a2a-push:..., an http(s)
    -- URL (which `birddog a2a` checked against the push egress policy, and every drain
    -- checks again when it connects) and the caller's sealed secret; one post per reply,
    -- enabled. No row when that agent id has a route already. Never any other kind of
    -- route: a login with only this function cannot say where another agent's replies go.
    IF p_agent_id IS NULL OR NOT starts_with(p_agent_id, 'a2a-push:')
       OR length(p_agent_id) > 256 THEN
        RAISE EXCEPTION 'a push config''s route has an agent id a2a-push:...'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_url IS NULL OR length(p_url) > 4096 OR p_url !~* '^https?://'
       OR coalesce(length(p_secret), 0) NOT BETWEEN 1 AND 8192 THEN
        RAISE EXCEPTION 'a push config''s route needs an http(s) URL and a secret'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    INSERT INTO birddog.routes AS r (agent_id, url, secret, enabled, kind, batch_size)
    VALUES (p_agent_id, p_url, p_secret, true, 'a2a', 1)
    ON CONFLICT (agent_id) DO NOTHING
    RETURNING r.agent_id, r.url, r.secret, r.enabled, r.kind, r.batch_size, r.held_at,
              r.previous_secret, r.previous_secret_until, r.post_timeout_s, r.max_age_s,
              r.max_attempts;
END
$function$
"""
"""``birddog.a2a_push_route_add(p_agent_id text, p_url text, p_secret text)`` as this revision installs it."""

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
    op.execute(A2A_CANCEL)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean) FROM PUBLIC"
    )
    op.execute(A2A_PUSH_ROUTE)
    op.execute("REVOKE ALL ON FUNCTION birddog.a2a_push_route(p_agent_id text) FROM PUBLIC")
    op.execute(A2A_PUSH_ROUTE_ADD)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.a2a_push_route_add(p_agent_id text, p_url text, p_secret text) FROM PUBLIC"
    )
    op.execute(DAEMONS_BEAT)
    op.execute(
        "REVOKE ALL ON FUNCTION birddog.daemons_beat(p_daemon_id text, p_kind text, p_host text, p_pid integer) FROM PUBLIC"
    )
    op.execute(DAEMONS_STOP)
    op.execute("REVOKE ALL ON FUNCTION birddog.daemons_stop(p_daemon_id text) FROM PUBLIC")


def downgrade() -> None:
    op.execute(
        "DROP FUNCTION birddog.a2a_cancel(p_job_id text, p_caller_agent text, p_content text, p_max_content_bytes integer, p_wake boolean)"
    )
    op.execute("DROP FUNCTION birddog.a2a_push_route(p_agent_id text)")
    op.execute(
        "DROP FUNCTION birddog.a2a_push_route_add(p_agent_id text, p_url text, p_secret text)"
    )
    op.execute(
        "DROP FUNCTION birddog.daemons_beat(p_daemon_id text, p_kind text, p_host text, p_pid integer)"
    )
    op.execute("DROP FUNCTION birddog.daemons_stop(p_daemon_id text)")
    op.execute("ALTER TABLE birddog.daemons DROP COLUMN login")
