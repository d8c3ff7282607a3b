"""The spool ports' contract: InMemorySpool and the SQLite spool give the same answers.

The mail service's unit tests spool into InMemorySpool; these tests hold it to the SQLite
file's behaviour: spool order and lanes, the bound, the quarantine and its reasons,
ageing, requeue, the last forward's note, and one forwarder at a time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from birddog import AgentAddress, AgentWork, Mail, SpoolFull, agent_job
from birddog.core.spool import Destination, Outgoing
from birddog.ports import Spool, SpoolAdmin
from birddog.sqlite import SqliteSpool
from birddog.testing import FrozenClock, InMemorySpool
from tests.support import T0

PORTS = ("Spool", "SpoolAdmin")
"""The ports these tests hold their fake and their SQLite adapter to."""

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
MAX_AGE_S = 3600.0


class Spools(Spool, SpoolAdmin):
    """What both backends are: the spool and its operator's side."""


def outgoing(index: int, *, session: str = "s-bob", content: str = "hello") -> Outgoing:
    """Mail ``m-<index>`` from alice to bob's ``session``, as ``send --job-id`` spools it."""
    mail = Mail(
        key=f"m-{index}",
        to=AgentAddress(agent_id="bob", session_id=session),
        from_=ALICE,
        reply_to=[ALICE],
        content=content,
        created_at=index,
    )
    work = AgentWork(job_id=f"j-{index}", session_id=session, command_fact_id=f"c-{index}")
    return Outgoing(job=agent_job(work, mail), checked=False)


@pytest.fixture
def clock() -> FrozenClock:
    """The time both spools spool at and age by."""
    return FrozenClock(T0)


@pytest.fixture
def memory_backend(clock: FrozenClock) -> InMemorySpool:
    """The in-memory spool."""
    return InMemorySpool(clock=clock, max_bytes=4096, max_age_s=MAX_AGE_S)


@pytest.fixture
def sqlite_backend(tmp_path: Path, clock: FrozenClock) -> SqliteSpool:
    """The SQLite spool, its file not made yet."""
    return SqliteSpool(tmp_path / "spool.db", clock=clock, max_bytes=4096, max_age_s=MAX_AGE_S)


@pytest.fixture(params=["memory_backend", "sqlite_backend"])
def spool(request: pytest.FixtureRequest) -> Spools:
    """Each backend in turn."""
    result: Spools = request.getfixturevalue(request.param)
    return result


async def test_a_spool_never_written_holds_nothing(spool: Spools) -> None:
    """Before the first mail: nothing exists, nothing waits, the status is empty."""
    assert not spool.exists()
    assert not await spool.has_waiting()
    assert await spool.waiting() == []
    status = await spool.status()
    assert (status.mails, status.quarantined, status.bytes, status.oldest_at) == (0, 0, 0, None)


async def test_mail_waits_in_spool_order_by_lane(spool: Spools) -> None:
    """Rows come back in the order spooled, a lane's alone when asked; by key too."""
    ids = [await spool.put(outgoing(i, session="s-1" if i != 2 else "s-2")) for i in range(3)]
    assert ids == sorted(ids)
    assert spool.exists()
    assert [row.key for row in await spool.waiting()] == ["m-0", "m-1", "m-2"]
    lane = ("alice:s-alice", "s-1")
    assert [row.key for row in await spool.waiting(lane=lane)] == ["m-0", "m-1"]
    assert [row.key for row in await spool.waiting(after_id=ids[0], limit=1)] == ["m-1"]
    assert await spool.has_waiting(("alice:s-alice", "s-2"))
    assert not await spool.has_waiting(("alice:s-alice", "s-9"))
    assert await spool.is_waiting("m-2")
    mail = await spool.mail("m-2")
    assert mail is not None
    assert mail.to.session_id == "s-2"
    assert (await spool.status()).oldest_at == T0


async def test_deleted_rows_are_gone(spool: Spools) -> None:
    """Forwarded rows deleted at once leave the rest waiting."""
    first = await spool.put(outgoing(1))
    await spool.put(outgoing(2))
    await spool.delete([first])
    assert [row.key for row in await spool.waiting()] == ["m-2"]
    assert not await spool.is_waiting("m-1")
    assert await spool.mail("m-1") is None


async def test_a_full_spool_refuses_without_dropping(spool: Spools) -> None:
    """Past the bound a new mail is SpoolFull; what waits stays as it was."""
    await spool.put(outgoing(1, content="x" * 1000))
    with pytest.raises(SpoolFull, match="spool full"):
        await spool.put(outgoing(2, content="x" * 3000))
    assert [row.key for row in await spool.waiting()] == ["m-1"]
    assert (await spool.status()).mails == 1


async def test_quarantined_mail_keeps_its_reason_and_can_be_requeued(spool: Spools) -> None:
    """A row set aside is listed with its reason, counts as quarantined, and goes back once."""
    first = await spool.put(outgoing(1))
    await spool.put(outgoing(2))
    await spool.quarantine(first, "refused: unknown agent")
    assert [row.key for row in await spool.waiting()] == ["m-2"]
    [aside] = await spool.quarantined(limit=5)
    assert (aside["key"], aside["reason"]) == ("m-1", "refused: unknown agent")
    assert await spool.quarantine_reason("m-1") == "refused: unknown agent"
    assert await spool.quarantine_reason("m-2") is None
    assert (await spool.status()).quarantined == 1
    assert await spool.requeue() == 1
    assert [row.key for row in await spool.waiting()] == ["m-2", "m-1"]
    assert await spool.quarantined(limit=5) == []


async def test_mail_older_than_the_age_limit_is_set_aside(
    spool: Spools, clock: FrozenClock
) -> None:
    """Past the age limit a row is quarantined, saying so; a younger one waits on."""
    await spool.put(outgoing(1))
    clock.advance(MAX_AGE_S / 2)
    await spool.put(outgoing(2))
    clock.advance(MAX_AGE_S / 2 + 1)
    assert await spool.quarantine_aged() == ["m-1"]
    assert [row.key for row in await spool.waiting()] == ["m-2"]
    assert "BIRDDOG_SPOOL_MAX_AGE_S" in str(await spool.quarantine_reason("m-1"))


async def test_the_last_forward_is_noted(spool: Spools) -> None:
    """A forward that stopped leaves its error; a clean one clears it and stamps its time."""
    await spool.put(outgoing(1))
    await spool.note_forward("database unreachable")
    status = await spool.status()
    assert (status.last_error, status.last_error_at) == ("database unreachable", T0)
    await spool.note_forward(None)
    status = await spool.status()
    assert (status.last_error, status.last_forward_at) == (None, T0)


async def test_one_forwarder_holds_the_spool_at_a_time(spool: Spools) -> None:
    """While one holds the forwarding lock another does not get it; after, it does."""
    await spool.put(outgoing(1))
    async with spool.forwarding() as held:
        assert held
        async with spool.forwarding(wait_s=0) as other:
            assert not other
    async with spool.forwarding() as again:
        assert again


def aimed(spool: Spools, destination: Destination | None) -> None:
    """Make ``spool`` the spool of a process that sends to ``destination``."""
    if isinstance(spool, InMemorySpool):
        spool.destination = destination
    else:
        assert isinstance(spool, SqliteSpool)
        spool.file.database.destination = destination


async def test_only_mail_meant_for_this_database_is_read_back(spool: Spools) -> None:
    """Another key is left and listed by destination; a known other server is left too."""
    here = Destination(host="db", port=5432, database="mail", user="bird")
    there = here.model_copy(update={"database": "typo"})
    aimed(spool, there)
    await spool.put(outgoing(1))
    aimed(spool, here)
    assert await spool.waiting() == []
    assert not await spool.has_waiting()
    assert [row.key for row in await spool.waiting(adopt=True)] == ["m-1"]
    status = await spool.status()
    assert [(name, count) for name, count, _ in status.elsewhere] == [(there.describe(), 1)]
    await spool.put(outgoing(2))
    await spool.note_server("cluster-a/1")
    await spool.put(outgoing(3))  # stamped with the server now known behind this key
    assert [row.key for row in await spool.waiting()] == ["m-2", "m-3"]
    await spool.note_server("cluster-b/1")  # the same DSN now reaches another server
    assert [row.key for row in await spool.waiting()] == ["m-2"]
    assert sum(count for _, count, _ in (await spool.status()).elsewhere) == 2
