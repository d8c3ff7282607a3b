"""A push config set or deleted later goes through the rules: ``birddog.a2a_reply_to_*``.

The A2A server (``birddog a2a``) adds a push config's reply address to the stored mail of
a job that has not settled, and takes it off again, for the agent its caller's token
names. Those were direct ``UPDATE``s of ``birddog.jobs``, so the process needed a role
that may rewrite any job. These ``SECURITY DEFINER`` functions are the only way now:

- ``birddog.a2a_reply_to_add(job_id, address, caller_agent)``: appends ``address`` (an
  agent address object, written as the core writes it) to the mail's ``replyTo``.
- ``birddog.a2a_reply_to_remove(job_id, address, caller_agent)``: removes it.

Each locks the job's row (the settlement takes the same lock, so an address is either in
before the replies are derived or refused as too late), changes ``{mail,replyTo}`` and
``updated_at`` and nothing else, and answers one word: ``added`` / ``removed``,
``present`` / ``absent`` (nothing to do), ``settled`` (too late: the replies are
written), ``missing`` (no such job, its mail carries no ``replyTo`` list, or this login
may not read it) or ``not_caller`` (the mail is not from ``caller_agent``, or an agent's
login names another agent). An address that is not an agent address object is refused
with SQLSTATE 22023 (``invalid_parameter_value``) before anything is read.

``EXECUTE`` is revoked from ``PUBLIC`` here and granted per role by ``migrate --roles``
(``roles_grant``): the daemon (which runs ``birddog a2a``) and the sender, whose login
reaches only the jobs it sent itself.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Both functions: the address, the row (locked), who may change it, whether it is too
# late, then one change of ``{mail,replyTo}`` and ``updated_at``. The <...> marks are what
# each fills in (``v_address`` is the address as the core writes it).
TEMPLATE = """
CREATE FUNCTION birddog.<name>(
    p_job_id text, p_address jsonb, p_caller_agent text, OUT result text
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, birddog, pg_temp
AS $fn$
DECLARE
    v_address jsonb;
    v_job birddog.jobs%ROWTYPE;
    v_agent text;
BEGIN
    -- <purpose>
    v_address := birddog._address(p_address);
    IF v_address IS NULL THEN
        RAISE EXCEPTION 'a reply address is an agent address object (kind, agentId, sessionId)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT j.* INTO v_job FROM birddog.jobs j WHERE j.job_id = p_job_id FOR UPDATE;
    IF NOT FOUND OR jsonb_typeof(v_job.payload #> '{mail,replyTo}') IS DISTINCT FROM 'array' THEN
        result := 'missing';
        RETURN;
    END IF;
    -- A job this login may not read is not there for it (its existence stays unknown).
    IF NOT birddog.job_visible(v_job.sent_by, v_job.payload) THEN
        result := 'missing';
        RETURN;
    END IF;
    -- The caller's token names p_caller_agent (the HTTP layer checked it): the mail must be
    -- from that agent, and an agent's login speaks for itself only.
    v_agent := birddog._caller_agent();
    IF p_caller_agent IS NULL
       OR (v_job.payload #>> '{mail,from,agentId}') IS DISTINCT FROM p_caller_agent
       OR (v_agent IS NOT NULL AND v_agent IS DISTINCT FROM p_caller_agent) THEN
        result := 'not_caller';
        RETURN;
    END IF;
    IF v_job.state = 'settled' THEN
        result := 'settled';
        RETURN;
    END IF;
    IF <nothing to do> THEN
        result := '<unchanged>';
        RETURN;
    END IF;
    UPDATE birddog.jobs j
    SET payload = jsonb_set(j.payload, '{mail,replyTo}', <new list>),
        updated_at = now()
    WHERE j.job_id = v_job.job_id;
    result := '<changed>';
END
$fn$"""

PRESENT = "(v_job.payload #> '{mail,replyTo}') @> jsonb_build_array(v_address)"

FUNCTIONS = {
    "a2a_reply_to_add(text,jsonb,text)": {
        "<name>": "a2a_reply_to_add",
        "<purpose>": "Add p_address to job p_job_id's mail's replyTo (a push config set later).",
        "<nothing to do>": PRESENT,
        "<unchanged>": "present",
        "<new list>": "(j.payload #> '{mail,replyTo}') || jsonb_build_array(v_address)",
        "<changed>": "added",
    },
    "a2a_reply_to_remove(text,jsonb,text)": {
        "<name>": "a2a_reply_to_remove",
        "<purpose>": "Take p_address off job p_job_id's mail's replyTo (a push config deleted).",
        "<nothing to do>": f"NOT ({PRESENT})",
        "<unchanged>": "absent",
        "<new list>": (
            "(SELECT coalesce(jsonb_agg(a.value ORDER BY a.n), '[]'::jsonb)\n"
            "        FROM jsonb_array_elements(j.payload #> '{mail,replyTo}')\n"
            "             WITH ORDINALITY AS a(value, n)\n"
            "        WHERE a.value <> v_address)"
        ),
        "<changed>": "removed",
    },
}


def _function(marks: dict[str, str]) -> str:
    """The ``CREATE FUNCTION`` of one of them: the template with its marks filled in."""
    body = TEMPLATE
    for mark, text in marks.items():
        body = body.replace(mark, text)
    return body


def upgrade() -> None:
    for signature, marks in FUNCTIONS.items():
        op.execute(_function(marks))
        op.execute(f"REVOKE ALL ON FUNCTION birddog.{signature} FROM PUBLIC")


def downgrade() -> None:
    for signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION birddog.{signature}")
