"""The CLI and the daemon as a user runs them: subprocesses, a real database, real inboxes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import aiohttp
from aiohttp import web

from birddog import Outcome, Reply
from tests.support import eventually, free_port
from tests.support.cli import Daemon, cli
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness, fan_out


async def test_send_work_run_delivers_end_to_end(
    database_url: str, harness: Harness, inbox: TestInbox
) -> None:
    """send, worker --once and run --once take a mail from the shell to a signed receipt."""
    await harness.add_agent("alice")
    sent = await cli(
        database_url, "send", "--allow-unknown", "--job-id", "job-1", "--to", "bob:s-bob", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", "mail-1", "--command-id", "cmd-1",
        "--content", "What is due?",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    worked = await cli(
        database_url, "worker", "--handler", "tests.acceptance.handlers:echo", "--once"
    )
    assert worked.returncode == 0, worked.stderr
    ran = await cli(database_url, "run", "--once")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "delivered 1 reply; nothing left pending"
    assert '"event": "replies_moved"' in ran.stderr
    [reply] = inbox.replies
    assert (reply.key, reply.content) == ("outbox:mail-1:reply:0", "echo: What is due?")
    assert reply.reply.outcome is Outcome.COMPLETED
    assert await harness.states() == {"outbox:mail-1:reply:0": "receipt"}
    pending = await cli(database_url, "pending", "--json")
    assert json.loads(pending.stdout) == []


async def test_a_failing_handler_replies_failed_without_the_credential(
    database_url: str, harness: Harness, inbox: TestInbox
) -> None:
    """A handler that raises settles failed; the reply's diagnostic is masked."""
    await harness.add_agent("alice")
    await cli(
        database_url, "send", "--allow-unknown", "--job-id", "job-2", "--to", "bob:s-bob", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", "mail-2", "--command-id", "cmd-2", "--content", "x",
    )  # fmt: skip
    worked = await cli(
        database_url, "worker", "--handler", "tests.acceptance.handlers:boom", "--once"
    )
    assert worked.returncode == 0, worked.stderr
    assert "sk-test-123" not in worked.stderr
    await cli(database_url, "run", "--once")
    [reply] = inbox.replies
    assert reply.reply.outcome is Outcome.FAILED
    assert reply.reply.diagnostic is not None
    assert "sk-test-123" not in reply.reply.diagnostic
    assert "Bearer [redacted]" in reply.reply.diagnostic


async def test_send_refuses_bad_input_before_writing(database_url: str, harness: Harness) -> None:
    """A 257-character id or a malformed address is refused with a usage error, nothing written."""
    bad = await cli(
        database_url, "send", "--job-id", "j", "--to", f"bob:{'s' * 257}", "--from", "a:b",
        "--key", "k", "--command-id", "c", "--content", "x",
    )  # fmt: skip
    assert bad.returncode == 2
    assert "sessionId" in bad.stderr
    worse = await cli(
        database_url, "send", "--job-id", "j", "--to", "no-colon", "--from", "a:b",
        "--key", "k", "--command-id", "c", "--content", "x",
    )  # fmt: skip
    assert worse.returncode == 2
    assert await harness.pool.fetchval("SELECT count(*) FROM birddog.jobs") == 0


async def test_two_daemons_share_the_work_without_double_delivery(
    harness: Harness, inbox: TestInbox, daemons: Callable[..., Daemon]
) -> None:
    """Two daemons on one database deliver every reply exactly once (no kills)."""
    for agent in ("alice", "carol"):
        await harness.add_agent(agent)
    first, second = daemons(), daemons()

    async def both_running() -> bool:
        return await harness.drain_daemons() == 2

    await eventually(both_running, "two daemons running", within_s=60)
    keys = await fan_out(harness, 150, ["alice", "carol"])
    await eventually(lambda: _count(harness, len(keys)), "all receipts", within_s=60)
    assert set(inbox.posts) == set(keys)
    assert max(inbox.posts.values()) == 1
    assert first.terminate()[0] == 0
    assert second.terminate()[0] == 0


async def _count(harness: Harness, expected: int) -> bool:
    return await harness.receipts() == expected


async def test_sigterm_mid_page_loses_nothing(
    harness: Harness, inbox: TestInbox, daemons: Callable[..., Daemon]
) -> None:
    """SIGTERM while posts hang: the daemon exits 0 in its grace period and every row survives."""
    await harness.add_agent("alice")
    release = asyncio.Event()
    hanging = asyncio.Event()

    async def hang(reply: Reply, attempt: int) -> web.StreamResponse | None:
        hanging.set()
        await release.wait()
        return None

    inbox.behaviour = hang
    daemon = daemons()
    keys = await fan_out(harness, 10, ["alice"])
    await asyncio.wait_for(hanging.wait(), 30)
    code, _log = await asyncio.to_thread(daemon.terminate)
    assert code == 0
    states = await harness.states()
    assert set(states) == set(keys)
    assert all(state in {"pending", "receipt"} for state in states.values())
    inbox.behaviour = None
    release.set()
    daemons("--once")
    await eventually(lambda: _count(harness, len(keys)), "all receipts", within_s=60)


async def test_probe_and_check_exit_codes(
    database_url: str, harness: Harness, daemons: Callable[..., Daemon]
) -> None:
    """Probe exits 0 with a daemon and 1 without; check exits 1 on a new dead letter."""
    lonely = await cli(database_url, "probe", "--timeout-s", "1")
    assert lonely.returncode == 1
    assert "FAILED" in lonely.stdout
    daemon = daemons()
    probed = await cli(database_url, "probe", "--timeout-s", "30")
    assert probed.returncode == 0, probed.stdout + probed.stderr
    assert "probe ok" in probed.stdout
    daemon.terminate()
    checked = await cli(database_url, "check")
    assert checked.returncode == 0, checked.stdout
    await fan_out(harness, 1, ["nobody-routes-me"], prefix="ghost")
    await cli(database_url, "run", "--once")
    alarmed = await cli(database_url, "check")
    assert alarmed.returncode == 1
    assert "unknown_recipient" in alarmed.stdout
    dead = await cli(database_url, "dead", "--json")
    assert json.loads(dead.stdout)[0]["dead_reason"] == "unknown_recipient"


async def test_route_commands_and_replay(
    database_url: str, harness: Harness, inbox: TestInbox
) -> None:
    """Route add/hold/release/list and replay work from the shell."""
    added = await cli(database_url, "route", "add", "dave", inbox.url_for("dave"))
    assert added.returncode == 0, added.stderr
    secret = added.stdout.split("signing secret: ")[1].strip()
    from birddog.http.inbox import Inbox  # noqa: PLC0415

    inbox.secrets["dave"] = Inbox(secret)
    assert (await cli(database_url, "route", "hold", "dave")).returncode == 0
    batched = await cli(database_url, "route", "update", "dave", "--batch", "25")
    assert "batches of 25" in batched.stdout, batched.stderr
    listed = json.loads((await cli(database_url, "route", "list", "--json")).stdout)
    assert listed == [
        {
            "agentId": "dave",
            "kind": "http",
            "url": inbox.url_for("dave"),
            "enabled": False,
            "batchSize": 25,
            "postTimeoutS": None,  # the daemon's defaults: no policy of its own
            "maxAgeS": None,
            "maxAttempts": None,
            "digest": {"daily": "08:00", "everyS": None},  # the default digest
        }
    ]
    too_big = await cli(database_url, "route", "update", "dave", "--batch", "1001")
    assert too_big.returncode != 0
    assert "batch size must be 1 to 1000" in too_big.stderr
    assert (await cli(database_url, "route", "update", "dave", "--batch", "1")).returncode == 0
    assert "whsec_" not in json.dumps(listed)
    [key] = await fan_out(harness, 1, ["dave"], prefix="held")
    await cli(database_url, "run", "--once")
    assert inbox.posts == {}
    pending = json.loads((await cli(database_url, "pending", "--json")).stdout)
    assert pending[0]["held"] is True
    await cli(database_url, "route", "release", "dave")
    await cli(database_url, "run", "--once")
    assert (await harness.states())[key] == "receipt"


async def test_demo_finishes_in_its_own_database_beside_a_running_daemon(
    database_url: str, harness: Harness, daemons: Callable[..., Daemon]
) -> None:
    """The demo shows receipts and a dead letter, leaves the user's database empty, drops its own."""
    daemon = daemons()
    done = await cli(database_url, "demo", timeout_s=90)
    assert done.returncode == 0, done.stderr
    assert "receipts:" in done.stdout
    assert "unknown_recipient" in done.stdout
    assert "demo finished" in done.stdout
    for table in ("routes", "jobs", "outbox", "receipts"):
        count = await harness.pool.fetchval(f"SELECT count(*) FROM birddog.{table}")  # noqa: S608 - our table names
        assert count == 0, table
    demo_left = await harness.pool.fetchval(
        "SELECT count(*) FROM pg_database WHERE datname = 'birddog_demo'"
    )
    assert demo_left == 0
    code, log = daemon.terminate()
    assert code == 0
    assert "reply_dead" not in log


async def test_metrics_and_healthz_are_served_on_loopback(
    harness: Harness, inbox: TestInbox, daemons: Callable[..., Daemon]
) -> None:
    """/healthz answers ok and /metrics counts deliveries, on 127.0.0.1 only."""
    await harness.add_agent("alice")
    port = free_port()
    daemon = daemons(BIRDDOG_METRICS_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:

        async def healthy() -> bool:
            try:
                async with session.get(f"{base}/healthz") as resp:
                    return resp.status == 200 and (await resp.json()) == {"ok": True}
            except aiohttp.ClientError:
                return False

        await eventually(healthy, "/healthz", within_s=30)
        keys = await fan_out(harness, 3, ["alice"], prefix="metric")
        await eventually(lambda: _count(harness, len(keys)), "receipts", within_s=30)

        async def counted() -> bool:
            async with session.get(f"{base}/metrics") as resp:
                return "birddog_delivered_total 3.0" in await resp.text()

        await eventually(counted, "the delivered counter", within_s=10)
    assert daemon.terminate()[0] == 0
