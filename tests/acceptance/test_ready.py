"""Start-up as people see it: the ready line, a taken metrics port, several daemons, uri, psql."""

from __future__ import annotations

import json
from collections.abc import Callable

import aiohttp

from tests.support import eventually, free_port
from tests.support.cli import Daemon, cli


def _ready_lines(log: str) -> list[str]:
    """The ready lines in a JSON log: ``notice`` events whose text starts so."""
    notices = [json.loads(line) for line in log.splitlines() if '"notice"' in line]
    return [n["text"] for n in notices if n["text"].startswith("birddog is ready: ")]


async def _healthy(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/healthz") as resp,
        ):
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def test_several_daemons_on_one_host_each_with_its_own_metrics_port(
    database_url: str, daemons: Callable[..., Daemon]
) -> None:
    """Each daemon says it is ready once; a second on a taken port exits 2 naming the setting."""
    first_port, second_port = free_port(), free_port()
    first = daemons(BIRDDOG_METRICS_PORT=str(first_port))

    async def first_ready() -> bool:
        return bool(_ready_lines(first.log()))

    await eventually(first_ready, "the first daemon's ready line", within_s=30)
    [line] = _ready_lines(first.log())
    assert line.startswith(f"birddog is ready: metrics at http://127.0.0.1:{first_port}/metrics; ")
    assert line.endswith("; look inside: birddog psql")
    assert "database " in line

    taken = await cli(database_url, "run", timeout_s=60, BIRDDOG_METRICS_PORT=str(first_port))
    assert taken.returncode == 2, taken.stderr
    assert "Traceback" not in taken.stderr
    [error] = [row for row in taken.stderr.splitlines() if row.startswith("Error: ")]
    assert f"127.0.0.1:{first_port} is already in use" in error
    assert "BIRDDOG_METRICS_PORT" in error

    second = daemons(BIRDDOG_METRICS_PORT=str(second_port))

    async def second_ready() -> bool:
        return bool(_ready_lines(second.log()))

    await eventually(second_ready, "the second daemon's ready line", within_s=30)
    assert await _healthy(first_port)
    assert await _healthy(second_port)
    for daemon in (first, second):
        code, log = daemon.terminate()
        assert code == 0
        assert len(_ready_lines(log)) == 1


async def test_the_ready_line_says_when_metrics_are_off(
    daemons: Callable[..., Daemon],
) -> None:
    """With BIRDDOG_METRICS_PORT=0 the ready line says metrics are off."""
    daemon = daemons(BIRDDOG_METRICS_PORT="0")

    async def ready() -> bool:
        return bool(_ready_lines(daemon.log()))

    await eventually(ready, "the ready line", within_s=30)
    assert _ready_lines(daemon.log())[0].startswith("birddog is ready: metrics off; database ")
    assert daemon.terminate()[0] == 0


async def test_uri_prints_the_database_in_use_and_psql_opens_it(database_url: str) -> None:
    """Uri prints DATABASE_URL on stdout and names it on stderr; psql runs SQL on it."""
    shown = await cli(database_url, "uri")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == database_url
    assert shown.stderr.startswith("database ")
    sql = await cli(database_url, "psql", "-At", "-c", "SELECT count(*) FROM birddog.routes")
    assert sql.returncode == 0, sql.stderr
    assert sql.stdout.strip() == "0"
    failed = await cli(database_url, "psql", "-c", "SELECT * FROM no_such_table")
    assert failed.returncode != 0
    assert "no_such_table" in failed.stderr


async def test_a_daemon_says_at_start_that_pushes_may_reach_internal_addresses(
    database_url: str, daemons: Callable[..., Daemon]
) -> None:
    """BIRDDOG_PUSH_EGRESS=internal is a warning at start (and an event); the default says none."""
    opened = daemons(BIRDDOG_PUSH_EGRESS="internal", BIRDDOG_METRICS_PORT="0")
    default = daemons(BIRDDOG_METRICS_PORT="0")
    await eventually(lambda: _ready_lines(opened.log()), "the opened daemon's ready line")
    await eventually(lambda: _ready_lines(default.log()), "the default daemon's ready line")
    events = [json.loads(line) for line in opened.log().splitlines()]
    [warning] = [event for event in events if event.get("event") == "push_egress_open"]
    assert warning["mode"] == "internal"
    assert any(
        str(event.get("text", "")).startswith("WARNING: BIRDDOG_PUSH_EGRESS=internal")
        for event in events
    )
    assert "push_egress_open" not in default.log()
    assert "BIRDDOG_PUSH_EGRESS" not in default.log()
