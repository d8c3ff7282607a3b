"""Least privilege: one PostgreSQL role per kind of process (``birddog migrate --roles``).

Seven group roles (``NOLOGIN``); each process connects as a login that is a member of one:

==================  ====================================================================
``birddog_owner``   owns the ``birddog`` schema and everything in it: migrations (DDL).
``birddog_daemon``  ``birddog run`` and the operator's commands (``route``, ``replay``,
                    ``prune``, ``probe``, ``secrets rekey``, ``jobs cancel``, the
                    console): every row of every table, no DDL.
``birddog_worker``  ``birddog worker``: claims and settles jobs, writes the replies they
                    owe and the wake, and its own row in ``daemons``, through the
                    functions; reads jobs but never a claim token; nothing at all on
                    ``routes`` or ``mailbox``.
``birddog_sender``  ``birddog send``/``ask``/``inbox`` and the library's enqueue: inserts
                    and reads jobs, reads and acknowledges its mailbox, and sees which
                    agents have a route (``agent_id``, ``kind``, ``enabled`` only); may
                    add a mailbox route (no URL, no secret) for an asker without one,
                    and a reply address to the unsettled mail it sent (A2A push).
``birddog_a2a``     ``birddog a2a``: what a sender may (send, the jobs its login sent, which
                    agents have a route), and through functions the routes of its callers'
                    push configs (``a2a_push_route``, ``a2a_push_route_add``: kind ``a2a``
                    only) and its callers' cancels (``a2a_cancel``: their own mail only);
                    no mailbox, no outbox, no other route's URL or secret.
``birddog_reader``  ``status``, ``check``, ``pending``, ``dead``: the ``pending`` and
                    ``dead_letters`` views and row metadata; no content, no URL, no secret.
``birddog_agent``   one agent's own login (``birddog agent add AGENT --login``): its own
                    mailbox and the jobs it sent or serves, nothing else; it enqueues mail
                    from itself, claims and settles its own jobs, acknowledges its mailbox.
==================  ====================================================================

Secrets stay with the daemon: column privileges keep ``routes.secret`` and
``routes.previous_secret`` (and URLs) from the worker, the sender, the A2A server and the
reader, and ``jobs.claim_token`` from every role but the daemon's: a claim token is known
only to the claimer ``birddog.claim`` handed it to.

Writes go through the rules: the worker, the sender, the A2A server and agents have no
``INSERT``, ``UPDATE`` or ``DELETE`` on any table (``daemons`` included: a process's row
belongs to its login, ``daemons_beat`` and ``daemons_stop``); they
call the ``SECURITY DEFINER`` functions of migration 0007. Mailboxes and jobs are private:
``roles_grant`` turns on row-level security on ``mailbox`` and ``jobs``, with one policy
for the operators (every row) and one for senders and agents
(``birddog.mailbox_visible``, ``birddog.job_visible``, migration 0008).

:func:`install_roles` creates the roles that are missing, gives the schema to
``birddog_owner`` and sets every role's privileges; it is idempotent. Later migrations
run as ``birddog_owner`` (``migrations/env.py`` switches to it) and :func:`refresh_grants`
applies the privileges again, so a new table is covered at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

import asyncpg

from birddog.postgres.sql import queries

MIGRATION_LOCK_ID: Final = 0x42_69_72_64_44_6F_67
"""The advisory lock migrations hold; grants take it too (see ``birddog.postgres``)."""

OWNER: Final = "birddog_owner"

ROLE_TRIES: Final = 5
"""How often a role transaction is tried when PostgreSQL breaks a deadlock with it.

Giving a table to ``birddog_owner`` takes its ``ACCESS EXCLUSIVE`` lock one table after
another, so a daemon or worker reading two of them in one transaction meanwhile can
deadlock with it; PostgreSQL then aborts one side, and the transaction runs again.
"""

ROLES: Final = {
    "owner": OWNER,
    "daemon": "birddog_daemon",
    "worker": "birddog_worker",
    "sender": "birddog_sender",
    "reader": "birddog_reader",
    "agent": "birddog_agent",
    "a2a": "birddog_a2a",
}
"""The group roles by the kind of process that uses them."""

__all__ = ["OWNER", "ROLES", "install_roles", "refresh_grants"]


async def install_roles(conn: Any) -> None:
    """Create the roles, give the schema to the owner role and grant each its privileges.

    Run it as a login that may create roles (only while some are missing) and that owns
    the schema or is a superuser, for example the database's owner; it is idempotent.

    Args:
        conn: an asyncpg connection to the migrated database.

    Raises:
        asyncpg.InsufficientPrivilegeError: this login may not create roles or change
            the schema's owner.
    """

    async def install() -> None:
        async with conn.transaction():
            await conn.execute(queries["roles_lock"], MIGRATION_LOCK_ID)
            await conn.execute(queries["roles_create"])
            await conn.execute(queries["roles_own"])
            await conn.execute(queries["roles_act_as_owner"])
            await conn.execute(queries["roles_grant"])

    await _past_deadlocks(install)


async def refresh_grants(conn: Any) -> bool:
    """Set the roles' privileges again when they are installed (after a migration).

    Args:
        conn: an asyncpg connection to the migrated database.

    Returns:
        Whether the roles are installed (False: nothing to do).
    """
    state = await conn.fetchrow(queries["roles_installed"])
    if not state["installed"]:
        return False

    async def refresh() -> None:
        async with conn.transaction():
            await conn.execute(queries["roles_lock"], MIGRATION_LOCK_ID)
            if state["member"]:
                await conn.execute(queries["roles_act_as_owner"])
            await conn.execute(queries["roles_grant"])

    await _past_deadlocks(refresh)
    return True


async def _past_deadlocks(transaction: Callable[[], Awaitable[None]]) -> None:
    """Run one role transaction, again when PostgreSQL chose it to break a deadlock."""
    for attempt in range(1, ROLE_TRIES + 1):
        try:
            await transaction()
        except asyncpg.DeadlockDetectedError:
            if attempt == ROLE_TRIES:
                raise
            await asyncio.sleep(0.05 * attempt)
        else:
            return
