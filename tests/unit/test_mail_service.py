"""The mail service's rules on fakes, no database: ask answered, failed, timed out, spooled.

The world is the fakes of :mod:`birddog.testing` wired as the composition root wires the
real adapters: the ask store enqueues into the job store, whose settlements write replies
into the outbox; the test plays the worker (claim, settle) and the drain (a reply into
the asker's mailbox). ``away`` on the ask store and the mailbox is the database that
cannot be reached.
"""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from birddog import (
    AgentAddress,
    AskFailed,
    AskTimedOut,
    InvalidInput,
    JobConflict,
    Outcome,
    SpoolFailed,
    StoreUnavailable,
    UnknownAgent,
)
from birddog.core.ask import Posted
from birddog.core.ask_facts import AskState
from birddog.core.spool import Outgoing
from birddog.service.writing import BEHIND_SPOOLED, DATABASE_UNREACHABLE
from tests.support import json_at
from tests.support.waiting import eventually
from tests.support.world import World, queued

UPPER = AgentAddress(agent_id="upper", session_id="s-upper")
ASKER = AgentAddress(agent_id="asker", session_id="s-ask")


@pytest.fixture
async def world() -> World:
    """A world whose target has a mailbox route, its service with a spool."""
    world = World()
    await world.routes.add("upper", kind="mailbox")
    return world


async def test_an_answered_ask_returns_the_content_and_acks_the_reply(world: World) -> None:
    """A completed reply is the answer, and it is marked read once taken."""
    asking = asyncio.create_task(world.mail.ask(to=UPPER, from_=ASKER, content="hi", key="k-1"))
    await queued(world)
    await world.answer("HI")
    assert await asking == "HI"
    [entry] = world.mailbox.entries.values()
    assert entry.read_at is not None
    assert (await world.routes.route("asker")) is not None  # the asker got a mailbox route


async def test_a_failed_ask_raises_with_the_outcome_and_diagnostic(world: World) -> None:
    """Work that ended failed is AskFailed carrying the outcome, never an answer."""
    asking = asyncio.create_task(world.mail.ask(to=UPPER, from_=ASKER, content="hi", key="k-2"))
    await queued(world)
    await world.answer("", Outcome.FAILED, "boom")
    with pytest.raises(AskFailed) as failed:
        await asking
    assert (failed.value.outcome, failed.value.diagnostic) == ("failed", "boom")


async def test_a_timed_out_ask_says_where_it_stands_for_the_whole_call(world: World) -> None:
    """No reply in time is AskTimedOut for the whole timeout, naming the queued job."""
    with pytest.raises(AskTimedOut) as timed_out:
        await world.mail.ask(to=UPPER, from_=ASKER, content="hi", key="k-3", timeout_s=0.05)
    assert timed_out.value.key == "k-3"
    assert timed_out.value.facts is not None
    assert timed_out.value.facts.state is AskState.QUEUED
    assert "within 0.05 s" in str(timed_out.value)
    assert "still owed" in str(timed_out.value)


async def test_an_ask_to_an_unknown_session_writes_nothing(world: World) -> None:
    """A target without a route whose session had no work is refused before any write."""
    with pytest.raises(UnknownAgent):
        await world.mail.ask(to="nobody:s-x", from_=ASKER, content="hi", timeout_s=1)
    assert world.jobs.jobs == {}
    assert await world.routes.route("asker") is None


@pytest.mark.parametrize("route", ["url", "mailbox", "none"])
async def test_every_ask_is_marked_whatever_the_route_and_a_send_is_not(
    world: World, route: str
) -> None:
    """Every ask's job is marked askerMailbox (an inbox URL, a mailbox, no route yet)."""
    if route == "url":
        await world.routes.add("poster", "https://poster.example/inbox")
    elif route == "mailbox":
        await world.routes.add("poster", kind="mailbox")
    asked = await world.mail.send_ask(to=UPPER, from_="poster:s-p", content="hi")
    sent = await world.mail.send(to=UPPER, from_="poster:s-p", content="fyi")
    assert world.jobs.jobs[asked.job_id].job.payload["askerMailbox"] is True
    assert "askerMailbox" not in world.jobs.jobs[sent.job_id].job.payload


async def test_the_same_key_again_is_a_replay_and_another_mail_a_conflict(world: World) -> None:
    """A repeat of the same question is one job; the same key with other content is refused."""
    first = await world.mail.send_ask(to=UPPER, from_=ASKER, content="hi", key="k-4")
    again = await world.mail.send_ask(to=UPPER, from_=ASKER, content="hi", key="k-4")
    assert (first.replay, again.replay) == (False, True)
    assert len(world.jobs.jobs) == 1
    with pytest.raises(JobConflict, match="content"):
        await world.mail.send_ask(to=UPPER, from_=ASKER, content="other", key="k-4")


async def test_bad_input_is_refused_naming_the_field(world: World) -> None:
    """An address without a session is InvalidInput naming ``to``; nothing is written."""
    with pytest.raises(InvalidInput) as bad:
        await world.mail.send(to="upper", from_=ASKER, content="hi")
    assert bad.value.field == "to"
    assert world.jobs.jobs == {}


async def test_mail_the_database_cannot_take_is_spooled_and_forwarded_once(world: World) -> None:
    """Unreachable: the mail waits in the spool; forwarded once the database is back."""
    world.away()
    sent = await world.mail.send(to=UPPER, from_=ASKER, content="while away", key="k-5")
    assert sent.spooled == DATABASE_UNREACHABLE
    assert (await world.spool.status()).mails == 1
    assert world.jobs.jobs == {}
    world.away(None)
    report = await world.mail.forward()
    assert report.forwarded == ["k-5"]
    assert (await world.spool.status()).mails == 0
    assert [s.job.job_id for s in world.jobs.jobs.values()] == [sent.job_id]
    assert (await world.mail.forward()).forwarded == []


async def test_a_spooled_mail_refused_when_forwarded_is_quarantined(world: World) -> None:
    """A mail the store refuses for what it is goes aside with the reason, never retried."""
    world.away()
    await world.mail.send(to="nobody:s-x", from_=ASKER, content="hi", key="k-6")
    world.away(None)
    report = await world.mail.forward()
    assert list(report.quarantined) == ["k-6"]
    assert isinstance(report.refused["k-6"], UnknownAgent)
    status = await world.spool.status()
    assert (status.mails, status.quarantined) == (0, 1)


async def test_mail_of_a_lane_keeps_its_order_behind_spooled_mail(world: World) -> None:
    """While a lane's mail waits, a new one goes behind it: forwarded first, or spooled."""
    world.away()
    await world.mail.send(to=UPPER, from_=ASKER, content="1", key="k-7a")
    world.away(None)
    later = await world.mail.send(to=UPPER, from_=ASKER, content="2", key="k-7b")
    assert later.spooled is None
    keys = [json_at(s.job.payload, "mail", "key") for s in world.jobs.jobs.values()]
    assert keys == ["k-7a", "k-7b"]


async def test_a_lane_whose_spooled_mail_cannot_go_spools_the_next_behind_it(
    world: World,
) -> None:
    """Another forwarder holds the spool: the new mail of the lane is spooled behind."""
    world.away()
    await world.mail.send(to=UPPER, from_=ASKER, content="1", key="k-8a")
    world.away(None)
    async with world.spool.forwarding() as held:
        assert held
        later = await world.mail.send(to=UPPER, from_=ASKER, content="2", key="k-8b", timeout_s=0)
    assert later.spooled == BEHIND_SPOOLED
    assert [row.key for row in world.spool.rows] == ["k-8a", "k-8b"]


async def test_a_wait_outlasts_the_database_being_away(world: World) -> None:
    """An ask spooled while away is forwarded by its own wait once back, then answered."""
    world.away()
    asking = asyncio.create_task(
        world.mail.ask(to=UPPER, from_=ASKER, content="hi", key="k-9", timeout_s=10)
    )
    await eventually(lambda: world.spool.rows, "the question spooled")
    world.away(None)
    await queued(world)
    await world.answer("HI")
    assert await asking == "HI"
    assert world.spool.rows == []


async def test_a_timeout_while_still_spooled_says_so(world: World) -> None:
    """No reply while the mail never left the spool: the message says it is still there."""
    world.away()
    with pytest.raises(AskTimedOut, match="still in the local spool"):
        await world.mail.ask(to=UPPER, from_=ASKER, content="hi", key="k-10", timeout_s=0.05)


async def test_without_a_spool_the_database_away_raises() -> None:
    """A service with no spool (a library over a pool) raises StoreUnavailable, spools nothing."""
    world = World(spooling=False)
    await world.routes.add("upper", kind="mailbox")
    world.away()
    with pytest.raises(StoreUnavailable):
        await world.mail.send(to=UPPER, from_=ASKER, content="hi")
    world.asks.away = None
    asked = await world.mail.send_ask(to=UPPER, from_=ASKER, content="hi", key="k-11")
    world.mailbox.away = "connection refused"
    with pytest.raises(StoreUnavailable):
        await world.mail.wait_for_answer(asked, timeout_s=1)
    assert (await world.mail.forward()).forwarded == []


async def test_a_write_whose_answer_was_lost_is_tried_again_as_a_replay(world: World) -> None:
    """A connection lost after the commit: the same mail again is a replay, one job."""
    world.asks.lose_writes = 1
    sent = await world.mail.send(to=UPPER, from_=ASKER, content="hi", key="k-12")
    assert (sent.spooled, sent.replay, world.asks.writes) == (None, True, 2)
    assert len(world.jobs.jobs) == 1


async def test_a_wait_tells_progress_then_ends_pending(world: World) -> None:
    """A wait with progress is told as it goes and still ends in AskTimedOut, never empty."""
    told: list[tuple[float, float]] = []

    async def progress(waited_s: float, wait_s: float) -> None:
        told.append((waited_s, wait_s))

    question = await world.mail.pose(to=UPPER, from_=ASKER, content="hi", key="k-13", timeout_s=0.1)
    with pytest.raises(AskTimedOut) as timed_out:
        await question.answer(progress=progress, every_s=0.02)
    assert told
    assert all(total == pytest.approx(0.1) for _, total in told)
    assert "within 0.1 s" in str(timed_out.value)


async def test_a_question_waited_for_again_gets_its_answer(world: World) -> None:
    """The wait of a question sent before (by key) ends with the reply that landed since."""
    asked = await world.mail.send_ask(to=UPPER, from_=ASKER, content="hi", key="k-14")
    await world.answer("HI")
    assert await world.mail.awaiting(asked.key, ASKER, timeout_s=1).answer() == "HI"
    assert await world.mail.mail("k-14", timeout_s=1) is not None


async def test_a_cancelled_ask_still_sends_its_question(world: World) -> None:
    """Once being sent, a question stays asked: cancelling the call ends only the wait."""
    entered, release = asyncio.Event(), asyncio.Event()
    write = world.asks.write

    async def slow_write(outgoing: Outgoing, *, timeout_s: float) -> Posted:
        entered.set()
        await release.wait()
        return await write(outgoing, timeout_s=timeout_s)

    world.asks.write = slow_write  # type: ignore[method-assign]
    asking = asyncio.create_task(world.mail.ask(to=UPPER, from_=ASKER, content="hi", key="k-15"))
    await entered.wait()
    asking.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asking
    await queued(world)


async def test_a_spool_that_cannot_take_the_mail_says_both_failures(world: World) -> None:
    """Database unreachable and the spool's disk failing: SpoolFailed names both; nothing kept."""
    world.away()
    world.spool.failing = "read-only file system"
    with pytest.raises(SpoolFailed) as failed:
        await world.mail.send(to=UPPER, from_=ASKER, content="hi")
    assert "unreachable" in str(failed.value)
    assert "read-only file system" in str(failed.value)
    assert world.spool.rows == []


async def test_a_send_without_a_key_is_named_as_a_send_and_an_ask_as_an_ask(
    world: World,
) -> None:
    """A plain send's fresh key is mail-<time>-<token> (its job send:), an ask's ask-..."""
    sent = await world.mail.send(to=UPPER, from_=ASKER, content="fyi")
    assert sent.key.startswith("mail-20260101T000000Z-")
    assert sent.job_id == "send:" + sent.key
    asked = await world.mail.send_ask(to=UPPER, from_=ASKER, content="well?")
    assert asked.key.startswith("ask-20260101T000000Z-")
    assert asked.job_id == "ask:" + asked.key


async def test_a_question_names_its_key_before_it_is_sent(world: World) -> None:
    """A posed question tells on_key its fresh key while nothing is written yet."""
    told: list[tuple[str, int]] = []

    async def on_key(key: str) -> None:
        told.append((key, len(world.jobs.jobs)))

    question = await world.mail.pose(
        to=UPPER, from_=ASKER, content="hi", timeout_s=1, on_key=on_key
    )
    assert told == [(question.key, 0)]
    assert question.key.startswith("ask-")
    assert list(world.jobs.jobs) == ["ask:" + question.key]


async def test_a_send_whose_caller_left_logs_its_failure_but_not_bad_input(
    world: World,
) -> None:
    """A send that fails after its caller was cancelled is logged, unless it was bad input."""

    async def leave(_key: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # the caller goes away just as the send starts

    await world.mail.send(to=UPPER, from_=ASKER, content="first", key="k-taken")
    with capture_logs() as logs:
        for to, content in (("no-colon", "x"), (UPPER, "another")):
            with pytest.raises(asyncio.CancelledError):
                await world.mail.pose(
                    to=to, from_=ASKER, content=content, key="k-taken", on_key=leave
                )
        # The conflicting send ends after the bad address's (which ends at its first step).
        await eventually(
            lambda: [entry for entry in logs if entry["event"] == "send_failed_after_cancel"],
            "the conflicting send's failure logged",
        )
    failed = [entry for entry in logs if "after_cancel" in entry["event"]]
    assert [entry["error"] for entry in failed] == ["JobConflict"]
