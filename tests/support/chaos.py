"""The fault run's machinery: its seeded plan, the processes it kills, the recipients that misbehave.

Everything random comes from one ``random.Random(seed)`` (the plan) or from a generator
seeded by ``(seed, reply key, post number)`` (each recipient answer), so a run can be
replayed with ``BIRDDOG_CHAOS_SEED`` whatever order the posts arrive in.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import struct
import subprocess
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, TypeVar

import asyncpg
from aiohttp import web

from birddog import (
    AgentAddress,
    AgentWork,
    Job,
    Mail,
    Outcome,
    Recovery,
    StoreUnavailable,
    agent_job,
    empty_reply_text,
)
from birddog.core.mail import reply_key
from birddog.http.inbox import Inbox, InboxRefused
from tests.support import answer_for
from tests.support.cli import BIRDDOG, ROOT
from tests.support.inbox import InboxServer
from tests.support.waiting import eventually

WINDOW_SIZE = 256
"""The rows a daemon holds at once (claimed, not yet stored): what one crash can repeat."""
T = TypeVar("T")

DATABASE_AWAY: tuple[type[BaseException], ...] = (
    StoreUnavailable,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    OSError,
    TimeoutError,
)
"""What a client sees while PostgreSQL restarts."""


# ---------------------------------------------------------------------------------------
# size and plan
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    """How big a fault run is.

    Attributes:
        name: ``full`` or ``reduced``.
        jobs: agent jobs enqueued (each settles with fan-out).
        replies_per_job: ``replyTo`` addresses per mail.
        recipients: recipient agents (one gone, one unknown, one held, the rest flaky).
        window_s: the chaos window: jobs arrive and faults strike within it.
        daemon_kills: SIGKILLs per drain daemon.
        db_restarts: ``pg_ctl restart -m immediate`` during the window.
        command_worker_kills: SIGKILLs of the command worker while an agent of it runs.
        settle_s: after the window, the deadline for every reply to end.
    """

    name: str
    jobs: int
    replies_per_job: int
    recipients: int
    window_s: float
    daemon_kills: int
    db_restarts: int
    settle_s: float
    command_worker_kills: int = 1

    @property
    def replies(self) -> int:
        """How many replies the jobs owe."""
        return self.jobs * self.replies_per_job


FULL = Size(
    "full", 1000, 5, 20, window_s=60, daemon_kills=3, db_restarts=2, settle_s=420,
    command_worker_kills=3,
)  # fmt: skip
REDUCED = Size("reduced", 100, 5, 20, window_s=14, daemon_kills=1, db_restarts=1, settle_s=45)

DAEMONS = 2
POST_TIMEOUT_S = 1.0
HANG_S = POST_TIMEOUT_S + 1.0

FAST_SETTINGS = {
    "BIRDDOG_METRICS_PORT": "0",
    "BIRDDOG_WORKER_METRICS_PORT": "0",
    "BIRDDOG_LOG_FORMAT": "json",
    "BIRDDOG_LOG_LEVEL": "info",
    "BIRDDOG_BASE_DELAY_S": "0.05",
    "BIRDDOG_MAX_DELAY_S": "0.5",
    "BIRDDOG_MAX_ATTEMPTS": "50",
    "BIRDDOG_POST_TIMEOUT_S": str(POST_TIMEOUT_S),
    "BIRDDOG_LEASE_S": "5",
    "BIRDDOG_BACKSTOP_S": "1",
    "BIRDDOG_SHUTDOWN_GRACE_S": "2",
    "BIRDDOG_MAX_DEFERRAL_S": "2",
    "BIRDDOG_JOB_LEASE_S": "2",
    "BIRDDOG_KILL_GRACE_S": "1",
    "BIRDDOG_WINDOW_SIZE": str(WINDOW_SIZE),
}
"""Retry fast, give up on a post after 1 s, take over a dead daemon's page after 5 s, and
recover a dead worker's job after 2 s and the 1 s kill grace; 50 attempts so 35% failures
never exhaust one."""


class Kind(StrEnum):
    """How a recipient behaves."""

    FLAKY = "flaky"  # the seeded mix of failures, hangs, 429s and acceptances
    FAST = "fast"  # accepts every post at once: a crash finds many accepted, unstored
    GONE = "gone"  # always 410
    UNKNOWN = "unknown"  # no route at all
    HELD = "held"  # held at the start, released mid-run, then flaky


CROWDED_SESSION = "s-crowded"

HANDLER_SESSIONS = (*(f"s-{index}" for index in range(10)), CROWDED_SESSION)
"""The sessions the Python handler's worker serves."""

COMMAND_SESSIONS = ("c-0", "c-1", "c-2")
"""The sessions a ``worker --command`` serves: a tenth of the jobs."""

BLOCK_MARK = "-block"
"""A command job whose first turn runs ``sh -c 'sleep 300 & sleep 300'``: its worker is
SIGKILLed mid-turn, and the recovered turn answers like any other."""

AGENT_SCRIPT = """\
log="$CHAOS_AGENT_TURNS"
echo "start $BIRDDOG_SESSION_ID $BIRDDOG_COMMAND_ID $(date +%s.%N) $$" >> "$log"
case "$BIRDDOG_COMMAND_ID" in
  *-block)
    if mkdir "$CHAOS_AGENT_MARKS/$BIRDDOG_COMMAND_ID" 2>/dev/null; then
      echo "blocked $BIRDDOG_SESSION_ID $BIRDDOG_COMMAND_ID $$" >> "$log"
      sh -c 'sleep 300 & sleep 300'
    fi;;
esac
sleep 0.02
echo "end $BIRDDOG_SESSION_ID $BIRDDOG_COMMAND_ID $(date +%s.%N) $$" >> "$log"
printf 'answer:%s' "$BIRDDOG_COMMAND_ID"
"""
"""What the command worker runs for each job (``sh agent.sh``): it stamps the start and
end of its turn in ``CHAOS_AGENT_TURNS`` (passed with ``--env``) and answers like the
Python handler."""

FAST_RECIPIENTS = 4
"""Recipients that accept at once, so a SIGKILL finds the window full of accepted posts."""

POISON_ROWS = 5
"""Rows written by SQL with a reply no BirdDog can read: each must die ``undecodable``."""
"""The session that gets a fifth of the jobs: its turns must still come one at a time."""

UNSTORABLE_RESULTS: dict[str, object] = {
    "nul": "nul \x00 inside",
    "surrogate": "lone \ud800",
    "huge": "x" * (1_048_576 + 1),
    "number": 42,
}
"""What the handler returns for a job whose command ends ``-unstorable-<kind>``."""

UNSTORABLE_MARK = "-unstorable-"


def unstorable_result(command: str) -> object | None:
    """The unstorable result a job's handler returns, or None for an ordinary job."""
    _, mark, kind = command.partition(UNSTORABLE_MARK)
    return UNSTORABLE_RESULTS[kind] if mark else None


@dataclass(frozen=True)
class JobSpec:
    """One job of the run and the replies it owes."""

    job: Job
    command: str
    mail_key: str
    reply_to: tuple[str, ...]

    @property
    def unstorable(self) -> bool:
        """Whether its handler returns a result that cannot be stored (it settles failed)."""
        return unstorable_result(self.command) is not None

    @property
    def content(self) -> str:
        """The content its replies carry."""
        if self.unstorable:
            return empty_reply_text(Outcome.FAILED)
        return answer_for(self.command)

    def reply_keys(self) -> list[tuple[str, str]]:
        """``(reply key, recipient agent id)`` for each ``replyTo`` entry."""
        return [(reply_key(self.mail_key, i), agent) for i, agent in enumerate(self.reply_to)]


@dataclass(frozen=True)
class Plan:
    """Everything the run does, drawn from one seed before it starts.

    Attributes:
        seed: the seed.
        size: the size.
        kinds: each recipient agent id and how it behaves.
        jobs: the jobs in enqueue order; the first is the one whose worker is killed.
        batches: ``(at_s, jobs)``: when each batch of jobs is enqueued.
        daemon_kills: ``(at_s, daemon index)`` of every SIGKILL.
        db_restarts: when PostgreSQL is restarted.
        release_at_s: when the held recipient is released.
        worker_kill_delay_s: how long after the blocking job starts its worker is killed.
        poison_at_s: when the poison rows are written.
    """

    seed: int
    size: Size
    kinds: dict[str, Kind]
    jobs: list[JobSpec]
    batches: list[tuple[float, list[JobSpec]]]
    daemon_kills: list[tuple[float, int]]
    db_restarts: list[float]
    release_at_s: float
    worker_kill_delay_s: float
    poison_at_s: float

    @property
    def poison_keys(self) -> list[str]:
        """The keys of the poison rows (to a flaky recipient; no job owes them)."""
        return [f"outbox:poison-{index}:reply:0" for index in range(POISON_ROWS)]

    @property
    def blocking(self) -> JobSpec:
        """The job whose worker is SIGKILLed while it runs."""
        return self.jobs[0]

    def agent(self, kind: Kind) -> str:
        """The (first) recipient of a kind."""
        return next(agent for agent, k in self.kinds.items() if k is kind)

    def expected(self) -> dict[str, str]:
        """Every reply key the jobs owe, and the recipient it goes to."""
        return {key: agent for spec in self.jobs for key, agent in spec.reply_keys()}


def make_plan(seed: int, size: Size) -> Plan:
    """Draw the whole run from ``seed``: jobs, reply lists, and when each fault strikes."""
    rng = random.Random(seed)
    agents = [f"r{index:02d}" for index in range(size.recipients)]
    kinds = dict.fromkeys(agents, Kind.FLAKY)
    kinds[agents[-1]] = Kind.UNKNOWN
    kinds[agents[-2]] = Kind.GONE
    kinds[agents[-3]] = Kind.HELD
    for agent in agents[:FAST_RECIPIENTS]:
        kinds[agent] = Kind.FAST
    flaky = [a for a, k in kinds.items() if k is Kind.FLAKY]
    target = "agent-under-load"
    jobs = []
    unstorable = list(UNSTORABLE_RESULTS)
    for index in range(size.jobs):
        session = CROWDED_SESSION if index % 5 == 3 else f"s-{index % 10}"
        if index % 10 == 6:
            session = COMMAND_SESSIONS[index // 10 % len(COMMAND_SESSIONS)]
        # Some keys carry SQL metacharacters: they must travel as data, never as SQL.
        mail_key = f"mail-{index:05d}" + (
            "'; DROP TABLE birddog.outbox; --" if index % 50 == 7 else ""
        )
        pool = flaky if index == 0 else agents
        reply_to = tuple(rng.sample(pool, size.replies_per_job))
        command = f"cmd-{index:05d}"
        if index % 10 == 6 and index // 10 < size.command_worker_kills:
            command += BLOCK_MARK
        if index % 25 == 12:
            command += UNSTORABLE_MARK + unstorable[(index // 25) % len(unstorable)]
        mail = Mail(
            key=mail_key,
            to=AgentAddress(agent_id=target, session_id=session),
            from_=AgentAddress(agent_id=rng.choice(agents), session_id="s-sender"),
            reply_to=[AgentAddress(agent_id=a, session_id=f"s-{a}") for a in reply_to],
            content=f"question {index}",
            created_at=1_767_225_600_000 + index,
        )
        recovery = Recovery(max_recoveries=1 if index == 0 else 5)
        work = AgentWork(
            job_id=f"job-{index:05d}",
            session_id=session,
            command_fact_id=command,
            recovery=recovery,
        )
        jobs.append(JobSpec(agent_job(work, mail), command, mail_key, reply_to))
    window = size.window_s
    batch_count = max(1, min(size.jobs, round(window * 2)))
    per_batch = -(-size.jobs // batch_count)
    batches = [
        (0.7 * window * i / batch_count, jobs[i * per_batch : (i + 1) * per_batch])
        for i in range(batch_count)
        if jobs[i * per_batch : (i + 1) * per_batch]
    ]
    daemon_kills = sorted(
        (at, daemon)
        for daemon in range(DAEMONS)
        for at in _spread(rng, size.daemon_kills, 0.1 * window, 0.95 * window, gap=1.5)
    )
    db_restarts = _spread(rng, size.db_restarts, 0.3 * window, 0.9 * window, gap=4.0)
    return Plan(
        seed=seed,
        size=size,
        kinds=kinds,
        jobs=jobs,
        batches=batches,
        daemon_kills=daemon_kills,
        db_restarts=db_restarts,
        release_at_s=rng.uniform(0.5, 0.7) * window,
        worker_kill_delay_s=rng.uniform(0.1, 1.0),
        poison_at_s=rng.uniform(0.2, 0.6) * window,
    )


def _spread(rng: random.Random, count: int, start: float, end: float, *, gap: float) -> list[float]:
    """``count`` random moments in ``[start, end]``, at least ``gap`` apart."""
    slack = max(0.0, (end - start) - gap * (count - 1))
    offsets = sorted(rng.uniform(0, slack) for _ in range(count))
    return [start + offset + gap * index for index, offset in enumerate(offsets)]


# ---------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------


def birddog_env(dsn: str, **extra: str) -> dict[str, str]:
    """A subprocess environment: this database, the fast settings, nothing inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BIRDDOG_", "CHAOS_"))}
    env.update(DATABASE_URL=dsn, **FAST_SETTINGS, **extra)
    return env


class Process:
    """A ``birddog`` subprocess this run started; its output goes to a log file.

    Only this object's pid is ever signalled.
    """

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.proc = subprocess.Popen(  # noqa: S603 - our own console script
            [BIRDDOG, *args], env=env, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def alive(self) -> bool:
        """Whether it is still running."""
        return self.proc.poll() is None

    def log(self) -> str:
        """Everything it wrote so far."""
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        """The end of its log, for failure messages."""
        return "\n".join(self.log().splitlines()[-lines:])

    async def started(self, event: str, *, timeout_s: float = 30) -> None:
        """Wait until its log shows ``event`` (``daemon_started``, ``worker_started``)."""
        await eventually(lambda: _ready(self, event), f"{self.name} {event}", within_s=timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash would, and reap it."""
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def terminate(self, timeout_s: float = 30) -> int:
        """SIGTERM, wait for a clean exit, and return the exit code (SIGKILL after the bound)."""
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return -signal.SIGKILL
        self._log.close()
        return code


async def _ready(process: Process, event: str) -> bool:
    if not process.alive():
        raise AssertionError(
            f"{process.name} exited with {process.proc.returncode}:\n{process.tail()}"
        )
    return f'"{event}"' in process.log()


# ---------------------------------------------------------------------------------------
# waiting
# ---------------------------------------------------------------------------------------


async def retrying(action: Callable[[], Awaitable[T]], *, timeout_s: float = 60, what: str) -> T:
    """Run a database action, again and again while PostgreSQL is away, up to a deadline."""
    return await eventually(
        action,
        what,
        until=lambda _: True,
        within_s=timeout_s,
        every_s=0.1,
        ignoring=DATABASE_AWAY,
    )


# ---------------------------------------------------------------------------------------
# recipients
# ---------------------------------------------------------------------------------------


class Answer(StrEnum):
    """What a recipient did with one post."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate accepted again"
    HTTP_500 = "500"
    RESET = "connection reset"
    ERROR_200 = 'error-shaped 200 {"error": "quota"}'
    HANG = "hang past the post timeout"
    RATE_LIMITED = "429 Retry-After: 1"
    GONE = "410"
    REFUSED = "refused: bad signature"


FLAKY_MIX: list[tuple[float, Answer]] = [
    (0.10, Answer.HTTP_500),
    (0.20, Answer.RESET),
    (0.30, Answer.ERROR_200),
    (0.35, Answer.HANG),
    (0.40, Answer.RATE_LIMITED),
    (1.00, Answer.ACCEPTED),
]
"""Cumulative odds of a flaky recipient's answer: 30% fail, 5% hang, 5% defer, 60% accept."""


@dataclass
class Recipients(InboxServer):
    """Every recipient's inbox on 127.0.0.1, verifying each post's signature.

    Attributes:
        seed: seeds each answer with the reply key and the post number.
        kinds: how each agent behaves.
        inboxes: the verifying inbox of each routed agent.
        expected: reply key -> (recipient, content) the reply must carry.
        held: agents whose route is held right now (a post to one is counted).
        posts: posts per reply key.
        accepted: acceptances per reply key (above 1: a duplicate delivery).
        answers: how many posts got each answer.
        mismatches: replies whose recipient, key or content was not what the job owed.
        posts_while_held: posts that reached a recipient while it was held.
    """

    seed: int
    kinds: dict[str, Kind]
    inboxes: dict[str, Inbox] = field(default_factory=dict)
    expected: dict[str, tuple[str, str]] = field(default_factory=dict)
    held: set[str] = field(default_factory=set)
    posts: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    answers: Counter[Answer] = field(default_factory=Counter)
    mismatches: list[str] = field(default_factory=list)
    posts_while_held: int = 0

    @property
    def duplicates(self) -> int:
        """Deliveries of a reply key that was already accepted."""
        return sum(count - 1 for count in self.accepted.values() if count > 1)

    def draw(self, key: str, attempt: int) -> Answer:
        """The seeded answer of a flaky recipient to the ``attempt``-th post of ``key``."""
        roll = random.Random(f"{self.seed}:{key}:{attempt}").random()
        return next(answer for bound, answer in FLAKY_MIX if roll < bound)

    async def _view(self, request: web.Request) -> web.StreamResponse:
        agent = request.match_info["agent"]
        body = await request.read()
        try:
            received = self.inboxes[agent].receive(request.headers, body)
        except (KeyError, InboxRefused):
            self.answers[Answer.REFUSED] += 1
            return web.json_response({"accepted": False, "error": "refused"}, status=401)
        reply, key = received.reply, received.webhook_id
        self.posts[key] += 1
        if agent in self.held:
            self.posts_while_held += 1
        owed = self.expected.get(key)
        if owed != (reply.to.agent_id, reply.content) or reply.to.agent_id != agent:
            self.mismatches.append(f"{key}: got {reply.to.agent_id}/{reply.content!r}, owed {owed}")
        if self.kinds[agent] is Kind.GONE:
            self.answers[Answer.GONE] += 1
            return web.json_response({"error": "gone"}, status=410)
        if self.accepted[key]:
            answer = Answer.DUPLICATE
        elif self.kinds[agent] is Kind.FAST:
            answer = Answer.ACCEPTED
        else:
            answer = self.draw(key, self.posts[key])
        self.answers[answer] += 1
        return await self._answer(request, key, answer)

    async def _answer(self, request: web.Request, key: str, answer: Answer) -> web.StreamResponse:
        if answer in (Answer.ACCEPTED, Answer.DUPLICATE):
            self.accepted[key] += 1
            return web.json_response({"accepted": True})
        if answer is Answer.HTTP_500:
            return web.json_response({"error": "internal"}, status=500)
        if answer is Answer.ERROR_200:
            return web.json_response({"error": "quota"})
        if answer is Answer.RATE_LIMITED:
            return web.json_response(
                {"error": "slow down"}, status=429, headers={"Retry-After": "1"}
            )
        if answer is Answer.HANG:
            await asyncio.sleep(HANG_S)  # the sender has given up and closed the connection
            return web.json_response({"error": "too late"}, status=500)
        # A reset: RST instead of an answer.
        transport = request.transport
        assert transport is not None
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
        return web.Response(status=500)


def expected_contents(plan: Plan) -> dict[str, tuple[str, str]]:
    """Each reply key of the plan -> the recipient and the content it must carry."""
    return {key: (agent, spec.content) for spec in plan.jobs for key, agent in spec.reply_keys()}
