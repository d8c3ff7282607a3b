"""``birddog prune`` and the daemon's retention settings, as an operator runs them."""

from __future__ import annotations

import json
from collections.abc import Callable

from birddog.postgres.pool import Pool
from tests.support import eventually
from tests.support.cli import Daemon, cli


async def _old_receipts(pool: Pool, count: int, *, days: int) -> None:
    await pool.execute(
        "INSERT INTO birddog.receipts (key, delivered_at, attempts, recipient_agent_id,"
        " recipient_session_id, command_id, outcome)"
        " SELECT 'outbox:m' || i || ':reply:0', now() - make_interval(days => $2), 1, 'a',"
        " 's', 'c', 'completed' FROM generate_series(1, $1) AS i",
        count,
        days,
    )


async def test_prune_reports_what_it_removed(database_url: str, pg_pool: Pool) -> None:
    """The command deletes receipts past the cut-off and says how many, as text or JSON."""
    await _old_receipts(pg_pool, 3, days=40)
    done = await cli(database_url, "prune", "--receipts-older-than", "30d")
    assert done.returncode == 0, done.stderr
    assert "pruned 3 receipt(s), 0 settled job(s), 0 dead letter(s)" in done.stdout
    again = await cli(database_url, "prune", "--receipts-older-than", "30d", "--json")
    assert json.loads(again.stdout) == {"receipts": 0, "jobs": 0, "dead_letters": 0, "mailbox": 0}


async def test_prune_refuses_to_guess(database_url: str) -> None:
    """Without an age, or with one that is not a duration, prune is a one-line usage error."""
    nothing = await cli(database_url, "prune")
    assert nothing.returncode == 2
    assert "say what to prune" in nothing.stderr
    bad = await cli(database_url, "prune", "--dead-older-than", "soon")
    assert bad.returncode == 2
    assert "--dead-older-than must be a duration" in bad.stderr
    assert "Traceback" not in bad.stderr + nothing.stderr


async def test_the_daemon_prunes_when_a_retention_is_set(
    pg_pool: Pool, daemons: Callable[..., Daemon]
) -> None:
    """With BIRDDOG_RETAIN_RECEIPTS_S set, a running daemon deletes old receipts by itself."""
    await _old_receipts(pg_pool, 5, days=40)
    await _old_receipts_young(pg_pool)
    daemon = daemons(BIRDDOG_RETAIN_RECEIPTS_S="30d", BIRDDOG_PRUNE_EVERY_S="0.2")

    async def pruned() -> bool:
        count: int = await pg_pool.fetchval("SELECT count(*) FROM birddog.receipts")
        return count == 1

    await eventually(pruned, "old receipts pruned by the daemon", within_s=30)
    code, log = daemon.terminate()
    assert code == 0
    assert '"event": "pruned"' in log


async def _old_receipts_young(pool: Pool) -> None:
    await pool.execute(
        "INSERT INTO birddog.receipts (key, delivered_at, attempts, recipient_agent_id,"
        " recipient_session_id, command_id, outcome)"
        " VALUES ('outbox:young:reply:0', now(), 1, 'a', 's', 'c', 'completed')"
    )
