"""Mailboxes and jobs private per agent: agent logins, and the rules that read them.

``birddog agent add AGENT --login`` makes a database login for one agent: a member of the
group role ``birddog_agent``, recorded in ``birddog.agent_logins`` (login -> agent id).
This revision gives the functions of revision 0007 their caller:

- ``birddog._caller_agent()``: the agent the session's login acts as (NULL for every
  other login: operators, workers, a shared sender's login, superusers, and everyone
  while the roles are not installed). An agent's login enqueues mail from itself only,
  claims, heartbeats and settles only jobs whose mail is addressed to it, and
  acknowledges only its own mailbox.
- ``birddog.mailbox_visible(agent_id, in_reply_to)``: an operator sees every row, an
  agent's login its own mailbox, a sender's login (no agent's) the replies to the mail it
  sent itself (``jobs.sent_by``).
- ``birddog.job_visible(sent_by, payload)``: the jobs a login sent, and for an agent's
  login the jobs whose mail is from or to its agent.

Row-level security itself (``ENABLE ROW LEVEL SECURITY`` and the policies, per role) is set
by ``birddog migrate --roles`` (``roles_grant``), with the roles it names; without the
roles every process is the owner and nothing changes. ``birddog.session_known`` tells
``ask`` whether a session exists without showing anyone's jobs;
``birddog.create_agent_login`` / ``drop_agent_login`` are run by the operator (they need
``CREATEROLE``: they run with the caller's rights).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "birddog"

POLICIES = {
    "mailbox": ("mailbox_operators", "mailbox_own"),
    "jobs": ("jobs_operators", "jobs_own"),
}
"""The policies ``roles_grant`` creates, by table (dropped here on downgrade)."""

CALLER_AGENT = """
CREATE OR REPLACE FUNCTION birddog._caller_agent() RETURNS text
LANGUAGE plpgsql STABLE
AS $fn$
BEGIN
    -- The agent the session's login acts as: its birddog.agent_logins row, for a member of
    -- birddog_agent ('' when it has none: it acts as nobody). NULL for every other login.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'birddog_agent') THEN
        RETURN NULL;
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN
        RETURN NULL;
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user, 'birddog_agent', 'MEMBER') THEN
        RETURN NULL;
    END IF;
    RETURN coalesce(
        (SELECT l.agent_id FROM birddog.agent_logins l WHERE l.login = session_user), ''
    );
END
$fn$"""

SEES_EVERYTHING = """
CREATE FUNCTION birddog._sees_everything() RETURNS boolean
LANGUAGE plpgsql STABLE
AS $fn$
BEGIN
    -- Operators see every row: superusers, the owner and daemon roles' members, and every
    -- login while the roles are not installed (then all of them act as the owner).
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'birddog_daemon') THEN
        RETURN true;
    END IF;
    IF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN
        RETURN true;
    END IF;
    RETURN pg_catalog.pg_has_role(session_user, 'birddog_owner', 'MEMBER')
        OR pg_catalog.pg_has_role(session_user, 'birddog_daemon', 'MEMBER');
END
$fn$"""

MAILBOX_VISIBLE = """
CREATE OR REPLACE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
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
$fn$"""

FUNCTIONS = {
    "job_visible(text,jsonb)": """
CREATE FUNCTION birddog.job_visible(p_sent_by text, p_payload jsonb) RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
DECLARE
    v_agent text;
BEGIN
    -- Whether the caller may read a job: the jobs its login sent, and for an agent's
    -- login the jobs whose mail is from or to its agent (the work it sent and serves).
    IF birddog._sees_everything() OR p_sent_by = session_user THEN
        RETURN true;
    END IF;
    v_agent := birddog._caller_agent();
    RETURN v_agent IS NOT NULL AND v_agent <> ''
       AND v_agent IN (p_payload #>> '{mail,from,agentId}', p_payload #>> '{mail,to,agentId}');
END
$fn$""",
    "session_known(text,text)": """
CREATE FUNCTION birddog.session_known(p_agent_id text, p_session_id text) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
    -- Whether an agent session can be asked (it has a route, or its session was sent work
    -- before, by anyone), without showing the caller anyone's jobs.
    SELECT EXISTS (SELECT 1 FROM birddog.routes r WHERE r.agent_id = p_agent_id)
        OR EXISTS (SELECT 1 FROM birddog.jobs j WHERE j.queue = p_session_id)
$fn$""",
    "ensure_mailbox(text)": """
CREATE FUNCTION birddog.ensure_mailbox(p_agent_id text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
BEGIN
    -- Give an agent without a route a mailbox route (no URL, no secret); whether one was
    -- added. Only an operator, or the agent's own login, may: for any other login nothing
    -- is added (a sender gets its own mailbox with the first mail it sends, through
    -- enqueue), so no login gives another agent a route.
    IF NOT (birddog._sees_everything() OR birddog._caller_agent() = p_agent_id) THEN
        RETURN false;
    END IF;
    INSERT INTO birddog.routes AS r (agent_id, kind, enabled)
    VALUES (p_agent_id, 'mailbox', true)
    ON CONFLICT (agent_id) DO NOTHING;
    RETURN FOUND;
END
$fn$""",
    "create_agent_login(text,text)": """
CREATE FUNCTION birddog.create_agent_login(p_agent_id text, p_password text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
DECLARE
    v_login text;
BEGIN
    -- A login for one agent, under the rules of birddog_agent; returns its name. Roles
    -- belong to the whole server, so the name holds a digest of the database's name and
    -- the agent id: two databases' agents never share one. Run with the caller's rights:
    -- an operator who may create roles.
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = 'birddog_agent') THEN
        RAISE EXCEPTION 'agent logins need the roles: run birddog migrate --roles first'
            USING ERRCODE = 'undefined_object';
    END IF;
    v_login := 'bd_agent_'
        || left(regexp_replace(lower(p_agent_id), '[^a-z0-9_]', '_', 'g'), 24) || '_'
        || left(encode(sha256(convert_to(current_database() || '/' || p_agent_id, 'UTF8')),
                       'hex'), 12);
    EXECUTE format('CREATE ROLE %I LOGIN PASSWORD %L IN ROLE birddog_agent', v_login, p_password);
    INSERT INTO birddog.agent_logins (login, agent_id) VALUES (v_login, p_agent_id);
    RETURN v_login;
END
$fn$""",
    "drop_agent_login(text)": """
CREATE FUNCTION birddog.drop_agent_login(p_agent_id text) RETURNS text
LANGUAGE plpgsql SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
DECLARE
    v_login text;
BEGIN
    -- End an agent's login: forgotten, and dropped (with the caller's rights). Returns it.
    DELETE FROM birddog.agent_logins l WHERE l.agent_id = p_agent_id RETURNING l.login INTO v_login;
    IF v_login IS NOT NULL THEN
        EXECUTE format('DROP ROLE IF EXISTS %I', v_login);
    END IF;
    RETURN v_login;
END
$fn$""",
}

PREVIOUS = {
    "_caller_agent()": """
CREATE OR REPLACE FUNCTION birddog._caller_agent() RETURNS text
LANGUAGE plpgsql STABLE
AS $fn$
BEGIN
    RETURN NULL;
END
$fn$""",
    "mailbox_visible(text,text)": """
CREATE OR REPLACE FUNCTION birddog.mailbox_visible(p_agent_id text, p_in_reply_to text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
BEGIN
    RETURN true;
END
$fn$""",
}
"""Revision 0007's hooks, as a downgrade puts them back."""


def upgrade() -> None:
    op.create_table(
        "agent_logins",
        sa.Column("login", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("isfinite(created_at)", name="agent_logins_times_finite_check"),
        sa.ForeignKeyConstraint(["agent_id"], [f"{SCHEMA}.agents.agent_id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("login"),
        sa.UniqueConstraint("agent_id", name="agent_logins_agent_id_key"),
        schema=SCHEMA,
    )
    op.execute(SEES_EVERYTHING)
    op.execute("REVOKE ALL ON FUNCTION birddog._sees_everything() FROM PUBLIC")
    op.execute(CALLER_AGENT)
    op.execute(MAILBOX_VISIBLE)
    for signature, body in FUNCTIONS.items():
        op.execute(body)
        op.execute(f"REVOKE ALL ON FUNCTION birddog.{signature} FROM PUBLIC")


def downgrade() -> None:
    for table, names in POLICIES.items():
        for name in names:
            op.execute(f"DROP POLICY IF EXISTS {name} ON {SCHEMA}.{table}")
        op.execute(f"ALTER TABLE {SCHEMA}.{table} DISABLE ROW LEVEL SECURITY")
    for signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION birddog.{signature}")
    for body in PREVIOUS.values():
        op.execute(body)
    op.execute("DROP FUNCTION birddog._sees_everything()")
    op.drop_table("agent_logins", schema=SCHEMA)
