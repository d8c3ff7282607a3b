"""The fault run: replies survive crashed daemons, a crashed database and a crashed worker.

Real ``birddog run`` and ``birddog worker`` processes, a PostgreSQL server this test owns
(so it can crash it with ``pg_ctl restart -m immediate``), and recipients on 127.0.0.1
that verify every signature and misbehave on a seeded schedule. Jobs keep arriving while
two daemons are SIGKILLed and restarted, the database crashes, a worker is killed in the
middle of a job and a held recipient is released. A fifth of the jobs crowd into one
session, some handlers return results that cannot be stored, a few recipients accept
everything at once (so a crash finds the window full of accepted posts), and poison rows
(a reply no BirdDog can read, written by SQL) land mid-run. A tenth of the jobs go to a
``worker --command`` whose agents stamp their turns; it is SIGKILLed while an agent runs
``sh -c 'sleep 300 & sleep 300'``, and every process under it must be gone within the kill
grace, no turn of a session may start before the last one's processes died, and no
process of any turn may be left at the end. At the end every reply key has
exactly one receipt or one dead letter whose reason matches its recipient, every poison
row died ``undecodable``, duplicates stay within what was in flight at the crashes (at
most a window per crash), no two turns of one session overlapped, every unstorable result
settled ``failed`` after one run, and no daemon or worker exited on its own.

Reduced size by default (it runs in ``make test``); ``make chaos`` sets
``BIRDDOG_CHAOS_FULL=1`` for 5,000 replies from 1,000 jobs. ``BIRDDOG_CHAOS_SEED`` replays
a run.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from birddog.clock import SystemClock
from birddog.http.inbox import Inbox
from birddog.postgres import migrate
from birddog.postgres.embedded import EmbeddedPostgres
from birddog.postgres.jobs import enqueue_accepted_job
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from birddog.supervisor import descendants
from tests.support import eventually, process_running
from tests.support.chaos import (
    AGENT_SCRIPT,
    COMMAND_SESSIONS,
    CROWDED_SESSION,
    DAEMONS,
    DATABASE_AWAY,
    FAST_SETTINGS,
    FULL,
    HANDLER_SESSIONS,
    REDUCED,
    WINDOW_SIZE,
    Answer,
    JobSpec,
    Kind,
    Plan,
    Process,
    Recipients,
    birddog_env,
    expected_contents,
    make_plan,
    retrying,
)

SIZE = FULL if os.environ.get("BIRDDOG_CHAOS_FULL") == "1" else REDUCED
KILL_GRACE_S = float(FAST_SETTINGS["BIRDDOG_KILL_GRACE_S"])
SEED = int(os.environ.get("BIRDDOG_CHAOS_SEED", "20261129"))

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(int(SIZE.window_s + SIZE.settle_s + 180)),
]


class Run:
    """The processes of one fault run and what happened to them.

    Attributes:
        daemons: the drain daemon currently running in each slot.
        worker: the worker currently running.
        started: every process ever started (each is stopped by its pid at the end).
        daemon_kills: SIGKILLs of daemons so far.
        db_restarts: database crashes so far.
        worker_kills: SIGKILLs of a worker mid-job so far.
        command_worker: the ``worker --command`` currently running.
        command_kills: SIGKILLs of the command worker while an agent of it ran.
        killed_turns: ``(session, pid of the agent, when its last process was seen dead)``
            of each turn running when its worker was killed.
        orphans: processes under a killed command worker still running after the grace.
        in_flight: keys under a page's claim, their outcome not stored, just after a crash:
            the only replies a crash may have posted without recording it, so the only
            ones a recipient may get twice.
        in_flight_counts: how many keys were in flight at each crash.
    """

    def __init__(self, plan: Plan, dsn: str, logs: Path) -> None:
        self.plan = plan
        self.dsn = dsn
        self.logs = logs
        self.marker = logs / "blocking-job-started"
        self.turns = logs / "turns.tsv"
        self.agent_turns = logs / "agent-turns.log"
        self.agent_marks = logs / "marks"
        self.agent_marks.mkdir()
        (logs / "agent.sh").write_text(AGENT_SCRIPT)
        self.started: list[Process] = []
        self.daemons = [self._daemon(slot) for slot in range(DAEMONS)]
        self.worker = self._worker()
        self.command_worker = self._command_worker()
        self.command_kills = 0
        self.killed_turns: list[tuple[str, int, float]] = []
        self.orphans: list[int] = []
        self.turn_processes: list[int] = []
        self.daemon_kills = 0
        self.db_restarts = 0
        self.worker_kills = 0
        self.in_flight: set[str] = set()
        self.in_flight_counts: list[int] = []

    def _start(self, name: str, args: list[str], **env: str) -> Process:
        process = Process(
            f"{name}-{len(self.started)}", args, birddog_env(self.dsn, **env), self.logs
        )
        self.started.append(process)
        return process

    def _daemon(self, slot: int) -> Process:
        return self._start(f"daemon{slot}", ["run"])

    def _worker(self) -> Process:
        return self._start(
            "worker",
            [
                "worker",
                "--handler",
                "tests.chaos.handlers:answer",
                *(arg for session in HANDLER_SESSIONS for arg in ("--queue", session)),
            ],
            CHAOS_BLOCK_COMMAND=self.plan.blocking.command,
            CHAOS_MARKER=str(self.marker),
            CHAOS_TURNS=str(self.turns),
        )

    def _command_worker(self) -> Process:
        return self._start(
            "command-worker",
            [
                "worker", "--command", f"sh {self.logs / 'agent.sh'}",
                "--env", "CHAOS_AGENT_TURNS", "--env", "CHAOS_AGENT_MARKS",
                *(arg for session in COMMAND_SESSIONS for arg in ("--queue", session)),
            ],
            CHAOS_AGENT_TURNS=str(self.agent_turns),
            CHAOS_AGENT_MARKS=str(self.agent_marks),
        )  # fmt: skip

    def running(self) -> list[Process]:
        """The processes that should be alive now."""
        return [*self.daemons, self.worker, self.command_worker]

    def check_alive(self) -> None:
        """Fail if a process this run did not kill has died on its own."""
        for process in self.running():
            if not process.alive():
                raise AssertionError(
                    f"{process.name} died on its own (exit {process.proc.returncode}):\n"
                    f"{process.tail()}"
                )

    async def ready(self) -> None:
        """Wait until every running process has started its loop."""
        for daemon in self.daemons:
            await daemon.started("daemon_started")
        await self.worker.started("worker_started")
        await self.command_worker.started("worker_started")

    def kill_daemon(self, slot: int) -> None:
        """SIGKILL the daemon in ``slot`` and start a new one in its place."""
        self.check_alive()
        self.daemons[slot].kill()
        self.daemon_kills += 1
        self.daemons[slot] = self._daemon(slot)

    def kill_worker(self) -> None:
        """SIGKILL the worker (mid-job) and start a second one."""
        self.worker.kill()
        self.worker_kills += 1
        self.worker = self._worker()

    async def kill_command_worker(self) -> None:
        """SIGKILL the command worker mid-turn, watch its turns die, start another one."""
        doomed = descendants(self.command_worker.pid)
        self.turn_processes.extend(doomed)
        self.command_worker.kill()
        self.command_kills += 1
        killed_at = time.monotonic()
        last_seen = time.time()
        while alive := [pid for pid in doomed if process_running(pid)]:
            if time.monotonic() - killed_at > KILL_GRACE_S + 1.0:
                self.orphans.extend(alive)
                break
            last_seen = time.time()
            await asyncio.sleep(0.01)
        # Every turn that never wrote its end line and was not cut before was cut now: the
        # only command worker is dead, and the next one has not started yet.
        cut_before = {pid for _, pid, _ in self.killed_turns}
        text = self.agent_turns.read_text() if self.agent_turns.exists() else ""
        self.killed_turns.extend(
            (session, pid, last_seen)
            for session, pid, _, end in agent_turns(text)
            if end is None and pid not in cut_before
        )
        self.command_worker = self._command_worker()

    def kill_all(self) -> None:
        """SIGKILL whatever is still running, by pid, and close every log."""
        for process in self.started:
            process.kill()


async def _tune(dsn: str) -> None:
    # fsync only: a process crash keeps what was written to the OS. synchronous_commit
    # stays on, or a crash could lose commits the daemons were told had happened.
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ALTER SYSTEM SET fsync = off")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


async def _enqueue(pool: Pool, batch: list[JobSpec]) -> None:
    async with pool.acquire() as conn, conn.transaction():
        for spec in batch:
            # A batch retried after a crash mid-commit is an identical replay: accepted.
            await enqueue_accepted_job(conn, spec.job)


async def _in_flight(pool: Pool, *, database_crashed: bool) -> set[str]:
    """Keys a page had claimed before the crash and whose outcome was never stored.

    Read just after the crash: nobody can take such a page over before its lease (5 s)
    ends, so its keys are still under their claim. Claims made after a database crash are
    left out (the server's start time marks it); after a daemon kill, the other daemon's
    page in flight is counted too.
    """
    rows = await pool.fetch(
        "SELECT key FROM birddog.outbox WHERE claim_token IS NOT NULL"
        " AND updated_at < CASE WHEN $1 THEN pg_postmaster_start_time() ELSE now() END",
        database_crashed,
    )
    return {row["key"] for row in rows}


async def _poison(pool: Pool, keys: list[str], agent: str) -> None:
    """Write rows whose stored reply no BirdDog can read (a hand edit gone wrong)."""
    await pool.execute(
        "INSERT INTO birddog.outbox (key, recipient_agent_id, recipient_session_id,"
        " in_reply_to, command_id, outcome, reply, state, due_at, created_at)"
        " SELECT k, $2, 's-' || $2, 'poison', 'cmd-poison', 'completed',"
        " '{\"content\": 42}'::jsonb, 'pending', now(), now()"
        " FROM unnest($1::text[]) AS k ON CONFLICT (key) DO NOTHING",
        keys,
        agent,
    )


def agent_turns(text: str) -> list[tuple[str, int, float, float | None]]:
    """The command agents' turns: ``(session, pid, start, end)``; end None: never ended."""
    turns: dict[int, tuple[str, float, float | None]] = {}
    for line in text.splitlines():
        what, session, _command, *rest = line.split()
        if what == "start":
            turns[int(rest[1])] = (session, float(rest[0]), None)
        elif what == "end" and int(rest[1]) in turns:
            turns[int(rest[1])] = (session, turns[int(rest[1])][1], float(rest[0]))
    return [(session, pid, start, end) for pid, (session, start, end) in turns.items()]


def _blocked(path: Path) -> int:
    """How many command agents blocked so far (a first turn of a blocking job)."""
    text = path.read_text() if path.exists() else ""
    return sum(line.startswith("blocked ") for line in text.splitlines())


async def _job_row(pool: Pool, job_id: str) -> Any:
    return await pool.fetchrow(
        "SELECT state, outcome, recovery_count, worker_id FROM birddog.jobs WHERE job_id = $1",
        job_id,
    )


async def _chaos(
    *,
    run: Run, plan: Plan, pool: Pool, routes: PostgresRoutes, server: EmbeddedPostgres,
    recipients: Recipients,
) -> None:  # fmt: skip
    """Enqueue the jobs and strike every planned fault on schedule."""
    start = time.monotonic()

    async def at(moment_s: float) -> None:
        # Spacing the planned faults out in time, not waiting for an outcome.
        await asyncio.sleep(max(0.0, start + moment_s - time.monotonic()))

    async def produce() -> None:
        for moment_s, batch in plan.batches:
            await at(moment_s)
            await retrying(functools.partial(_enqueue, pool, batch), what="an enqueue")

    async def strike() -> None:
        held = plan.agent(Kind.HELD)
        events: list[tuple[float, str, int]] = [
            *((moment, "kill", slot) for moment, slot in plan.daemon_kills),
            *((moment, "database", 0) for moment in plan.db_restarts),
            (plan.release_at_s, "release", 0),
            (plan.poison_at_s, "poison", 0),
        ]
        for moment_s, what, slot in sorted(events):
            await at(moment_s)
            run.check_alive()
            if what == "poison":
                poison = functools.partial(_poison, pool, plan.poison_keys, plan.agent(Kind.FLAKY))
                await retrying(poison, what="the poison rows")
                continue
            if what == "release":
                recipients.held.discard(held)  # before the release: no false "held" post
                await retrying(lambda: routes.release(held), what="the release")
                continue
            if what == "kill":
                run.kill_daemon(slot)
            else:
                await asyncio.to_thread(server.restart, "immediate")
                run.db_restarts += 1
            lost = await retrying(
                functools.partial(_in_flight, pool, database_crashed=what == "database"),
                what="the claims",
            )
            run.in_flight |= lost
            run.in_flight_counts.append(len(lost))

    async def blocking_job_running() -> bool:
        return run.marker.exists()

    async def kill_command_worker_mid_turn() -> None:
        # Each blocking job's first turn blocks: kill its worker while it runs, until every
        # one of them has blocked once (one kill may catch several).
        planned = plan.size.command_worker_kills
        blocked = 0
        while blocked < planned:

            async def another_blocks(seen: int = blocked) -> bool:
                return _blocked(run.agent_turns) > seen

            await eventually(another_blocks, "a command agent to block", within_s=60)
            await asyncio.sleep(plan.worker_kill_delay_s)  # a random moment into the turn
            run.check_alive()
            blocked = _blocked(run.agent_turns)
            await run.kill_command_worker()
            await run.command_worker.started("worker_started")

    async def kill_worker_mid_job() -> None:
        await eventually(blocking_job_running, "the blocking job to start", within_s=30)
        await asyncio.sleep(plan.worker_kill_delay_s)  # a random moment into the job
        row = await retrying(lambda: _job_row(pool, plan.blocking.job.job_id), what="the job")
        assert row["state"] == "running", f"the blocking job is {row['state']}, not running"
        assert row["worker_id"].endswith(f":{run.worker.pid}"), "another worker runs it"
        run.kill_worker()

    await asyncio.wait_for(
        asyncio.gather(produce(), strike(), kill_worker_mid_job(), kill_command_worker_mid_turn()),
        plan.size.window_s + 90,
    )


async def _all_ended(run: Run, pool: Pool, jobs: int) -> bool:
    run.check_alive()
    try:
        row = await pool.fetchrow(
            "SELECT (SELECT count(*) FROM birddog.jobs) AS jobs,"
            " (SELECT count(*) FROM birddog.jobs WHERE state <> 'settled') AS open,"
            " (SELECT count(*) FROM birddog.outbox WHERE state = 'pending') AS pending"
        )
    except DATABASE_AWAY:
        return False
    assert row is not None
    return bool(row["jobs"] == jobs and row["open"] == 0 and row["pending"] == 0)


async def test_no_reply_vanishes_under_crashes_restarts_and_bad_recipients() -> None:
    """Every reply ends as exactly one receipt or one dead letter of the right reason."""
    plan = make_plan(SEED, SIZE)
    root = Path(tempfile.mkdtemp(prefix="bd-chaos-"))
    logs = root / "logs"
    logs.mkdir()
    server = EmbeddedPostgres(root)
    recipients = Recipients(seed=SEED, kinds=plan.kinds)
    recipients.expected = expected_contents(plan)
    run: Run | None = None
    pool: Pool | None = None
    wall = time.monotonic()
    try:
        dsn = await asyncio.wait_for(asyncio.to_thread(server.start), 60)
        await _tune(dsn)
        await asyncio.wait_for(migrate(dsn), 60)
        pool = await create_pool(dsn, max_size=4)
        routes = PostgresRoutes(pool, clock=SystemClock())
        await recipients.start()
        for agent, kind in plan.kinds.items():
            if kind is not Kind.UNKNOWN:
                route = await routes.add(agent, recipients.url_for(agent))
                assert route.secret is not None
                recipients.inboxes[agent] = Inbox(route.secret)
        held = plan.agent(Kind.HELD)
        await routes.hold(held)
        recipients.held.add(held)

        run = Run(plan, dsn, logs)
        await run.ready()
        chaos_started = time.monotonic()
        await _chaos(
            run=run, plan=plan, pool=pool, routes=routes, server=server, recipients=recipients
        )
        await eventually(
            lambda: _all_ended(run, pool, len(plan.jobs)),
            "every job settled and no reply pending",
            within_s=plan.size.settle_s,
            every_s=0.25,
        )
        elapsed = time.monotonic() - chaos_started
        await run.ready()  # a daemon restarted at the very end must not die of SIGTERM at boot
        codes = {process.name: process.terminate() for process in run.running()}
        assert all(code == 0 for code in codes.values()), codes
        await _check_and_report(
            plan=plan, pool=pool, recipients=recipients, run=run, elapsed_s=elapsed,
            wall_s=time.monotonic() - wall,
        )  # fmt: skip
    except BaseException:
        if run is not None:
            for process in run.started:
                print(f"----- {process.name} (pid {process.pid}) -----\n{process.tail(15)}")
        raise
    finally:
        if run is not None:
            run.kill_all()
        await recipients.stop()
        if pool is not None:
            await asyncio.wait_for(pool.close(), 10)
        await asyncio.to_thread(server.stop, "immediate")
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Turns:
    """The turns the handlers recorded: ``(command, began, ended)`` by session and command."""

    by_session: dict[str, list[tuple[str, float, float]]] = field(default_factory=dict)
    by_command: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @property
    def overlapping(self) -> list[tuple[str, str, str]]:
        """``(session, command, next command)`` for each turn that began before the last ended."""
        found = []
        for session, turns in self.by_session.items():
            ordered = sorted(turns, key=lambda turn: turn[1])
            for (first, _, ended), (second, began, _) in pairwise(ordered):
                if began < ended:
                    found.append((session, first, second))
        return found


def _command_turns(run: Run) -> tuple[int, list[tuple[str, int, int]]]:
    """How many command turns ran, and ``(session, pid, next pid)`` of each overlap.

    A turn cut by its worker's SIGKILL ends when its last process was seen dead.
    """
    killed = {pid: dead for _, pid, dead in run.killed_turns}
    by_session: dict[str, list[tuple[float, float, int]]] = {}
    for session, pid, start, end in agent_turns(run.agent_turns.read_text()):
        finish = end if end is not None else killed.get(pid)
        assert finish is not None, f"turn {pid} of {session} neither ended nor was killed"
        by_session.setdefault(session, []).append((start, finish, pid))
    overlaps = [
        (session, first[2], second[2])
        for session, turns in by_session.items()
        for first, second in pairwise(sorted(turns))
        if second[0] < first[1]
    ]
    return sum(map(len, by_session.values())), overlaps


def _turns(path: Path) -> Turns:
    turns = Turns()
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    for line in text.splitlines():
        session, command, began, ended = line.split("\t")
        turns.by_session.setdefault(session, []).append((command, float(began), float(ended)))
        turns.by_command.setdefault(command, []).append((float(began), float(ended)))
    return turns


async def _check_and_report(
    *, plan: Plan, pool: Pool, recipients: Recipients, run: Run, elapsed_s: float, wall_s: float
) -> None:
    """Assert the end state and print the figures."""
    rows = {
        r["key"]: r for r in await pool.fetch("SELECT key, state, dead_reason FROM birddog.outbox")
    }
    receipts = {r["key"] for r in await pool.fetch("SELECT key FROM birddog.receipts")}
    expected = plan.expected()
    dead_by_reason = Counter(str(r["dead_reason"]) for r in rows.values() if r["state"] == "dead")
    want = {Kind.GONE: "dead gone", Kind.UNKNOWN: "dead unknown_recipient"}
    got = {
        key: f"dead {row['dead_reason']}" if row["state"] == "dead" else row["state"]
        for key, row in rows.items()
    }
    got |= dict.fromkeys(receipts, "receipt")
    duplicates_bound = WINDOW_SIZE * (run.daemon_kills + DAEMONS * run.db_restarts)
    turns = _turns(run.turns)
    command_turns, command_overlaps = _command_turns(run)
    agents = [pid for _, pid, _, _ in agent_turns(run.agent_turns.read_text())]
    left = [pid for pid in {*run.turn_processes, *agents} if process_running(pid)]
    answers = ", ".join(
        f"{answer.value} {count}" for answer, count in recipients.answers.most_common()
    )
    print(
        f"\nfault run ({plan.size.name}, seed {plan.seed}): {len(expected)} replies from "
        f"{len(plan.jobs)} settled jobs to {plan.size.recipients} recipients\n"
        f"  receipts {len(receipts)}; dead letters {sum(dead_by_reason.values())} "
        f"(poison rows {len(plan.poison_keys)}) "
        f"({', '.join(f'{reason} {n}' for reason, n in sorted(dead_by_reason.items()))})\n"
        f"  duplicates {recipients.duplicates} (in flight at the crashes: "
        f"{'+'.join(map(str, run.in_flight_counts))}; bound {duplicates_bound}); "
        f"posts {sum(recipients.posts.values())}: {answers}\n"
        f"  restarts survived: {run.daemon_kills} daemon SIGKILLs, {run.db_restarts} PostgreSQL "
        f"immediate restarts, {run.worker_kills} worker SIGKILL mid-job\n"
        f"  wall time {wall_s:.1f} s ({elapsed_s:.1f} s from the first job to the last reply)\n"
        f"  turns {sum(map(len, turns.by_session.values()))}, "
        f"{len(turns.by_session.get(CROWDED_SESSION, []))} of them in {CROWDED_SESSION}, "
        f"{len(turns.overlapping)} overlapping; "
        f"unstorable results {sum(spec.unstorable for spec in plan.jobs)}, settled failed\n"
        f"  command agents: {command_turns} turns, {run.command_kills} worker SIGKILLs "
        f"mid-turn ({len(run.killed_turns)} turns cut, {len(run.turn_processes)} processes "
        f"under the killed workers), {len(run.orphans)} alive past the kill grace, "
        f"{len(left)} left at the end, {len(command_overlaps)} overlapping turns"
    )

    assert not set(rows) & receipts, "a key is both a row and a receipt"
    poisoned = {key: got.pop(key, "missing") for key in plan.poison_keys}
    assert set(poisoned.values()) == {"dead undecodable"}, poisoned
    assert set(got) == set(expected), (
        f"missing {sorted(set(expected) - set(got))[:5]}, extra {sorted(set(got) - set(expected))[:5]}"
    )
    wrong = [
        (key, got[key])
        for key, agent in expected.items()
        if got[key] != want.get(plan.kinds[agent], "receipt")
    ]
    assert not wrong, f"{len(wrong)} keys ended wrong, e.g. {wrong[:5]}"
    assert set(recipients.accepted) == receipts, "a receipt without an acceptance, or the reverse"
    assert not recipients.mismatches, recipients.mismatches[:5]
    assert recipients.answers[Answer.REFUSED] == 0, "a post failed its signature check"
    assert recipients.posts_while_held == 0, "a held recipient was posted to"
    duplicated = {key for key, count in recipients.accepted.items() if count > 1}
    assert duplicated <= run.in_flight, (
        f"duplicates not in flight at a crash: {sorted(duplicated - run.in_flight)[:5]}"
    )
    assert recipients.duplicates <= min(duplicates_bound, sum(run.in_flight_counts))

    jobs = {
        r["job_id"]: r
        for r in await pool.fetch(
            "SELECT job_id, outcome, recovery_count, worker_id, diagnostic FROM birddog.jobs"
        )
    }
    unstorable = [spec for spec in plan.jobs if spec.unstorable]
    assert Counter(r["outcome"] for r in jobs.values()) == {
        "completed": len(plan.jobs) - len(unstorable),
        "failed": len(unstorable),
    }
    for spec in unstorable:
        row = jobs[spec.job.job_id]
        assert (row["outcome"], row["diagnostic"][:16]) == ("failed", "handler returned")
        # The handler never runs again for it; only a worker killed mid-job reruns one.
        assert 1 <= len(turns.by_command[spec.command]) <= row["recovery_count"] + 1, spec.command
    assert turns.overlapping == [], f"turns of one session overlapped: {turns.overlapping[:3]}"
    assert run.command_kills >= 1, "the command worker was never killed mid-turn"
    assert run.killed_turns, "no command agent was running when its worker was killed"
    assert run.orphans == [], f"processes outlived their killed worker: {run.orphans}"
    assert left == [], f"processes of killed turns still run: {left}"
    assert command_overlaps == [], f"command turns of one session overlapped: {command_overlaps}"
    blocking = jobs[plan.blocking.job.job_id]
    assert blocking["recovery_count"] == 1, "the killed worker's job was not recovered once"
    assert blocking["worker_id"].endswith(f":{run.worker.pid}"), "not finished by the second worker"
    assert all(got[key] == "receipt" for key, _agent in plan.blocking.reply_keys())
    assert run.worker_kills == 1
    assert run.daemon_kills == DAEMONS * plan.size.daemon_kills
    assert run.db_restarts == plan.size.db_restarts
