"""Two daemon processes on one database share the work, and no reply is posted twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from aiohttp import web

from birddog import Reply
from tests.support import eventually
from tests.support.cli import Daemon
from tests.support.inbox import TestInbox
from tests.support.stacks import Harness, fan_out


def delivered_by(log: str) -> int:
    """How many receipts a daemon's JSON log says it stored."""
    total = 0
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == "outcomes_stored":
            total += int(event.get("delivered", 0))
    return total


async def test_two_daemons_share_the_work_with_no_duplicates(
    harness: Harness, inbox: TestInbox, daemons: Callable[..., Daemon]
) -> None:
    """Both daemons deliver, every reply arrives exactly once, and both stop cleanly."""
    agents = [f"agent-{i}" for i in range(6)]
    for agent in agents:
        await harness.add_agent(agent)

    async def a_little_work(_reply: Reply, _count: int) -> web.StreamResponse | None:
        await asyncio.sleep(0.005)  # each post takes a moment, as a real inbox's does
        return None

    inbox.behaviour = a_little_work
    first = daemons(BIRDDOG_LOG_LEVEL="debug")
    second = daemons(BIRDDOG_LOG_LEVEL="debug")

    async def both_listening() -> bool:
        count = await harness.pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN%'"
        )
        return bool(count >= 2)

    await eventually(both_listening, "both daemons to LISTEN", within_s=60)
    keys = await fan_out(harness, 250, agents)

    async def all_delivered() -> bool:
        return await harness.receipts() == len(keys)

    await eventually(all_delivered, "every receipt", within_s=120)
    codes_logs = [first.terminate(), second.terminate()]
    assert [code for code, _log in codes_logs] == [0, 0], [log[-3000:] for _c, log in codes_logs]
    assert set(inbox.posts) == set(keys)
    assert max(inbox.posts.values()) == 1, "a reply was posted twice"
    shares = [delivered_by(log) for _code, log in codes_logs]
    assert sum(shares) == len(keys)
    assert min(shares) > 0, f"one daemon did all the work: {shares}"
