"""The baseline drain: the least a Postgres outbox drain can do, to measure BirdDog against.

Select a page of due rows in key order (with the recipient's URL), POST each concurrently
with aiohttp, swap the accepted ones for receipts in one statement per page; nothing else:
no lease, no signing, no retry bookkeeping, no models. Same rows, same inboxes, same
page size as ``birddog run``.

Run (the drain benchmark does this between re-seeds)::

    .venv/bin/python -m bench.baseline '<dsn>'      # prints one JSON line
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time

import aiohttp
import asyncpg

PAGE = 64
SELECT_PAGE = """
SELECT o.key, o.reply::text AS body, r.url
FROM birddog.outbox o JOIN birddog.routes r ON r.agent_id = o.recipient_agent_id
WHERE o.state = 'pending' AND o.due_at <= now() AND o.key > $1
ORDER BY o.key LIMIT $2
"""
SWAP = """
WITH gone AS (
    DELETE FROM birddog.outbox o WHERE o.key = ANY($1::text[])
    RETURNING o.key, o.attempts, o.recipient_agent_id, o.recipient_session_id, o.command_id,
              o.outcome
)
INSERT INTO birddog.receipts (key, delivered_at, attempts, recipient_agent_id,
                              recipient_session_id, command_id, outcome)
SELECT key, now(), attempts + 1, recipient_agent_id, recipient_session_id, command_id, outcome
FROM gone
"""
HEADERS = {"content-type": "application/json"}


async def post(session: aiohttp.ClientSession, url: str, body: bytes) -> bool:
    async with session.post(url, data=body, headers=HEADERS) as resp:
        return resp.status == 200 and (await resp.json()).get("accepted") is True


async def drain(dsn: str) -> dict[str, float]:
    conn = await asyncpg.connect(dsn)
    async with aiohttp.ClientSession() as session:
        after, delivered = "", 0
        cpu_before = _cpu_s()
        started = time.time()
        while rows := await conn.fetch(SELECT_PAGE, after, PAGE):
            answers = await asyncio.gather(
                *(post(session, row["url"], row["body"].encode()) for row in rows),
                return_exceptions=True,
            )
            keys = [row["key"] for row, ok in zip(rows, answers, strict=True) if ok is True]
            await conn.execute(SWAP, keys)
            delivered += len(keys)
            after = rows[-1]["key"]
        finished = time.time()
    await conn.close()
    return {
        "delivered": delivered,
        "started": started,
        "finished": finished,
        "elapsed_s": finished - started,
        "cpu_s": _cpu_s() - cpu_before,
    }


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    print(json.dumps(asyncio.run(drain(sys.argv[1]))))
