"""``examples/send.py`` runs as written: its own pool, a checked schema, a routed reply address."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from birddog.postgres.pool import Pool
from tests.support.cli import ROOT, cli, cli_env

EXAMPLE = str(ROOT / "examples" / "send.py")


async def run_example(database_url: str) -> subprocess.CompletedProcess[str]:
    """``python examples/send.py`` on ``database_url``, to its end."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, EXAMPLE],
        env=cli_env(database_url),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_example_sends_once_with_a_route_for_its_reply_and_the_reply_arrives(
    database_url: str, pg_pool: Pool
) -> None:
    """It sends, gives alice a mailbox, then replays; bob's answer lands in alice's mailbox."""
    first = await run_example(database_url)
    assert (first.returncode, first.stdout) == (0, "sent: example-job-1\n"), first.stderr
    again = await run_example(database_url)
    assert (again.returncode, again.stdout) == (0, "already sent: example-job-1\n"), again.stderr
    kind = await pg_pool.fetchval("SELECT kind FROM birddog.routes WHERE agent_id = 'alice'")
    assert kind == "mailbox"
    worked = await cli(database_url, "worker", "--handler", "examples.handler:handle", "--once")
    assert worked.returncode == 0, worked.stderr
    assert (await cli(database_url, "run", "--once")).returncode == 0
    inbox = await cli(database_url, "inbox", "alice:s-alice")
    assert "Received 34 characters from alice." in inbox.stdout, (inbox.stdout, inbox.stderr)


async def test_the_example_on_an_unmigrated_database_says_run_birddog_migrate(
    empty_database_url: str,
) -> None:
    """No schema: one line naming `birddog migrate`, exit 2, no traceback."""
    refused = await run_example(empty_database_url)
    assert refused.returncode == 2
    assert "run `birddog migrate`" in refused.stderr
    assert "Traceback" not in refused.stderr
