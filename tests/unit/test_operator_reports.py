"""``birddog status`` and ``birddog check``'s logic over the fakes: no database at all.

``status_report``, ``check_report`` and ``spool_problems`` take a Services; here it is
:class:`~tests.support.services.FakeServices`, the fakes the contract suites hold to the
Postgres adapters, so what a report says is tested without PostgreSQL.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from birddog import DeadReason, RowState
from birddog.cli.ops import CheckLimits, check_report, spool_problems, status_report
from birddog.core.delivery import OutboxRow
from birddog.core.spool import Outgoing
from birddog.testing import DaemonSeen, FrozenClock
from tests.support import T0, make_job, make_row
from tests.support.services import FakeServices

HOUR_S = 3600.0

LIMITS = CheckLimits(
    pending_s=HOUR_S,
    dead_s=HOUR_S,
    job_queued_s=HOUR_S,
    lease_overdue_s=60.0,
    hold_s=HOUR_S,
    daemon_s=120.0,
    spool_s=600.0,
)


def seen(services: FakeServices, daemon_id: str, kind: str, ago_s: float) -> None:
    """Record a running process that last beat ``ago_s`` ago."""
    at = services.clock.now() - timedelta(seconds=ago_s)
    services.reports.daemons[daemon_id] = DaemonSeen(daemon_id, kind, "host-1", 7, at, at)


def pending_row(
    services: FakeServices, key: str, *, agent: str = "alice", age_s: float = 0.0
) -> OutboxRow:
    """A pending row created (and due) ``age_s`` ago."""
    when = services.clock.now() - timedelta(seconds=age_s)
    return replace(make_row(key, agent=agent), created_at=when, due_at=when)


async def test_the_status_report_counts_replies_jobs_and_daemons_seen() -> None:
    """Pending, held and dead replies, the oldest's age, the next wake, jobs, processes."""
    services = FakeServices(clock=FrozenClock(T0))
    await services.routes.add("bob", kind="mailbox")
    await services.store.add(
        [pending_row(services, "k-1", age_s=90), pending_row(services, "k-2", agent="bob")]
    )
    await services.routes.hold("bob")
    services.store.rows["k-dead"] = replace(
        pending_row(services, "k-dead"), state=RowState.DEAD, dead_reason=DeadReason.GONE
    )
    later = T0 + timedelta(hours=1)
    await services.job_store.enqueue(make_job("j-1"))
    await services.job_store.enqueue(
        make_job("j-2", session="s-2").model_copy(update={"not_before": later})
    )
    seen(services, "d-1", "drain", 5)
    seen(services, "w-old", "worker", 3600)
    await services.live.beat(agent_id="bob", session="s-bob", holder="mcp:h:1", ttl_s=5)
    report = await status_report(services)
    assert report["replies"] == {
        "pending": 2,
        "dead": 1,
        "held": 1,
        "in_flight": 0,
        "oldest_pending_age_s": 90.0,
        "next_wake_in_s": 0.0,
    }
    assert report["jobs"] == {"queued": 2, "running": 0, "settled": 0}
    assert report["jobs_not_yet_due"] == {"jobs": 1, "next_at": later}
    assert report["daemons"] == [
        {"kind": "drain", "host": "host-1", "pid": 7, "seen_at": T0 - timedelta(seconds=5)}
    ]
    assert report["live_sessions"] == [
        {
            "agent_id": "bob",
            "session": "s-bob",
            "holder": "mcp:h:1",
            "started_at": T0,
            "expires_at": T0 + timedelta(seconds=5),
        }
    ]


async def test_a_quiet_mail_room_has_nothing_to_check() -> None:
    """Nothing pending, nothing dead, no jobs: no problem, and an empty status."""
    services = FakeServices(clock=FrozenClock(T0))
    assert await check_report(services, LIMITS) == []
    assert await spool_problems(services, LIMITS, database_answers=True) == []
    report = await status_report(services)
    assert report["replies"]["oldest_pending_age_s"] is None
    assert report["replies"]["next_wake_in_s"] is None


async def test_check_names_each_kind_of_problem_once_with_its_facts() -> None:
    """Stale and dead replies, a stale, an overdue and a squatting job, a hold, no daemon."""
    services = FakeServices(clock=FrozenClock(T0))
    await services.routes.add("bob", kind="mailbox")
    await services.store.add(
        [
            pending_row(services, "k-stale", age_s=2 * HOUR_S),
            pending_row(services, "k-bob", agent="bob", age_s=60),
        ]
    )
    services.store.rows["k-dead"] = replace(
        pending_row(services, "k-dead", age_s=60), state=RowState.DEAD, dead_reason=DeadReason.GONE
    )
    await services.routes.hold("bob")
    services.routes.routes["bob"] = replace(
        services.routes.routes["bob"], held_at=T0 - timedelta(hours=2)
    )
    await services.job_store.enqueue(make_job("j-run", session="s-2"))
    await services.job_store.enqueue(make_job("j-queued"))
    services.job_store.jobs["j-queued"].created_at = T0 - timedelta(hours=2)
    claimed = await services.job_store.claim(queues=["s-2"], lease_s=30, worker_id="w-1")
    assert claimed is not None
    services.job_store.jobs["j-run"].lease_expires_at = T0 - timedelta(minutes=10)
    # A job that has held its queue for two hours while another waits behind it.
    await services.job_store.enqueue(make_job("j-squat", session="s-5"))
    await services.job_store.enqueue(make_job("j-behind", session="s-5"))
    squat = await services.job_store.claim(queues=["s-5"], lease_s=30, worker_id="w-2")
    assert squat is not None
    services.job_store.jobs["j-squat"].started_at = T0 - timedelta(hours=2)
    seen(services, "d-gone", "drain", 600)

    problems = await check_report(services, LIMITS)
    by_check = {problem["check"]: problem for problem in problems}
    assert list(by_check) == [
        "pending",
        "dead",
        "job_queued",
        "job_overdue",
        "queue_held",
        "hold",
        "no_daemon",
    ]
    assert by_check["pending"]["key"] == "k-stale"
    assert (
        "pending too long: k-stale to alice since 2025-12-31 22:00:00Z"
        in (by_check["pending"]["message"])
    )
    assert by_check["dead"]["message"].startswith("new dead letter: k-dead to alice (gone)")
    assert by_check["job_queued"]["job_id"] == "j-queued"
    assert " on w-1, lease ended 2025-12-31 23:50:00Z" in by_check["job_overdue"]["message"]
    assert by_check["queue_held"]["message"] == (
        "queue held: j-squat in queue s-5 on w-2, running since 2025-12-31 22:00:00Z, lease "
        "until 2026-01-01 00:00:30Z, 1 jobs waiting behind it (birddog jobs cancel j-squat "
        "frees it)"
    )
    assert by_check["hold"]["message"].startswith("held too long: bob since")
    assert by_check["hold"]["waiting"] == 1
    assert by_check["no_daemon"]["due"] == 1
    assert "vanished without stopping" in by_check["no_daemon"]["message"]


async def test_spool_problems_name_mail_left_waiting_and_quarantined() -> None:
    """Mail waiting while the database answers, and for too long; a quarantined mail."""
    services = FakeServices(clock=FrozenClock(T0))
    await services.spool.put(Outgoing(job=make_job("j-spooled"), checked=True))
    await services.spool.put(Outgoing(job=make_job("j-bad"), checked=True))
    [_, bad] = await services.spool.waiting()
    await services.spool.quarantine(bad.id, "the target is unknown")
    away = await spool_problems(services, LIMITS, database_answers=False)
    assert [problem["check"] for problem in away] == ["spool_quarantined"]
    services.clock.advance(2 * LIMITS.spool_s)
    problems = await spool_problems(services, LIMITS, database_answers=True)
    assert [problem["check"] for problem in problems] == [
        "spool_old",
        "spool_waiting",
        "spool_quarantined",
    ]
    assert (
        "1 spooled mails wait in /var/spool/birddog.sqlite while the database answers"
        in (problems[1]["message"])
    )
    assert "the latest mail-j-bad: the target is unknown" in problems[2]["message"]
    assert problems[0]["mails"] == 1
