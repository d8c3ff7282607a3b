"""Prototype: ``birddog run`` with a sliding-window drain instead of page-at-a-time.

Not product code: it replaces ``DrainDaemon._loop`` at run time to measure the fix the
benchmarks recommend for slow recipients (and for the drain's idle waits). Instead of
posting a page and waiting for its slowest post before the next claim:

- up to ``WINDOW`` posts are in flight; whenever there is room, the next rows are claimed
  (same claim statement, same lease, ``SKIP LOCKED``) and posted at once;
- at most ``PER_AGENT`` posts per recipient are in flight; recipients at their cap are
  left out of the claim (``AND NOT (recipient_agent_id = ANY($6))``), so their rows stay
  in the table, unleased, until a slot frees;
- finished outcomes are stored in batches (64 outcomes, or every 20 ms), one
  ``PostgresOutbox.apply`` per claim, exactly as a page's outcomes are today.

Run it where the benchmarks run the daemon::

    BENCH_DAEMON=bench.experiments.window_drain .venv/bin/python -m bench --only slow
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import birddog.daemon
from birddog.cli import main
from birddog.core.delivery import decide
from birddog.ports import Page
from birddog.postgres.outbox import row_from_record
from birddog.postgres.sql import queries

WINDOW = int(os.environ.get("BENCH_WINDOW", "128"))
PER_AGENT = int(os.environ.get("BENCH_PER_AGENT", "8"))
FLUSH_S = 0.02
CLAIM = queries["outbox_claim_page"].replace(
    "AND NOT EXISTS (",
    "AND NOT (o.recipient_agent_id = ANY($6::text[]))\n      AND NOT EXISTS (",
    1,
)


async def _idle(self: Any) -> None:
    """Nothing in flight: sleep until the next due row, a wake, or the backstop."""
    due = await self.room.next_wake_at()
    timeout = self.settings.backstop_s
    if due is not None:
        timeout = min(timeout, max(0.0, (due - datetime.now(UTC)).total_seconds()))
    if timeout > 0:
        await self._wait_for_wake(timeout)


async def _loop(self: Any, *, once: bool) -> None:
    room = self.room
    outbox = room.outbox
    in_flight: dict[asyncio.Future[Any], tuple[Any, str]] = {}
    per_agent: Counter[str] = Counter()
    cursor: str | None = None
    done: list[tuple[Any, str, Any]] = []
    oldest = 0.0

    async def store() -> None:
        now = datetime.now(UTC)
        by_claim: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
        for row, claim, result in done:
            by_claim[claim].append((row, result))
        done.clear()
        for claim, items in by_claim.items():
            outcomes = [
                decide(row, result, now=now, schedule=room.schedule, rng=room.rng)
                for row, result in items
            ]
            page = Page(rows=[row for row, _ in items], claim=claim, more=False)
            await outbox.apply(page=page, outcomes=outcomes)

    while not self.stop.is_set():
        wrapped = False
        while len(in_flight) < WINDOW:
            now = datetime.now(UTC)
            saturated = [agent for agent, n in per_agent.items() if n >= PER_AGENT]
            claim = uuid.uuid4()
            limit = min(room.page_size, WINDOW - len(in_flight))
            records = await outbox.pool.fetch(
                CLAIM,
                cursor or "",
                now,
                limit,
                claim,
                now + timedelta(seconds=room.lease_s),
                saturated,
            )
            rows = sorted((row_from_record(r) for r in records), key=lambda r: r.key)
            for row in rows:
                task = asyncio.ensure_future(room._post(row))
                in_flight[task] = (row, str(claim))
                per_agent[row.recipient.agent_id] += 1
            if len(rows) == limit:
                cursor = rows[-1].key
                continue
            previous, cursor = cursor, None
            if previous is None or wrapped:
                break
            wrapped = True
        if not in_flight and not done:
            if once:
                return
            await _idle(self)
            continue
        if in_flight:
            finished, _ = await asyncio.wait(
                in_flight, timeout=FLUSH_S, return_when=asyncio.FIRST_COMPLETED
            )
            for task in finished:
                row, claim = in_flight.pop(task)
                per_agent[row.recipient.agent_id] -= 1
                if not done:
                    oldest = time.monotonic()
                done.append((row, claim, task.result()))
        if done and (
            len(done) >= room.page_size or not in_flight or time.monotonic() - oldest > FLUSH_S
        ):
            await store()


if __name__ == "__main__":
    birddog.daemon.DrainDaemon._loop = _loop  # type: ignore[method-assign]
    main()
