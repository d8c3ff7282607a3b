"""The Sender and its spool against a model, on a real PostgreSQL (behind a proxy) and SQLite.

A Hypothesis state machine sends mail in three lanes (a conflicting replay of a job id
among them), forwards, crashes the forwarder between the database's commit and the
spool's delete, plants a damaged row, and takes the database away and back. After every
step and at the end it checks that every accepted mail is in PostgreSQL exactly once (or
quarantined with a reason), and that each lane's mail reached PostgreSQL in the order it
was accepted.

The machine runs on a thread of its own; every database or spool call runs on the test's
event loop, where the pool and the proxy live.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from birddog import AgentAddress, AgentWork, JobConflict, Mail, Sender, agent_job, open_sender
from birddog.core.spool import Outgoing
from birddog.postgres.pool import Pool, create_pool
from birddog.sqlite import SqliteSpool
from tests.support import spool_file
from tests.support.proxy import DatabaseProxy

T = TypeVar("T")

LANES = (("alice", "s-1"), ("alice", "s-2"), ("carol", "s-1"))
"""(sender agent, recipient session): three lanes, two sharing a recipient session."""

EXAMPLES = 20
STEPS = 30
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)
"""Each step talks to two databases: shrinking a failure would outlast any timeout, so the
failing run is reported as it was found."""


class Crash(BaseException):
    """The forwarding process dies here (a BaseException: nothing on the way catches it)."""


class CrashingSpool(SqliteSpool):
    """A spool whose delete can die before it runs, as a process killed after the commit."""

    crash_on_delete = False

    async def delete(self, ids: Sequence[int]) -> None:
        """Delete forwarded rows, or die first when armed (the rows stay: a replay)."""
        if self.crash_on_delete and ids:
            self.crash_on_delete = False
            raise Crash
        await super().delete(ids)


def make_machine(
    loop: asyncio.AbstractEventLoop, proxy: DatabaseProxy, pg_pool: Pool, root: Path
) -> type[RuleBasedStateMachine]:
    """The state machine class, bound to the test's loop, proxy, pool and directory."""

    def run(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=120)

    class SpoolMachine(RuleBasedStateMachine):
        """Send, forward, crash, damage, database down and up; the model is what was accepted."""

        def __init__(self) -> None:
            super().__init__()
            self.run_id = uuid.uuid4().hex[:10]
            self.path = root / self.run_id / "spool.db"
            self.count = 0
            self.accepted: dict[tuple[str, str], list[str]] = {lane: [] for lane in LANES}
            self.originals: list[tuple[tuple[str, str], str, int]] = []
            self.doomed: dict[str, str] = {}  # key -> what its quarantine reason says
            self.down = False
            self.crash_after_write = False
            run(proxy.up())
            self.pool = run(create_pool(proxy.dsn, min_size=0, max_size=2))
            self.opened: AbstractAsyncContextManager[Sender] = open_sender(
                self.pool, None, spool_path=self.path, forward_every_s=0, poll_s=0.2
            )
            self.base = run(self.opened.__aenter__())
            self.sender = self.restart()

        def restart(self) -> Sender:
            """A new forwarding process on the same spool file (the last one died)."""
            spool = CrashingSpool(self.path, clock=spool_file(self.base).clock)
            sender = self.base.with_spool(spool, describe=self.base.describe)
            forwarder = sender.forwarder
            assert forwarder is not None
            written = forwarder.write

            async def write_then_maybe_die(outgoing: Outgoing) -> None:
                await written(outgoing)
                if self.crash_after_write:
                    self.crash_after_write = False
                    raise Crash

            forwarder.write = write_then_maybe_die
            return sender

        def outgoing_job(self, lane: tuple[str, str], job_no: int, content: str) -> Any:
            agent, session = lane
            self.count += 1
            sender = AgentAddress(agent_id=agent, session_id=f"s-{agent}")
            mail = Mail(
                key=f"{self.run_id}-m{self.count}",
                to=AgentAddress(agent_id="bob", session_id=session),
                from_=sender,
                reply_to=[sender],
                content=content,
                created_at=job_no,
            )
            work = AgentWork(
                job_id=f"{self.run_id}-j{job_no}", session_id=session, command_fact_id="c"
            )
            return agent_job(work, mail)

        @rule(lane=st.sampled_from(LANES))
        def send(self, lane: tuple[str, str]) -> None:
            """A new mail is accepted: written to the database, or spooled."""
            job = self.outgoing_job(lane, self.count + 1, "hello")
            sent = run(self.sender.enqueue(job, timeout_s=10))
            # Up, earlier mail of the lane goes first and this one follows; away, all waits.
            assert (sent.spooled is not None) == self.down, sent
            self.accepted[lane].append(sent.key)
            self.originals.append((lane, sent.key, int(job.job_id.rsplit("j", 1)[1])))

        @precondition(lambda self: bool(self.originals))
        @rule(pick=st.integers(min_value=0))
        def send_a_conflicting_replay(self, pick: int) -> None:
            """A mail reusing an earlier job id with other content: refused, or quarantined."""
            lane, _, job_no = self.originals[pick % len(self.originals)]
            job = self.outgoing_job(lane, job_no, "other content")
            try:
                sent = run(self.sender.enqueue(job, timeout_s=10))
            except JobConflict:
                # Up, the first mail reached the database before this one: refused at once.
                assert not self.down
                return
            assert self.down, sent
            self.accepted[lane].append(sent.key)
            self.doomed[sent.key] = "already exists with a different"

        @precondition(lambda self: self.path.is_file())
        @rule(lane=st.sampled_from(LANES))
        def plant_a_damaged_row(self, lane: tuple[str, str]) -> None:
            """A row no version could decode appears in a lane: quarantined, blocking nothing."""
            self.count += 1
            key = f"{self.run_id}-bad{self.count}"
            db = sqlite3.connect(self.path)
            try:
                db.execute(
                    "INSERT INTO mail (spooled_at_ms, mail_key, job_id, sender, session, body)"
                    " VALUES (strftime('%s') * 1000, ?, ?, ?, ?, '{not json')",
                    (key, f"{self.run_id}-bad", f"{lane[0]}:s-{lane[0]}", lane[1]),
                )
                db.commit()
            finally:
                db.close()
            self.accepted[lane].append(key)
            self.doomed[key] = "undecodable spool row"

        @rule()
        def forward(self) -> None:
            """One forward: everything while the database answers, nothing while it is away."""
            report = run(self.sender.forward(wait_s=10))
            assert not report.busy
            if self.down:
                assert not report.forwarded, report

        @precondition(lambda self: not self.down)
        @rule(after_write=st.booleans())
        def crash_the_forwarder(self, after_write: bool) -> None:
            """The forwarder dies after a commit, before the spool row goes; a new one starts."""
            spool = self.sender.spool
            assert isinstance(spool, CrashingSpool)
            self.crash_after_write = after_write
            spool.crash_on_delete = not after_write
            with suppress(Crash):
                run(self.sender.forward(wait_s=10))
            self.crash_after_write = False
            spool.crash_on_delete = False
            self.sender = self.restart()

        @precondition(lambda self: not self.down)
        @rule()
        def database_down(self) -> None:
            """The database (or the network to it) goes away; open connections reset."""
            run(proxy.down())
            self.down = True

        @precondition(lambda self: self.down)
        @rule()
        def database_up(self) -> None:
            """The database answers again."""
            run(proxy.up())
            self.down = False

        def stored(self) -> dict[tuple[str, str], list[str]]:
            """The keys of this run's jobs in PostgreSQL per lane, in claim order."""
            rows = run(
                pg_pool.fetch(
                    "SELECT queue, payload::text AS payload FROM birddog.jobs WHERE job_id LIKE $1"
                    " ORDER BY created_at, job_id",
                    f"{self.run_id}-%",
                )
            )
            lanes: dict[tuple[str, str], list[str]] = {lane: [] for lane in LANES}
            for row in rows:
                payload = json.loads(row["payload"])
                lane = (payload["mail"]["from"]["agentId"], row["queue"])
                lanes[lane].append(payload["mail"]["key"])
            return lanes

        def quarantined(self) -> dict[str, str]:
            rows = run(spool_file(self.sender).quarantined(limit=10_000))
            return {str(row["key"]): str(row["reason"]) for row in rows}

        @invariant()
        def each_lane_in_order_and_nothing_twice(self) -> None:
            """PostgreSQL holds a prefix of each lane's accepted mail, each once, in order."""
            stored = self.stored()
            quarantined = self.quarantined()
            waiting = {row.key for row in run(spool_file(self.sender).waiting(limit=10_000))}
            for lane, keys in self.accepted.items():
                going = [key for key in keys if key not in self.doomed]
                assert stored[lane] == going[: len(stored[lane])], (lane, stored[lane], going)
                for key in keys:
                    assert key in waiting or key in quarantined or key in stored[lane], key
            assert set(quarantined) <= set(self.doomed), quarantined

        def teardown(self) -> None:
            """Database back, one forward: all in PostgreSQL once or quarantined with the reason."""
            try:
                run(proxy.up())
                self.down = False
                report = run(self.sender.forward(wait_s=10))
                assert report.complete, report
                assert run(spool_file(self.sender).waiting(limit=10_000)) == []
                stored = self.stored()
                for lane, keys in self.accepted.items():
                    assert stored[lane] == [key for key in keys if key not in self.doomed]
                quarantined = self.quarantined()
                assert set(quarantined) == set(self.doomed)
                for key, says in self.doomed.items():
                    assert says in quarantined[key], (key, quarantined[key])
            finally:
                run(self.opened.__aexit__(None, None, None))
                run(self.pool.close())

    return SpoolMachine


async def in_thread(work: Callable[[], None]) -> None:
    """Run blocking ``work`` on a thread while this loop serves its calls."""
    done: Awaitable[None] = asyncio.to_thread(work)
    await done


@pytest.mark.timeout(300)
async def test_every_accepted_mail_reaches_postgres_once_in_lane_order(
    database_url: str, pg_pool: Pool, tmp_path: Path
) -> None:
    """Through sends, forwards, crashes, damage and outages no mail is lost, doubled or reordered."""
    proxy = DatabaseProxy(database_url)
    await proxy.up()
    machine = make_machine(asyncio.get_running_loop(), proxy, pg_pool, tmp_path)
    try:
        await in_thread(
            lambda: run_state_machine_as_test(
                machine,
                settings=settings(
                    max_examples=EXAMPLES,
                    stateful_step_count=STEPS,
                    deadline=None,
                    database=None,
                    phases=NO_SHRINK,
                    suppress_health_check=[HealthCheck.too_slow],
                ),
            )
        )
    finally:
        await proxy.down()
