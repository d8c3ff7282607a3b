"""The spool from the command line: send and ask while the database is away, status, check.

Every command reaches the test database through a proxy the test cuts and restores, so
"away" is a refused connection, as when the server or the network is gone. The commands'
spool is the test database's own (``tests.support.cli.spool_path_for``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from birddog import open_sender
from birddog.clock import SystemClock
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from birddog.service.forwarding import ForwardReport
from birddog.sqlite import SqliteSpool
from tests.support import eventually
from tests.support.cli import BIRDDOG, ROOT, Daemon, cli, cli_env, spool_path_for
from tests.support.mcp import call, json_errlog, stdio_mcp
from tests.support.proxy import DatabaseProxy, proxied


def mail(index: int) -> list[str]:
    """``birddog send`` arguments for mail ``mail-<index>`` from alice to bob."""
    return [
        "send", "--allow-unknown", "--job-id", f"job-{index}", "--to", "bob:s-bob", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", f"mail-{index}", "--command-id", f"cmd-{index}",
    ]  # fmt: skip


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[DatabaseProxy]:
    """The test database behind a proxy that is up, its spool removed at the end."""
    async with proxied(database_url) as proxy:
        yield proxy


async def jobs_of(pool: Pool) -> list[str]:
    """Job ids in claim order."""
    rows = await pool.fetch("SELECT job_id FROM birddog.jobs ORDER BY created_at, job_id")
    return [row["job_id"] for row in rows]


def integrity(path: Path) -> str:
    """PRAGMA integrity_check of a spool file, on the test's own connection."""
    db = sqlite3.connect(path)
    try:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        db.close()


def link_of(fd: Path) -> str:
    """Where an open descriptor of another process points ("" if it closed meanwhile)."""
    try:
        return os.readlink(fd)
    except FileNotFoundError:
        return ""


async def spool_status(dsn: str, **env: str) -> dict[str, Any]:
    """``birddog spool status --json``."""
    done = await cli(dsn, "spool", "status", "--json", variables=env)
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


async def test_send_while_away_says_spooled_and_forward_sends_it_once(
    proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """Send exits 0 saying spooled; status counts it; forward sends it once; check is green."""
    await proxy.down()
    sent = await cli(proxy.dsn, *mail(1), "--content", "while away")
    assert (sent.returncode, sent.stdout.strip()) == (0, "spooled (database unreachable): job-1")
    assert "Traceback" not in sent.stderr
    status = await spool_status(proxy.dsn)
    assert (status["mails"], status["quarantined"]) == (1, 0)
    assert status["bytes"] > len("while away")
    assert status["oldest_age_s"] is not None
    away = await cli(proxy.dsn, "check")
    assert away.returncode == 1
    assert away.stdout.startswith("database unreachable: ")
    await proxy.up()
    waiting = await cli(proxy.dsn, "check")
    assert waiting.returncode == 1
    assert "1 spooled mails wait in" in waiting.stdout
    forwarded = await cli(proxy.dsn, "spool", "forward")
    assert (forwarded.returncode, forwarded.stdout.strip()) == (0, "forwarded 1 mail"), (
        forwarded.stderr
    )
    assert await jobs_of(pg_pool) == ["job-1"]
    again = await cli(proxy.dsn, *mail(1), "--content", "while away")
    assert again.stdout.startswith("already sent: job-1")
    green = await cli(proxy.dsn, "check")
    assert (green.returncode, green.stdout.strip()) == (0, "ok"), green.stdout
    assert (await spool_status(proxy.dsn))["mails"] == 0


async def test_check_names_old_and_quarantined_spooled_mail(proxy: DatabaseProxy) -> None:
    """Mail older than --spool-s and quarantined mail are each a problem line of check."""
    await proxy.down()
    assert (await cli(proxy.dsn, *mail(1), "--content", "one")).returncode == 0
    path = spool_path_for(proxy.dsn)
    db = sqlite3.connect(path)
    try:  # an hour old, as if spooled then
        db.execute("UPDATE mail SET spooled_at_ms = spooled_at_ms - 3600000")
        db.commit()
    finally:
        db.close()
    old = await cli(proxy.dsn, "check", "--spool-s", "10m", "--json")
    checks = {problem["check"] for problem in json.loads(old.stdout)["problems"]}
    assert checks == {"database", "spool_old"}
    aged = await cli(proxy.dsn, "spool", "forward", BIRDDOG_SPOOL_MAX_AGE_S="30m")
    assert aged.returncode == 1
    assert "BIRDDOG_SPOOL_MAX_AGE_S" in aged.stderr
    await proxy.up()
    quarantined = await cli(proxy.dsn, "check")
    assert quarantined.returncode == 1
    assert "1 mails quarantined in" in quarantined.stdout
    shown = await cli(proxy.dsn, "spool", "status")
    assert "1 mail quarantined" in shown.stdout
    assert "mail-1: spooled longer than BIRDDOG_SPOOL_MAX_AGE_S" in shown.stdout


async def test_an_ask_whose_database_stays_away_exits_2_naming_the_key(
    proxy: DatabaseProxy,
) -> None:
    """Ask spools the question, waits its timeout, and exits 2 naming the key."""
    await proxy.down()
    asked = await cli(
        proxy.dsn, "ask", "--to", "bob:s-bob", "--from", "me:s-me", "--key", "q-1",
        "--timeout", "2", "anyone there?",
    )  # fmt: skip
    assert asked.returncode == 2, asked.stderr
    assert "spooled (database unreachable): q-1" in asked.stderr
    assert "no reply to 'q-1' within 2 s: the mail is still in the local spool" in asked.stderr
    assert asked.stdout == ""
    assert (await spool_status(proxy.dsn))["mails"] == 1


async def test_a_full_spool_refuses_with_exit_1_and_stays_intact(proxy: DatabaseProxy) -> None:
    """Past BIRDDOG_SPOOL_MAX_BYTES send exits 1 'spool full: N mails, oldest ...'; file intact."""
    await proxy.down()
    small = {"BIRDDOG_SPOOL_MAX_BYTES": "8192"}
    for index in range(2):
        done = await cli(proxy.dsn, *mail(index), "--content", "x" * 3000, variables=small)
        assert done.returncode == 0, done.stderr
    full = await cli(proxy.dsn, *mail(2), "--content", "x" * 3000, variables=small)
    assert full.returncode == 1
    assert full.stdout == ""
    [line] = full.stderr.strip().splitlines()
    assert line.startswith("Error: spool full: 2 mails, oldest spooled ")
    path = spool_path_for(proxy.dsn)
    assert integrity(path) == "ok"
    assert (await spool_status(proxy.dsn))["mails"] == 2


@pytest.fixture
def tiny_disk() -> Iterator[Path]:
    """A 256 KiB tmpfs of the test's own (root only), unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="birddog-tiny-"))
    mounted = subprocess.run(  # noqa: S603 - fixed arguments, a directory of our own
        ["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", str(where)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)  # noqa: S603, S607
        where.rmdir()


async def test_a_full_disk_is_a_clear_refusal_and_the_spool_stays_intact(
    proxy: DatabaseProxy, tiny_disk: Path
) -> None:
    """On a full 256 KiB disk send exits 1 naming the full disk; what was spooled stays sound."""
    await proxy.down()
    spool = tiny_disk / "spool.db"
    env = {"BIRDDOG_SPOOL_PATH": str(spool)}
    accepted = 0
    for index in range(40):
        done = await cli(proxy.dsn, *mail(index), "--content", "y" * 16000, variables=env)
        if done.returncode != 0:
            break
        assert done.stdout.startswith("spooled"), done.stderr
        accepted += 1
    assert 0 < accepted < 40
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("Error: spool full")
    assert f"the disk holding {spool} is full" in line
    assert "Traceback" not in done.stderr
    assert integrity(spool) == "ok"
    status = await spool_status(proxy.dsn, **env)
    assert status["mails"] == accepted


async def test_spooled_is_printed_only_after_the_spool_commit_returned(
    proxy: DatabaseProxy,
) -> None:
    """While the test holds the spool's write lock, send prints nothing; on release, 'spooled'."""
    await proxy.down()
    assert (await cli(proxy.dsn, *mail(0), "--content", "make the file")).returncode == 0
    path = spool_path_for(proxy.dsn)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        proc = subprocess.Popen(  # noqa: S603, ASYNC220 - our own console script, polled below
            [BIRDDOG, *mail(1), "--content", "blocked"],
            env=cli_env(proxy.dsn),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

        def opened_the_spool() -> bool:
            fds = Path(f"/proc/{proc.pid}/fd")
            return any(str(path) in target for target in map(link_of, fds.iterdir()))

        await eventually(opened_the_spool, "send to open the spool file", within_s=60)
        with pytest.raises(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.communicate, timeout=1.0)
        assert proc.poll() is None  # still waiting for the lock, nothing said
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    out, err = await asyncio.to_thread(proc.communicate, timeout=60)
    assert (proc.returncode, out.strip()) == (0, "spooled (database unreachable): job-1"), err
    assert (await spool_status(proxy.dsn))["mails"] == 2


async def test_a_daemon_forwards_the_spool_when_the_database_is_back(
    proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """Mail spooled while away is forwarded, in order, by a daemon on this host once it starts."""
    await proxy.down()
    for index in range(3):
        assert (await cli(proxy.dsn, *mail(index), "--content", f"{index}")).returncode == 0
    await proxy.up()
    daemon = Daemon(proxy.dsn, BIRDDOG_SPOOL_FORWARD_S="0.2")
    try:
        await eventually(
            lambda: jobs_of(pg_pool),
            "the spooled jobs in the database",
            until=lambda ids: len(ids) == 3,
            within_s=60,
        )
        assert await jobs_of(pg_pool) == ["job-0", "job-1", "job-2"]
        assert (await spool_status(proxy.dsn))["mails"] == 0
    finally:
        daemon.kill()


async def test_a_running_daemon_forwards_as_soon_as_its_database_is_back(
    proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """Mail spooled while the daemon's database was away goes in on its reconnect, not a period later."""
    daemon = Daemon(proxy.dsn, BIRDDOG_SPOOL_FORWARD_S="3600")
    try:
        await eventually(
            lambda: pg_pool.fetchval("SELECT count(*) FROM birddog.daemons"),
            "the daemon's row",
            until=lambda count: count == 1,
            within_s=60,
        )
        await proxy.down()
        await eventually(
            daemon.log,
            "the daemon to find its database away",
            until=lambda text: (
                "wake_listener_connect_failed" in text or '"database_unavailable"' in text
            ),
            within_s=30,
        )
        for index in range(3):
            sent = await cli(proxy.dsn, *mail(index), "--content", f"{index}")
            assert sent.stdout.startswith("spooled (database unreachable)"), sent.stderr
        await proxy.up()
        back = time.monotonic()
        await eventually(
            lambda: jobs_of(pg_pool),
            "the spooled jobs in the database",
            until=lambda ids: len(ids) == 3,
            within_s=30,
        )
        took_s = time.monotonic() - back
        assert await jobs_of(pg_pool) == ["job-0", "job-1", "job-2"]
        assert (await spool_status(proxy.dsn))["mails"] == 0
        # The period is an hour: only the reconnect explains it (the daemon retries its
        # database, and its listener reconnects, at most 5 s apart).
        assert took_s < 15, f"forwarded {took_s:.1f} s after the database came back"
    finally:
        daemon.kill()


@pytest.fixture
def errlog() -> Iterator[Any]:
    """Where the MCP server's stderr goes (every line must be JSON)."""
    with json_errlog() as log:
        yield log


async def test_the_mcp_server_starts_away_spools_and_forwards_when_back(
    proxy: DatabaseProxy, pg_pool: Pool, errlog: Any
) -> None:
    """Started with the database away, send says spooled, ask pending; once back both arrive.

    The forward period is an hour: the server forwards when its listening connection is
    open again.
    """
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("bob", kind="mailbox")
    await proxy.down()
    async with stdio_mcp(
        proxy.dsn, "alice:s-alice", errlog, BIRDDOG_SPOOL_FORWARD_S="3600"
    ) as session:
        sent, text, error = await call(session, "send", to="bob:s-bob", content="hi", key="m-1")
        assert not error, text
        assert sent["status"] == "spooled"
        assert text.startswith("spooled (database unreachable): m-1")
        asked, text, error = await call(
            session, "ask", to="bob:s-bob", content="and?", key="m-2", wait_s=1
        )
        assert not error, text
        assert (asked["status"], asked["key"]) == ("pending", "m-2")
        assert asked["state"] == "spooled"
        assert asked["message"].startswith("spooled (database unreachable): the question m-2")
        await proxy.up()
        await eventually(
            lambda: pg_pool.fetchval("SELECT count(*) FROM birddog.jobs"),
            "both spooled mails in the database",
            until=lambda count: count == 2,
            within_s=60,
        )
    keys = await pg_pool.fetch("SELECT payload->'mail'->>'key' AS key FROM birddog.jobs")
    assert sorted(row["key"] for row in keys) == ["m-1", "m-2"]


async def test_spooled_mail_is_forwarded_only_under_the_login_that_spooled_it(
    logins: dict[str, str], pg_pool: Pool, tmp_path: Path
) -> None:
    """Spooled under the sender's login: the daemon's and worker's leave it, the sender's sends it."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("bob", kind="mailbox")
    path = tmp_path / "spool.db"

    async def forward_as(kind: str, *, put: bool = False) -> ForwardReport | None:
        dsn = logins[kind]
        pool = await create_pool(dsn, min_size=0, max_size=2)
        try:
            async with open_sender(
                pool, None, spool_path=path, forward_every_s=0, database_url=dsn
            ) as sender:
                if put:
                    assert sender.spool is not None
                    await sender.spool.put(
                        sender.outgoing(to="bob:s-bob", from_="alice:s-alice", content="hi")
                    )
                    return None
                return await sender.forward()
        finally:
            await pool.close()

    await forward_as("sender", put=True)
    for other in ("daemon", "worker"):
        left = await forward_as(other)
        assert left is not None
        assert (left.forwarded, left.quarantined, left.kept) == ([], {}, False), other
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 0
    forwarded = await forward_as("sender")
    assert forwarded is not None
    assert len(forwarded.forwarded) == 1
    assert forwarded.complete
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 1


async def test_mail_recorded_for_another_server_behind_the_same_dsn_stays(
    database_url: str, pg_pool: Pool, tmp_path: Path
) -> None:
    """A row stamped with another server's identity is left, even under the same DSN text."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("bob", kind="mailbox")
    pool = await create_pool(database_url, min_size=0, max_size=2)
    try:
        async with open_sender(
            pool, None, spool_path=tmp_path / "spool.db", forward_every_s=0,
            database_url=database_url,
        ) as sender:  # fmt: skip
            spool = sender.spool
            assert isinstance(spool, SqliteSpool)
            first = sender.outgoing(to="bob:s-bob", from_="alice:s-alice", content="old server")
            await spool.put(first)  # the file exists: a server can be noted for its key
            await spool.note_server("6789012345678901234/1")  # what it was found on then
            await spool.put(sender.outgoing(to="bob:s-bob", from_="me:s-me", content="then"))
            report = await sender.forward()
            assert report.forwarded == [first.mail.key]  # recorded no server: its DSN rules
            status = await spool.status()
            assert status.mails == 1
            [(name, count, _)] = status.elsewhere
            assert count == 1
            assert name.startswith('database "')
    finally:
        await pool.close()
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 1


async def test_a_spool_of_an_older_birddog_keeps_its_mail_for_adopt(
    proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """A version 1 spool's rows record no database: listed, left, then sent by --adopt."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("bob", kind="mailbox")
    await proxy.down()
    assert (await cli(proxy.dsn, *mail(1), "--content", "old")).returncode == 0
    path = spool_path_for(proxy.dsn)
    db = sqlite3.connect(path)
    try:  # as version 1 wrote it: no destination in the row or its body
        [body] = db.execute("SELECT body FROM mail").fetchone()
        old = json.loads(body)
        del old["destination"]
        db.execute("DROP INDEX mail_destination")
        db.execute("ALTER TABLE mail DROP COLUMN destination")
        db.execute("ALTER TABLE mail DROP COLUMN server")
        db.execute("UPDATE mail SET body = ?", (json.dumps(old),))
        db.execute("PRAGMA user_version = 1")
        db.commit()
    finally:
        db.close()
    await proxy.up()
    left = await cli(proxy.dsn, "spool", "forward")
    assert left.stdout.strip() == "forwarded 0 mails", left
    assert "no database recorded (spooled by an older BirdDog)" in left.stderr
    status = await spool_status(proxy.dsn)
    assert [e["mails"] for e in status["elsewhere"]] == [1]
    adopted = await cli(proxy.dsn, "spool", "forward", "--adopt")
    assert adopted.stdout.strip() == "forwarded 1 mail", adopted
    assert await jobs_of(pg_pool) == ["job-1"]


async def test_ask_with_no_wait_says_spooled_only_when_the_database_is_away(
    proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """`ask --timeout 0` with the database up never says spooled (ten tries); away, it does."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("bob", kind="mailbox")
    for attempt in range(10):
        asked = await cli(
            proxy.dsn, "ask", "--to", "bob:s-bob", "--from", "me:s-me", "--timeout", "0",
            f"up {attempt}",
        )  # fmt: skip
        assert asked.returncode == 2, asked.stderr
        assert "spooled" not in asked.stderr, f"try {attempt}: {asked.stderr}"
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.jobs") == 10
    await proxy.down()
    away = await cli(
        proxy.dsn, "ask", "--to", "bob:s-bob", "--from", "me:s-me", "--timeout", "0", "away"
    )
    assert "spooled (database unreachable)" in away.stderr, away.stderr


async def test_mail_for_a_mistyped_database_never_reaches_another_and_is_listed_by_it(
    proxy: DatabaseProxy, pg_pool: Pool
) -> None:
    """Spooled for nobody@127.0.0.1:1/x, a daemon on the real database leaves it; listed."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("bob", kind="mailbox")
    shared = str(spool_path_for(proxy.dsn))  # one spool file for both, as in one checkout
    wrong = "postgresql://nobody@127.0.0.1:1/x"
    sent = await cli(
        wrong, "send", "--to", "bob:s-bob", "--from", "alice:s-alice", "--key", "typo-1",
        "--content", "for the wrong database", BIRDDOG_SPOOL_PATH=shared,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith("spooled (database unreachable): ")
    drained = await cli(proxy.dsn, "run", "--once")  # forwards this host's spool first
    assert drained.returncode == 0, drained.stderr
    forwarded = await cli(proxy.dsn, "spool", "forward")
    assert forwarded.returncode == 0, forwarded.stderr
    assert forwarded.stdout.strip() == "forwarded 0 mails"
    assert 'left 1 mail meant for database "x" on 127.0.0.1:1 as "nobody"' in forwarded.stderr
    assert await jobs_of(pg_pool) == []
    status = await spool_status(proxy.dsn)
    assert status["mails"] == 1
    assert [(e["destination"], e["mails"]) for e in status["elsewhere"]] == [
        ('database "x" on 127.0.0.1:1 as "nobody"', 1)
    ]
    shown = await cli(proxy.dsn, "spool", "status")
    assert 'database "x" on 127.0.0.1:1 as "nobody": 1 mail, since ' in shown.stdout
    checked = await cli(proxy.dsn, "check", "--json")
    assert checked.returncode == 1
    problems = {p["check"]: p["message"] for p in json.loads(checked.stdout)["problems"]}
    assert set(problems) == {"spool_elsewhere"}, problems
    assert 'database "x" on 127.0.0.1:1 as "nobody": 1' in problems["spool_elsewhere"]
    adopted = await cli(proxy.dsn, "spool", "forward", "--adopt")
    assert (adopted.returncode, adopted.stdout.strip()) == (0, "forwarded 1 mail"), adopted
    assert len(await jobs_of(pg_pool)) == 1
