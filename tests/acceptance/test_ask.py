"""``birddog ask`` from the shell: answered, failed, timed out, replayed, refused.

The asked agent is a ``birddog worker --command`` process, the question and the answer go
through PostgreSQL, and the asker is a ``birddog ask`` process whose exit status a script
can trust: 0 answered, 1 not completed, 2 no reply yet (still owed), 3 nothing asked.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
from collections.abc import Callable

import asyncpg
import pytest

from birddog.clock import SystemClock
from birddog.http.inbox import Inbox
from birddog.postgres.pool import Pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import eventually, until_listening
from tests.support.cli import BIRDDOG, ROOT, Daemon, Finished, cli, cli_env, run_to_end
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness

ASKER = "asker:s-ask"
TARGET = "upper:s-upper"


async def run_ask(
    database_url: str, *args: str, stdin: bytes | None = None, timeout_s: float = 90
) -> Finished:
    """Run ``birddog ask ARGS`` with ``stdin`` (default: none at all) to its end."""
    return await run_to_end(
        ["ask", *args], env=cli_env(database_url), stdin=stdin, timeout_s=timeout_s
    )


async def job_count(pool: Pool) -> int:
    count: int = await pool.fetchval("SELECT count(*) FROM birddog.jobs")
    return count


async def until_a_job_is_queued(pool: Pool) -> None:
    await eventually(
        lambda: pool.fetchval("SELECT count(*) FROM birddog.jobs WHERE state = 'queued'"),
        "the ask to enqueue its job",
        within_s=60,
    )


@pytest.fixture
def mailbox_delivery(daemons: Callable[..., Daemon]) -> Daemon:
    """A drain daemon: it delivers replies owed to mailbox routes into the mailbox."""
    return daemons()


@pytest.fixture
async def upper(pg_pool: Pool) -> None:
    """The asked agent is known: it has a route (a mailbox, as a command agent needs none)."""
    await PostgresRoutes(pg_pool, clock=SystemClock()).add("upper", kind="mailbox")


@pytest.mark.usefixtures("upper", "mailbox_delivery")
async def test_an_ask_answered_by_a_command_worker(database_url: str, pg_pool: Pool) -> None:
    """The command's output is printed and the exit status is 0; the question came on stdin."""
    asking = asyncio.create_task(
        run_ask(database_url, "--to", TARGET, "--from", ASKER, stdin=b"what is due?")
    )
    await until_a_job_is_queued(pg_pool)
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    answered = await asking
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == "WHAT IS DUE?\n"
    assert "asked as key ask-" in answered.stderr
    assert "its replies now go to its mailbox" in answered.stderr
    read = await pg_pool.fetchval("SELECT read_at IS NOT NULL FROM birddog.mailbox")
    assert read is True


@pytest.mark.usefixtures("upper", "mailbox_delivery")
async def test_a_mailbox_delivery_is_receipted_and_visible_in_sql(
    database_url: str, pg_pool: Pool
) -> None:
    """The reply the daemon put in the mailbox has its receipt; both are plain rows in SQL."""
    args = ("--to", TARGET, "--from", ASKER, "--key", "sql-1", "--timeout", "60", "hello")
    asking = asyncio.create_task(run_ask(database_url, *args))
    await until_a_job_is_queued(pg_pool)
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    assert (await asking).returncode == 0
    receipt = await pg_pool.fetchrow(
        "SELECT recipient_agent_id, recipient_session_id, outcome, attempts "
        "FROM birddog.receipts WHERE key = 'outbox:sql-1:reply:0'"
    )
    assert receipt is not None
    assert dict(receipt) == {
        "recipient_agent_id": "asker",
        "recipient_session_id": "s-ask",
        "outcome": "completed",
        "attempts": 1,
    }
    row = await pg_pool.fetchrow(
        "SELECT agent_id, session_id, in_reply_to, outcome, reply->>'content' AS content, "
        "read_at IS NOT NULL AS read FROM birddog.mailbox WHERE key = 'outbox:sql-1:reply:0'"
    )
    assert row is not None
    assert dict(row) == {
        "agent_id": "asker",
        "session_id": "s-ask",
        "in_reply_to": "sql-1",
        "outcome": "completed",
        "content": "HELLO",
        "read": True,
    }
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0


@pytest.mark.usefixtures("upper", "mailbox_delivery")
async def test_an_ask_to_a_failing_command_exits_1_with_the_diagnostic(
    database_url: str, pg_pool: Pool
) -> None:
    """A command that exits 3 makes the ask exit 1, the outcome and diagnostic on stderr."""
    asking = asyncio.create_task(run_ask(database_url, "--to", TARGET, "--from", ASKER, "hi"))
    await until_a_job_is_queued(pg_pool)
    command = "sh -c 'echo cannot reach the model >&2; exit 3'"
    worked = await cli(database_url, "worker", "--command", command, "--once")
    assert worked.returncode == 0, worked.stderr
    failed = await asking
    assert failed.returncode == 1
    assert failed.stdout == ""
    assert "ended failed: CommandFailed: exit status 3: cannot reach the model" in failed.stderr


@pytest.mark.usefixtures("upper", "mailbox_delivery")
async def test_an_ask_that_times_out_exits_2_and_the_reply_lands_later(
    database_url: str, pg_pool: Pool
) -> None:
    """No reply in time: exit 2 naming the key; the late reply then shows in birddog inbox."""
    late = await run_ask(
        database_url, "--to", TARGET, "--from", ASKER, "--key", "slow-1", "--timeout", "1", "hi"
    )
    assert late.returncode == 2
    assert late.stdout == ""
    assert "slow-1" in late.stderr
    assert "still owed" in late.stderr
    assert "birddog inbox asker:s-ask" in late.stderr
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    await eventually(
        lambda: pg_pool.fetchval("SELECT count(*) FROM birddog.mailbox"),
        "the reply in the mailbox",
        within_s=60,
    )
    listed = await cli(database_url, "inbox", ASKER, "--json")
    [entry] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (entry["inReplyTo"], entry["content"], entry["outcome"]) == ("slow-1", "HI", "completed")
    # Asking again with the key waits for the same reply, which is there now.
    again = await run_ask(database_url, "--to", TARGET, "--from", ASKER, "--key", "slow-1", "hi")
    assert (again.returncode, again.stdout) == (0, "HI\n")
    assert "was asked before" in again.stderr


@pytest.mark.usefixtures("upper")
async def test_two_asks_with_the_same_key_make_one_job(database_url: str, pg_pool: Pool) -> None:
    """The second ask with a key is a replay of the first: still one job."""
    args = ("--to", TARGET, "--from", ASKER, "--key", "same-1", "--timeout", "0.5", "hello")
    first, second = [await run_ask(database_url, *args) for _ in range(2)]
    assert (first.returncode, second.returncode) == (2, 2)
    assert "was asked before" in second.stderr
    assert await job_count(pg_pool) == 1
    other = await run_ask(database_url, "--to", TARGET, "--from", ASKER, "--key", "same-1", "bye")
    assert other.returncode == 3
    assert "different content" in other.stderr
    assert await job_count(pg_pool) == 1


@pytest.mark.usefixtures("upper")
@pytest.mark.parametrize(
    ("args", "stdin", "says"),
    [
        (["--to", "nobody:s-x", "--from", ASKER, "hi"], None, "unknown agent session nobody:s-x"),
        (["--to", TARGET, "--from", ASKER], b"", "stdin was empty"),
        (["--to", "no-colon", "--from", ASKER, "hi"], None, "AGENT_ID:SESSION_ID"),
        (["--to", TARGET, "hi"], None, "Missing option '--from'"),
        (["--to", TARGET, "--from", ASKER, "--timeout", "-1", "hi"], None, "--timeout"),
    ],
)
async def test_refusals_exit_3_in_one_line_with_nothing_written(
    database_url: str, pg_pool: Pool, args: list[str], stdin: bytes | None, says: str
) -> None:
    """Unknown target, empty content, bad input: exit 3, one line, nothing written."""
    refused = await run_ask(database_url, *args, stdin=stdin)
    assert refused.returncode == 3, refused.stderr
    [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert says in error
    assert "Traceback" not in refused.stderr
    assert await job_count(pg_pool) == 0
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.routes") == 1


@pytest.mark.usefixtures("upper")
async def test_an_asker_with_an_inbox_url_gets_its_answer_and_its_other_replies_are_posted(
    database_url: str, pg_pool: Pool, harness: Harness, inbox: TestInbox
) -> None:
    """An agent whose route posts to a URL asks: the answer comes; a send's reply is posted.

    The ask's reply lands in the asker's mailbox (no daemon needed); the reply to a plain
    send from the same agent is posted to its inbox URL by the drain, as before.
    """
    await harness.add_agent("poster")
    asking = asyncio.create_task(
        run_ask(database_url, "--to", TARGET, "--from", "poster:s-p", "--timeout", "60", "hello")
    )
    await until_a_job_is_queued(pg_pool)
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    answered = await asking
    assert (answered.returncode, answered.stdout) == (0, "HELLO\n"), answered.stderr
    sent = await cli(
        database_url, "send", "--to", TARGET, "--from", "poster:s-p", "--reply-to", "poster:s-p",
        "--content", "fyi",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    ran = await cli(database_url, "run", "--once")
    assert ran.returncode == 0, ran.stderr
    assert [reply.content for reply in inbox.replies] == ["FYI"], ran.stdout
    route = await PostgresRoutes(pg_pool, clock=SystemClock()).route("poster")
    assert route is not None
    assert route.kind == "http"


@pytest.mark.usefixtures("upper")
async def test_an_agents_own_login_asks_with_an_inbox_url_route(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """Under the least-privilege roles, an agent's own login whose route posts to a URL asks."""
    await pg_pool.execute(
        "INSERT INTO birddog.routes (agent_id, url, secret, kind) "
        "VALUES ('poster', 'http://127.0.0.1:9/inbox', 'whsec_c2VjcmV0', 'http')"
    )
    added = await cli(database_url, "agent", "add", "poster:s-p", "--login")
    assert added.returncode == 0, added.stderr
    [own] = re.findall(r"^DATABASE_URL=(\S+)$", added.stdout, re.M)
    asking = asyncio.create_task(
        run_ask(own, "--to", TARGET, "--from", "poster:s-p", "--timeout", "60", "hello")
    )
    await until_a_job_is_queued(pg_pool)
    worked = await cli(logins["worker"], "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    answered = await asking
    assert (answered.returncode, answered.stdout) == (0, "HELLO\n"), answered.stderr
    # The answer was in poster's own mailbox (read by the ask); nothing owed to its URL.
    assert (
        await pg_pool.fetchval(
            "SELECT count(*) FROM birddog.mailbox WHERE agent_id = 'poster' AND read_at IS NOT NULL"
        )
        == 1
    )
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0


MOVED_SECRET = "whsec_" + base64.b64encode(b"the route changed under the ask").decode()
"""The signing secret of the inbox URL an asker's route becomes while it waits."""


@pytest.mark.usefixtures("upper", "mailbox_delivery")
@pytest.mark.parametrize("change", ["to-a-url", "held"])
async def test_an_ask_is_answered_whatever_its_askers_route_became(
    database_url: str, pg_pool: Pool, inbox: TestInbox, change: str
) -> None:
    """The asker's route becomes an inbox URL, or is held, while it waits: the answer comes.

    The ask gave the asker a mailbox route; ``birddog route`` changes it between the ask
    and the worker's answer, with a drain daemon running. The answer is printed (exit 0),
    read from the asker's mailbox; nothing is owed to the route, nothing posted to the URL.
    """
    asking = asyncio.create_task(
        run_ask(database_url, "--to", TARGET, "--from", "mover:s-m", "--timeout", "60", "hello")
    )
    await until_a_job_is_queued(pg_pool)
    inbox.secrets["mover"] = Inbox(MOVED_SECRET)
    changes = (
        [["remove", "mover"], ["add", "mover", inbox.url_for("mover"), "--secret", MOVED_SECRET]]
        if change == "to-a-url"
        else [["hold", "mover"]]
    )
    for args in changes:
        changed = await cli(database_url, "route", *args)
        assert changed.returncode == 0, changed.stderr
    worked = await cli(database_url, "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    answered = await asking
    assert (answered.returncode, answered.stdout) == (0, "HELLO\n"), answered.stderr
    read = "SELECT count(*) FROM birddog.mailbox WHERE agent_id = 'mover' AND read_at IS NOT NULL"
    assert await pg_pool.fetchval(read) == 1
    assert await pg_pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0
    assert inbox.posts == {}


@pytest.mark.usefixtures("upper", "mailbox_delivery")
async def test_an_ask_runs_under_the_sender_role(
    database_url: str, pg_pool: Pool, logins: dict[str, str]
) -> None:
    """As birddog_sender, ask gives the asker a mailbox and gets its answer; no URL route."""
    asking = asyncio.create_task(
        run_ask(logins["sender"], "--to", TARGET, "--from", ASKER, "--timeout", "60", "hello")
    )
    await until_a_job_is_queued(pg_pool)
    worked = await cli(logins["worker"], "worker", "--command", "tr a-z A-Z", "--once")
    assert worked.returncode == 0, worked.stderr
    answered = await asking
    assert (answered.returncode, answered.stdout) == (0, "HELLO\n"), answered.stderr
    assert await pg_pool.fetchval("SELECT kind FROM birddog.routes WHERE agent_id = 'asker'") == (
        "mailbox"
    )
    conn = await asyncpg.connect(logins["sender"])
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                "INSERT INTO birddog.routes (agent_id, kind, url, secret) "
                "VALUES ('thief', 'http', 'http://127.0.0.1:9/', 'whsec_c2VjcmV0')"
            )
    finally:
        await conn.close()


@pytest.mark.usefixtures("upper")
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--timeout", "nan", "hi"], "--timeout"),
        (["--timeout", "inf", "hi"], "--timeout"),
        (["--timeout", "1e400", "hi"], "--timeout"),
        (["''"], "empty"),
        ([""], "empty"),
        (["   "], "empty"),
    ],
    ids=["nan", "inf", "overflow", "quotes", "empty", "blank"],
)
async def test_a_bad_timeout_or_an_empty_question_asks_nothing(
    database_url: str, pg_pool: Pool, args: list[str], says: str
) -> None:
    """--timeout nan/inf is refused as every bad duration is; '' is no question: exit 3, no job."""
    if args == ["''"]:
        args = [""]
    refused = await run_ask(database_url, "--to", TARGET, "--from", ASKER, *args)
    assert refused.returncode == 3, refused.stderr
    [error] = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert says in error
    assert await job_count(pg_pool) == 0


@pytest.mark.usefixtures("upper")
async def test_an_interrupted_ask_says_the_reply_is_owed_and_prints_no_driver_warning(
    database_url: str, pg_pool: Pool
) -> None:
    """SIGINT while waiting: exit 2, one line saying where the reply will land, no warning."""
    proc = await asyncio.create_subprocess_exec(
        BIRDDOG, "ask", "--to", TARGET, "--from", ASKER, "--timeout", "120", "hello",
        env=cli_env(database_url), cwd=ROOT, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await until_a_job_is_queued(pg_pool)
        await until_listening(pg_pool)
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    stderr = err.decode()
    assert proc.returncode == 2, stderr
    assert "stopped waiting: the reply to ask-" in stderr
    assert "Warning" not in stderr
    assert "Traceback" not in stderr
    assert out == b""
