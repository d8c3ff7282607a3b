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
``birddog.live_sessions`` gains ``login`` the same way: ``birddog.live_heartbeat``
renews, and ``birddog.live_leave`` ends, only the live sessions the caller's own login
announced, so no login ends or takes over another's (another login's holder is refused).

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
(new), birddog.live_heartbeat (changed), birddog.live_leave (changed).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0030"
down_revision: str | Sequence[str] | None = "0029"
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

LIVE_HEARTBEAT = r"""CREATE OR REPLACE FUNCTION birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
    -- The TTL is the server's to bound: a holder that stops beating stops counting within
    -- seconds, whatever it asked for.
    v_ttl double precision := least(greatest(coalesce(p_ttl_s, 5), 1), 15);
    v_previous timestamptz;
    v_until timestamptz;
BEGIN
    -- Announce (or renew) p_holder's live session of p_agent_id's p_session until now plus
    -- the TTL; when it is due. An agent's login announces its own agent's sessions only.
    -- A row belongs to the login that announced it (session_user): another login's holder
    -- is neither renewed nor taken over (refused) until its row is gone.
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent announces live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(length(p_agent_id), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_session), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_holder), 0) NOT BETWEEN 1 AND 256
       OR strpos(p_agent_id, E'\x1f') > 0 THEN
        RAISE EXCEPTION 'a live session needs an agent id, a session id and a holder of 1 to 256 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_until := now() + make_interval(secs => v_ttl);
    SELECT l.seen_at INTO v_previous
    FROM birddog.live_sessions l
    WHERE l.queue_key = v_key AND l.holder = p_holder AND l.expires_at > now()
      AND l.login = session_user
    FOR UPDATE;
    INSERT INTO birddog.live_sessions AS l (holder, agent_id, session, login, started_at, seen_at, expires_at)
    VALUES (p_holder, p_agent_id, p_session, session_user, now(), now(), v_until)
    ON CONFLICT (queue_key, holder) DO UPDATE
    SET seen_at = now(), expires_at = excluded.expires_at,
        -- A row whose TTL had passed is a new live session.
        started_at = CASE WHEN v_previous IS NULL THEN now() ELSE l.started_at END
    WHERE l.login = session_user;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'another login holds this live session'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    -- Rows whose holder is gone for a while (its process died without leaving).
    DELETE FROM birddog.live_sessions l WHERE l.expires_at < now() - interval '1 minute';
    -- A worker waits for a notification (or its backstop): tell it of the jobs of this
    -- queue whose grace ended since the previous beat, so it comes back when the grace ends.
    IF v_previous IS NOT NULL AND EXISTS (
        SELECT 1 FROM birddog.jobs j
        LEFT JOIN birddog.routes r ON r.agent_id = p_agent_id
        WHERE j.state = 'queued' AND j.queue_key = v_key
          AND j.created_at + make_interval(secs => coalesce(r.live_grace_s, 30))
              BETWEEN v_previous AND now()
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN v_until;
END
$function$
"""
"""``birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)`` as this revision installs it."""

PREVIOUS_LIVE_HEARTBEAT = r"""CREATE OR REPLACE FUNCTION birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
    -- The TTL is the server's to bound: a holder that stops beating stops counting within
    -- seconds, whatever it asked for.
    v_ttl double precision := least(greatest(coalesce(p_ttl_s, 5), 1), 15);
    v_previous timestamptz;
    v_until timestamptz;
BEGIN
    -- Announce (or renew) p_holder's live session of p_agent_id's p_session until now plus
    -- the TTL; when it is due. An agent's login announces its own agent's sessions only.
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent announces live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF coalesce(length(p_agent_id), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_session), 0) NOT BETWEEN 1 AND 256
       OR coalesce(length(p_holder), 0) NOT BETWEEN 1 AND 256
       OR strpos(p_agent_id, E'\x1f') > 0 THEN
        RAISE EXCEPTION 'a live session needs an agent id, a session id and a holder of 1 to 256 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_until := now() + make_interval(secs => v_ttl);
    SELECT l.seen_at INTO v_previous
    FROM birddog.live_sessions l
    WHERE l.queue_key = v_key AND l.holder = p_holder AND l.expires_at > now()
    FOR UPDATE;
    INSERT INTO birddog.live_sessions AS l (holder, agent_id, session, started_at, seen_at, expires_at)
    VALUES (p_holder, p_agent_id, p_session, now(), now(), v_until)
    ON CONFLICT (queue_key, holder) DO UPDATE
    SET seen_at = now(), expires_at = excluded.expires_at,
        -- A row whose TTL had passed is a new live session.
        started_at = CASE WHEN v_previous IS NULL THEN now() ELSE l.started_at END;
    -- Rows whose holder is gone for a while (its process died without leaving).
    DELETE FROM birddog.live_sessions l WHERE l.expires_at < now() - interval '1 minute';
    -- A worker waits for a notification (or its backstop): tell it of the jobs of this
    -- queue whose grace ended since the previous beat, so it comes back when the grace ends.
    IF v_previous IS NOT NULL AND EXISTS (
        SELECT 1 FROM birddog.jobs j
        LEFT JOIN birddog.routes r ON r.agent_id = p_agent_id
        WHERE j.state = 'queued' AND j.queue_key = v_key
          AND j.created_at + make_interval(secs => coalesce(r.live_grace_s, 30))
              BETWEEN v_previous AND now()
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN v_until;
END
$function$
"""
"""``birddog.live_heartbeat(p_agent_id text, p_session text, p_holder text, p_ttl_s double precision)`` as revision 0028 left it, as the downgrade restores it."""

LIVE_LEAVE = r"""CREATE OR REPLACE FUNCTION birddog.live_leave(p_agent_id text, p_session text, p_holder text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
BEGIN
    -- End p_holder's live session of p_agent_id's p_session (a clean exit); whether it had
    -- one. Its queued jobs are announced on birddog_jobs, so a worker takes them now
    -- rather than at its next look. An agent's login ends its own agent's sessions only;
    -- every login ends only the live sessions it announced (session_user).
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent ends live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    DELETE FROM birddog.live_sessions l
    WHERE l.queue_key = v_key AND l.holder = p_holder AND l.login = session_user;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM birddog.jobs j WHERE j.state = 'queued' AND j.queue_key = v_key
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN true;
END
$function$
"""
"""``birddog.live_leave(p_agent_id text, p_session text, p_holder text)`` as this revision installs it."""

PREVIOUS_LIVE_LEAVE = r"""CREATE OR REPLACE FUNCTION birddog.live_leave(p_agent_id text, p_session text, p_holder text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'birddog', 'pg_temp'
AS $function$
DECLARE
    v_agent text := birddog._caller_agent();
    v_key text := p_agent_id || E'\x1f' || p_session;
BEGIN
    -- End p_holder's live session of p_agent_id's p_session (a clean exit); whether it had
    -- one. Its queued jobs are announced on birddog_jobs, so a worker takes them now
    -- rather than at its next look. An agent's login ends its own agent's sessions only.
    IF v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_agent_id THEN
        RAISE EXCEPTION 'an agent ends live sessions of its own only'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    DELETE FROM birddog.live_sessions l WHERE l.queue_key = v_key AND l.holder = p_holder;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (
        SELECT 1 FROM birddog.jobs j WHERE j.state = 'queued' AND j.queue_key = v_key
    ) THEN
        PERFORM pg_notify('birddog_jobs', p_session);
    END IF;
    RETURN true;
END
$function$
"""
"""``birddog.live_leave(p_agent_id text, p_session text, p_holder text)`` as revision 0028 left it, as the downgrade restores it."""


def upgrade() -> None:
    # Each process row belongs to the login that registered it (rows already there: the
    # migrating login's); daemons_beat and daemons_stop touch only the caller's own.
    op.execute("ALTER TABLE birddog.daemons ADD COLUMN login text NOT NULL DEFAULT session_user")
    # A live session belongs to the login that announced it (live_heartbeat, live_leave).
    op.execute(
        "ALTER TABLE birddog.live_sessions ADD COLUMN login text NOT NULL DEFAULT session_user"
    )
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
    op.execute(LIVE_HEARTBEAT)
    op.execute(LIVE_LEAVE)


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
    op.execute(PREVIOUS_LIVE_HEARTBEAT)
    op.execute(PREVIOUS_LIVE_LEAVE)
    op.execute("ALTER TABLE birddog.daemons DROP COLUMN login")
    op.execute("ALTER TABLE birddog.live_sessions DROP COLUMN login")
