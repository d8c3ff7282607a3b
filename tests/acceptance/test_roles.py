"""Least privilege: each process runs under its own role, and is refused what it does not need."""

from __future__ import annotations

import asyncio
import re

import asyncpg

from birddog import Outcome
from birddog.postgres.roles import install_roles
from birddog.postgres.sql import queries
from tests.support.cli import cli
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness
from tests.support.waiting import eventually


async def refused(dsn: str, statement: str) -> bool:
    """Whether the database refuses ``statement`` to this login for lack of privilege."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    except asyncpg.InsufficientPrivilegeError:
        return True
    finally:
        await conn.close()
    return False


async def test_each_process_works_under_its_own_role(
    database_url: str, logins: dict[str, str], harness: Harness, inbox: TestInbox
) -> None:
    """Route (daemon), send (sender), worker (worker), run (daemon), status and pending (reader)."""

    async def as_(kind: str, *args: str) -> str:
        done = await cli(logins[kind], *args)
        assert done.returncode == 0, f"{kind}: {args}: {done.stderr}"
        return done.stdout

    added = await as_("daemon", "route", "add", "alice", inbox.url_for("alice"))
    from birddog.http.inbox import Inbox  # noqa: PLC0415

    inbox.secrets["alice"] = Inbox(added.split("signing secret: ")[1].strip())
    await as_(
        "sender", "send", "--allow-unknown", "--job-id", "job-1", "--to", "bob:s-bob", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", "mail-1", "--command-id", "cmd-1",
        "--content", "What is due?",
    )  # fmt: skip
    await as_("worker", "worker", "--handler", "tests.acceptance.handlers:echo", "--once")
    await as_("daemon", "run", "--once")
    [reply] = inbox.replies
    assert (reply.key, reply.reply.outcome) == ("outbox:mail-1:reply:0", Outcome.COMPLETED)
    await as_("reader", "status", "--json")
    await as_("reader", "pending", "--json")
    await as_("reader", "dead", "--json")
    await as_("reader", "check")
    # A later migration runs as a member of birddog_owner, without superuser rights.
    await as_("owner", "migrate")


async def test_what_each_role_is_refused(database_url: str, logins: dict[str, str]) -> None:
    """Worker and sender never read a secret; the reader no content; only the owner does DDL."""
    for kind in ("worker", "sender", "reader"):
        assert await refused(logins[kind], "SELECT secret FROM birddog.routes")
        assert await refused(logins[kind], "SELECT previous_secret FROM birddog.routes")
        assert await refused(logins[kind], "SELECT url FROM birddog.routes")
    assert await refused(logins["worker"], "SELECT agent_id FROM birddog.routes")
    assert await refused(logins["worker"], "SELECT key FROM birddog.mailbox")
    assert not await refused(logins["sender"], "SELECT agent_id, kind FROM birddog.routes")
    assert await refused(logins["sender"], "SELECT key FROM birddog.outbox")
    assert await refused(logins["sender"], "DELETE FROM birddog.jobs")
    assert await refused(logins["reader"], "SELECT reply FROM birddog.outbox")
    assert await refused(logins["reader"], "SELECT payload FROM birddog.jobs")
    assert await refused(logins["reader"], "SELECT reply FROM birddog.mailbox")
    assert not await refused(logins["reader"], "SELECT count(*) FROM birddog.pending")
    assert await refused(logins["reader"], "UPDATE birddog.outbox SET attempts = 0")
    for kind in ("daemon", "worker", "sender", "reader"):
        assert await refused(logins[kind], "CREATE TABLE birddog.intruder (x int)")
        assert await refused(logins[kind], "DROP TABLE birddog.outbox")
        assert await refused(logins[kind], "UPDATE birddog.alembic_version SET version_num = 'x'")
    assert not await refused(logins["daemon"], "SELECT secret FROM birddog.routes")
    assert not await refused(
        logins["owner"],
        "SET ROLE birddog_owner; CREATE TABLE birddog.owned (x int); DROP TABLE birddog.owned",
    )


async def test_migrate_roles_is_idempotent_and_the_owner_owns_everything(
    database_url: str, logins: dict[str, str]
) -> None:
    """Running migrate --roles again changes nothing; every object belongs to birddog_owner."""
    again = await cli(database_url, "migrate", "--roles")
    assert again.returncode == 0, again.stderr
    conn = await asyncpg.connect(database_url)
    try:
        owners = await conn.fetch(
            "SELECT c.relname, pg_get_userbyid(c.relowner) AS owner FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'birddog'"
        )
    finally:
        await conn.close()
    assert owners
    assert {row["owner"] for row in owners} == {"birddog_owner"}


async def test_every_definer_function_pins_its_path_and_is_granted_per_role(
    database_url: str, logins: dict[str, str]
) -> None:
    """Each SECURITY DEFINER function pins search_path, PUBLIC may not call it; A2A's are its role's."""
    conn = await asyncpg.connect(database_url)
    try:
        functions = await conn.fetch(
            "SELECT p.oid::regprocedure::text AS signature, p.proconfig, "
            "has_function_privilege('birddog_sender', p.oid, 'EXECUTE') AS sender, "
            "has_function_privilege('birddog_worker', p.oid, 'EXECUTE') AS worker, "
            "has_function_privilege('birddog_reader', p.oid, 'EXECUTE') AS reader, "
            "has_function_privilege('birddog_a2a', p.oid, 'EXECUTE') AS a2a, "
            "EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a "
            "        WHERE a.grantee = 0) AS public "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'birddog' AND p.prosecdef ORDER BY 1"
        )
    finally:
        await conn.close()
    shown = {row["signature"]: row for row in functions}
    assert {"birddog.a2a_reply_to_add(text,jsonb,text)"} <= set(shown)
    pinned = "search_path=pg_catalog, birddog, pg_temp"
    for signature, row in shown.items():
        # The path pinned; the only other setting a function may carry is its plan cache
        # mode (revision 0019, inside the write functions).
        assert row["proconfig"][0] == pinned, signature
        modes = {"plan_cache_mode=auto", "plan_cache_mode=force_generic_plan"}
        assert set(row["proconfig"][1:]) <= modes, signature
        assert not row["public"], signature
    for name in ("a2a_reply_to_add", "a2a_reply_to_remove"):
        row = shown[f"birddog.{name}(text,jsonb,text)"]
        assert (row["sender"], row["worker"], row["reader"], row["a2a"]) == (
            True,
            False,
            False,
            True,
        ), name
    # The A2A server's own: push configs' routes and its callers' cancels, nobody else's.
    for signature in (
        "birddog.a2a_push_route(text)",
        "birddog.a2a_push_route_add(text,text,text)",
        "birddog.a2a_cancel(text,text,text,integer,boolean)",
    ):
        row = shown[signature]
        assert (row["sender"], row["worker"], row["reader"], row["a2a"]) == (
            False,
            False,
            False,
            True,
        ), signature
    # Process rows: the worker's own (agents' logins too), through the functions only.
    for signature in ("birddog.daemons_beat(text,text,text,integer)", "birddog.daemons_stop(text)"):
        row = shown[signature]
        assert (row["sender"], row["worker"], row["reader"], row["a2a"]) == (
            False,
            True,
            False,
            False,
        ), signature


async def test_installing_the_roles_beside_a_busy_reader_survives_the_deadlock_it_meets(
    database_url: str, pg_conn: asyncpg.Connection
) -> None:
    """Giving the tables to the owner locks them one by one; a reader of two meets it.

    The reader holds one table the installer has yet to reach, then asks for one the
    installer already holds: a deadlock, which PostgreSQL breaks by aborting the side
    that waited first, the installer (its deadlock_timeout fires while both wait; the
    reader's would fire much later). The role transaction runs again and succeeds.
    """
    # The installer's own loop, to know which table it reaches last.
    loop = re.search(r"FOR item IN\s+(SELECT c\.relname.*?)\s+LOOP", queries["roles_own"], re.S)
    assert loop is not None
    last = [row["relname"] for row in await pg_conn.fetch(loop[1]) if row["kind"] == "TABLE"][-1]
    reader = await asyncpg.connect(database_url)
    installer = await asyncpg.connect(database_url)
    try:
        await reader.execute("SET deadlock_timeout = '20s'")
        await reader.execute("BEGIN")
        await reader.execute(f"SELECT 1 FROM birddog.{last} LIMIT 0")  # noqa: S608 - pg_class's
        await installer.execute("SET deadlock_timeout = '1s'")
        installer_pid = installer.get_server_pid()
        installing = asyncio.create_task(install_roles(installer))

        async def held_and_waiting() -> list[str]:
            return [
                row["relname"]
                for row in await pg_conn.fetch(
                    "SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                    " JOIN pg_namespace n ON n.oid = c.relnamespace"
                    " WHERE l.pid = $1 AND n.nspname = 'birddog' AND l.granted"
                    " AND l.mode = 'AccessExclusiveLock' AND c.relkind IN ('r', 'p')"
                    " AND EXISTS (SELECT 1 FROM pg_locks w WHERE w.pid = $1 AND NOT w.granted)",
                    installer_pid,
                )
            ]

        held = await eventually(held_and_waiting, "the installer holding a table and waiting")
        reader_outcome = "read"
        try:
            await reader.execute(f"SELECT 1 FROM birddog.{held[0]} LIMIT 0")  # noqa: S608
        except asyncpg.DeadlockDetectedError:
            reader_outcome = "aborted"
        await reader.execute("ROLLBACK")
        await asyncio.wait_for(installing, 30)
        owners = await pg_conn.fetch(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'birddog' AND pg_get_userbyid(c.relowner) <> 'birddog_owner'"
            " AND c.relkind IN ('r', 'p', 'v')"
        )
        assert owners == [], (reader_outcome, owners)
    finally:
        await reader.close()
        await installer.close()
