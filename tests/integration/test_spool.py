"""The local spool on a real SQLite file: durable settings, bounds, quarantine, one forwarder."""

from __future__ import annotations

import asyncio
import sqlite3
import stat
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    JobConflict,
    Mail,
    SpoolFull,
    StoreRefused,
    StoreUnreachable,
    UnknownAgent,
    agent_job,
)
from birddog.core.spool import Outgoing
from birddog.service.forwarding import SpoolForwarder
from birddog.sqlite import SqliteSpool
from birddog.sqlite.database import SpoolDatabase
from birddog.testing import FrozenClock
from tests.support import T0

SENDER = AgentAddress(agent_id="alice", session_id="s-alice")


def outgoing(index: int, *, session: str = "s-bob", content: str = "hello") -> Outgoing:
    """A send of mail ``m-<index>`` from alice to bob's ``session``."""
    mail = Mail(
        key=f"m-{index}",
        to=AgentAddress(agent_id="bob", session_id=session),
        from_=SENDER,
        reply_to=[SENDER],
        content=content,
        created_at=index,
    )
    work = AgentWork(job_id=f"j-{index}", session_id=session, command_fact_id=f"c-{index}")
    return Outgoing(job=agent_job(work, mail), checked=False)


class Database:
    """A writer standing in for the database: keeps each job id once, can be away or refuse."""

    def __init__(self) -> None:
        self.jobs: dict[str, Outgoing] = {}
        self.order: list[str] = []
        self.away = False
        self.refuse: dict[str, Exception] = {}

    async def write(self, mail: Outgoing) -> None:
        """Write one mail as the enqueue path would (a replay writes nothing)."""
        if self.away:
            raise StoreUnreachable("cannot reach the database: connection refused")
        if mail.mail.key in self.refuse:
            raise self.refuse[mail.mail.key]
        if mail.job.job_id not in self.jobs:
            self.jobs[mail.job.job_id] = mail
            self.order.append(mail.mail.key)


@pytest.fixture
def clock() -> FrozenClock:
    """A clock frozen at the tests' epoch."""
    return FrozenClock(T0)


@pytest.fixture
def spool(tmp_path: Path, clock: FrozenClock) -> SqliteSpool:
    """A spool in a directory of its own that does not exist yet."""
    return SqliteSpool(tmp_path / "state" / "spool.db", clock=clock)


def integrity(path: Path) -> str:
    """PRAGMA integrity_check of the spool file, from a connection of the test's own."""
    db = sqlite3.connect(path)
    try:
        [result] = db.execute("PRAGMA integrity_check").fetchone()
    finally:
        db.close()
    return str(result)


async def test_the_spool_runs_wal_with_synchronous_full_in_a_private_file(
    spool: SqliteSpool,
) -> None:
    """The spool's own connections run WAL with synchronous=FULL; file 0600, directory 0700."""
    assert not spool.exists()
    await spool.put(outgoing(1))
    assert await spool.pragmas() == {"journal_mode": "wal", "synchronous": 2}
    assert stat.S_IMODE(spool.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(spool.path.parent.stat().st_mode) == 0o700
    # A second look, from a connection of the test's own, sees the mode on the file.
    db = sqlite3.connect(spool.path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        db.close()


async def test_looking_at_a_spool_that_was_never_written_leaves_no_file(
    spool: SqliteSpool,
) -> None:
    """Status, waiting and a forward of a spool never written to are empty and make no file."""
    status = await spool.status()
    assert (status.mails, status.quarantined, status.bytes) == (0, 0, 0)
    assert await spool.waiting() == []
    report = await SpoolForwarder(spool, Database().write).forward()
    assert report.forwarded == []
    assert not spool.exists()


async def test_a_new_spool_opened_while_another_process_writes_waits_instead_of_failing(
    spool: SqliteSpool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turning a new file to WAL while another connection writes is SQLite's instant "locked".

    Senders started together on a new spool meet this (seen in the outage run): the open
    waits as the busy timeout would, and the mail is spooled once the other writer is done.
    """
    spool.path.parent.mkdir(mode=0o700)
    spool.path.touch(mode=0o600)
    other = sqlite3.connect(spool.path, isolation_level=None)
    other.execute(
        "BEGIN IMMEDIATE"
    )  # the other process's write, on the file still in rollback mode
    refused = threading.Event()
    prepare = SpoolDatabase._prepare

    def first_try(self: SpoolDatabase, db: sqlite3.Connection) -> None:
        try:
            prepare(self, db)
        except sqlite3.Error:
            refused.set()
            raise

    monkeypatch.setattr(SpoolDatabase, "_prepare", first_try)
    try:
        put = asyncio.ensure_future(spool.put(outgoing(1)))
        assert await asyncio.to_thread(refused.wait, 10), "the open was never refused"
        other.execute("COMMIT")
        await asyncio.wait_for(put, 10)
    finally:
        other.close()
    assert [row.key for row in await spool.waiting()] == ["m-1"]
    assert await spool.pragmas() == {"journal_mode": "wal", "synchronous": 2}


async def test_a_full_spool_refuses_new_mail_and_keeps_the_old_intact(
    tmp_path: Path, clock: FrozenClock
) -> None:
    """Past max_bytes a put raises 'spool full: N mails, oldest ...'; old mail stays, file sound."""
    spool = SqliteSpool(tmp_path / "spool.db", clock=clock, max_bytes=8 * 1024)
    kept = 0
    refused: SpoolFull | None = None
    for index in range(1000):
        try:
            await spool.put(outgoing(index, content="x" * 1500))
        except SpoolFull as exc:
            refused = exc
            break
        kept += 1
    assert refused is not None
    assert 0 < kept < 1000
    message = str(refused)
    assert message.startswith(f"spool full: {kept} mails, oldest spooled 2026-01-01 00:00:00Z")
    assert "nothing was written" in message
    status = await spool.status()
    assert status.mails == kept
    assert [row.key for row in await spool.waiting(limit=kept)] == [f"m-{i}" for i in range(kept)]
    assert integrity(spool.path) == "ok"


async def test_forwarding_keeps_spool_order_and_deletes_what_was_written(
    spool: SqliteSpool,
) -> None:
    """Rows go out in spool order, each once; a second forward finds nothing to do."""
    database = Database()
    for index in range(150):  # more than a page
        await spool.put(outgoing(index, session=f"s-{index % 3}"))
    assert (await spool.status()).bytes > 150 * len("hello")
    report = await SpoolForwarder(spool, database.write).forward()
    assert report.complete
    assert database.order == [f"m-{i}" for i in range(150)]
    status = await spool.status()
    assert (status.mails, status.bytes) == (0, 0)
    again = await SpoolForwarder(spool, database.write).forward()
    assert again.forwarded == []


async def test_a_crash_between_write_and_delete_is_a_replay(spool: SqliteSpool) -> None:
    """A forwarder that dies after a write but before its delete leaves a row the next replays."""
    database = Database()
    for index in range(5):
        await spool.put(outgoing(index))

    class Crash(Exception):
        pass

    async def write_then_die(mail: Outgoing) -> None:
        await database.write(mail)
        if mail.mail.key == "m-2":
            raise Crash

    with pytest.raises(Crash):
        await SpoolForwarder(spool, write_then_die).forward()
    assert [row.key for row in await spool.waiting()] == ["m-2", "m-3", "m-4"]
    await SpoolForwarder(spool, database.write).forward()
    assert database.order == ["m-0", "m-1", "m-2", "m-3", "m-4"]
    assert (await spool.status()).mails == 0


async def test_the_database_away_keeps_every_row_and_says_why(spool: SqliteSpool) -> None:
    """With the database away nothing moves; status shows the last forward error."""
    database = Database()
    database.away = True
    for index in range(3):
        await spool.put(outgoing(index))
    report = await SpoolForwarder(spool, database.write).forward()
    assert report.kept
    assert report.forwarded == []
    status = await spool.status()
    assert status.mails == 3
    assert status.last_error is not None
    assert "connection refused" in status.last_error
    database.away = False
    await SpoolForwarder(spool, database.write).forward()
    assert (await spool.status()).last_error is None
    assert database.order == ["m-0", "m-1", "m-2"]


async def test_refused_and_undecodable_rows_are_quarantined_without_blocking_others(
    spool: SqliteSpool,
) -> None:
    """A refused mail and a row that cannot be decoded move to quarantine with reasons; others go."""
    database = Database()
    database.refuse["m-1"] = JobConflict("job 'j-1' already exists with a different payload")
    database.refuse["m-3"] = StoreRefused("database refused send: CheckViolationError")
    database.refuse["m-4"] = UnknownAgent("unknown agent session bob:s-bob", field="to")
    for index in range(6):
        await spool.put(outgoing(index))
    db = sqlite3.connect(spool.path)
    try:
        db.execute("UPDATE mail SET body = '{\"job\": 7}' WHERE mail_key = 'm-2'")
        db.commit()
    finally:
        db.close()
    report = await SpoolForwarder(spool, database.write, describe=lambda e: f"said: {e}").forward()
    assert database.order == ["m-0", "m-5"]
    assert set(report.quarantined) == {"m-1", "m-2", "m-3", "m-4"}
    assert report.quarantined["m-1"].startswith("said: job 'j-1' already exists")
    assert report.quarantined["m-2"].startswith("undecodable spool row:")
    status = await spool.status()
    assert (status.mails, status.quarantined) == (0, 4)
    # Quarantined mail is never retried by a forward.
    database.refuse.clear()
    await SpoolForwarder(spool, database.write).forward()
    assert database.order == ["m-0", "m-5"]
    # Until an operator puts it back: the decodable ones go, the damaged one stays.
    assert await spool.requeue() == 3
    await SpoolForwarder(spool, database.write).forward()
    assert database.order == ["m-0", "m-5", "m-1", "m-3", "m-4"]
    assert (await spool.status()).quarantined == 1


async def test_mail_older_than_the_maximum_age_is_quarantined_not_sent_late(
    spool: SqliteSpool, clock: FrozenClock
) -> None:
    """A row older than max_age_s is set aside with the reason at the next forward."""
    database = Database()
    await spool.put(outgoing(1))
    clock.advance(spool.max_age_s + 1)
    await spool.put(outgoing(2))
    report = await SpoolForwarder(spool, database.write).forward()
    assert database.order == ["m-2"]
    assert list(report.quarantined) == ["m-1"]
    [aged] = await spool.quarantined(limit=5)
    assert "BIRDDOG_SPOOL_MAX_AGE_S (5d 00h)" in str(aged["reason"])
    assert aged["quarantined_at"] == T0 + timedelta(seconds=spool.max_age_s + 1)


async def test_one_forwarder_at_a_time(spool: SqliteSpool) -> None:
    """While one forwarder holds the spool, another finds it busy and writes nothing."""
    database = Database()
    await spool.put(outgoing(1))
    entered = asyncio.Event()
    release = asyncio.Event()

    async def slow(mail: Outgoing) -> None:
        entered.set()
        await release.wait()
        await database.write(mail)

    first = asyncio.create_task(SpoolForwarder(spool, slow).forward())
    await asyncio.wait_for(entered.wait(), 10)
    second = await SpoolForwarder(spool, database.write).forward(wait_s=0.2)
    assert second.busy
    assert database.order == []
    release.set()
    assert (await first).forwarded == ["m-1"]
    assert database.order == ["m-1"]
