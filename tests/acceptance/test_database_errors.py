"""Database errors as the CLI shows them: one line, host and database named, no password.

Permanent refusals (a role or database that does not exist, a malformed URL) exit 2 at
once, even for the daemon; an unreachable server is a one-line error for a command and a
logged, retried wait for the daemon. Commands never announce the embedded server; the
daemon's ready line says where it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.support import eventually, free_port
from tests.support.cli import Daemon, cli

PASSWORD = "not-in-any-output-7f3a"


def _as_user(dsn: str, user: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{PASSWORD}@{host}"))


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert PASSWORD not in stderr
    return lines[0]


async def test_a_missing_database_exits_2_at_once_naming_it(postgres_server_dsn: str) -> None:
    """Status and the daemon both stop at once on a missing database, with the server's reason."""
    parts = urlsplit(postgres_server_dsn)
    missing = urlunsplit(parts._replace(path="/birddog_no_such_database"))
    for command in (["status"], ["run"]):
        done = await cli(missing, *command, timeout_s=30)
        assert done.returncode == 2, done.stderr
        line = _one_error_line(done.stderr)
        assert 'database "birddog_no_such_database"' in line
        assert "does not exist" in line


async def test_an_unknown_role_exits_2_naming_it(postgres_server_dsn: str) -> None:
    """A role that does not exist is refused for good: exit 2, the role named, no password."""
    done = await cli(_as_user(postgres_server_dsn, "birddog_nobody"), "pending", timeout_s=30)
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert 'as "birddog_nobody" refused the connection' in line


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"mysql://u:{PASSWORD}@127.0.0.1/db", "the scheme must be postgresql://"),
        (f"postgresql://u:{PASSWORD}@127.0.0.1:port/db", "Port could not be cast"),
    ],
)
async def test_a_malformed_url_exits_2_naming_the_setting(url: str, expected: str) -> None:
    """A URL that cannot be parsed names DATABASE_URL and what is wrong, for commands and the daemon."""
    for command in (["status"], ["run"], ["migrate"]):
        done = await cli(url, *command, timeout_s=30)
        assert done.returncode == 2, done.stderr
        line = _one_error_line(done.stderr)
        assert line.startswith("Error: the database URL (DATABASE_URL) is malformed: ")
        assert expected in line


async def test_an_unreachable_server_is_one_line_for_a_command() -> None:
    """A command against a port nothing listens on exits 1 naming host, port and database."""
    url = f"postgresql://bird:{PASSWORD}@127.0.0.1:{free_port()}/mail"
    done = await cli(url, "dead", timeout_s=30)
    assert done.returncode == 1, done.stderr
    line = _one_error_line(done.stderr)
    assert line.startswith('Error: cannot reach database "mail" on 127.0.0.1:')
    assert "connection refused" in line


async def test_the_daemon_waits_for_an_unreachable_server_saying_why(
    daemons: Callable[..., Daemon],
) -> None:
    """The daemon logs the database and the reason while it backs off, and stops cleanly."""
    port = free_port()
    daemon = daemons(DATABASE_URL=f"postgresql://bird:{PASSWORD}@127.0.0.1:{port}/mail")

    async def logged_twice() -> bool:
        return daemon.log().count('"database_unavailable"') >= 2

    await eventually(logged_twice, "two database_unavailable lines", within_s=30)
    code, log = daemon.terminate()
    assert code == 0
    assert PASSWORD not in log
    event = json.loads(next(line for line in log.splitlines() if "database_unavailable" in line))
    assert event["database"] == f'database "mail" on 127.0.0.1:{port} as "bird"'
    assert event["reason"].startswith("connection refused")
    assert event["retry_in_s"] > 0


async def test_the_daemon_and_each_command_say_who_runs_the_embedded_server(
    embedded_dir: Path, daemons: Callable[..., Daemon]
) -> None:
    """The ready line names the embedded server; a command says the daemon runs it, and until when."""
    daemon = daemons(DATABASE_URL="", BIRDDOG_DATA_DIR=str(embedded_dir))

    async def ready() -> bool:
        return "birddog is ready: " in daemon.log()

    await eventually(ready, "the daemon's ready line", within_s=60)
    assert f"; embedded PostgreSQL in {embedded_dir}; " in daemon.log()
    assert all(json.loads(line)["event"] for line in daemon.log().splitlines())
    done = await cli("", "status", timeout_s=60, BIRDDOG_DATA_DIR=str(embedded_dir))
    assert done.returncode == 0, done.stderr
    assert "embedded PostgreSQL" not in done.stdout
    [notice] = [json.loads(line)["text"] for line in done.stderr.splitlines() if "notice" in line]
    assert notice.startswith(
        f"embedded PostgreSQL in {embedded_dir}: already running, used by pid {daemon.proc.pid}"
    ), notice
    assert notice.endswith("; it stops when the last of them exits")
    assert daemon.terminate()[0] == 0
    alone = await cli("", "status", timeout_s=60, BIRDDOG_DATA_DIR=str(embedded_dir))
    assert alone.returncode == 0, alone.stderr
    assert (
        f"embedded PostgreSQL in {embedded_dir}: started by this command; it stops when this "
        "command ends (birddog run keeps it running)"
    ) in alone.stderr
    stopped = await cli("", "uri", timeout_s=60, BIRDDOG_DATA_DIR=str(embedded_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.startswith("postgresql://postgres@/postgres?host=")
    assert f"embedded PostgreSQL in {embedded_dir}: not running now." in stopped.stderr


async def test_a_database_never_migrated_says_run_birddog_migrate_everywhere(
    empty_database_url: str,
) -> None:
    """send, ask, status, worker, console and the daemon say run `birddog migrate`, exiting 2.

    ask exits 3, its own "nothing was asked".
    """
    commands = [
        [
            "send",
            "--job-id",
            "j",
            "--to",
            "bob:s-bob",
            "--from",
            "alice:s-alice",
            "--key",
            "k",
            "--command-id",
            "c",
            "--content",
            "hi",
        ],
        ["ask", "--to", "bob:s-bob", "--from", "me:s-me", "--timeout", "5", "hi"],
        ["status"],
        ["worker", "--agent", "bob", "--handler", "tests.acceptance.handlers:echo", "--once"],
        ["console", "--port", "0"],
        ["run"],
    ]
    for command in commands:
        done = await cli(empty_database_url, *command, timeout_s=60)
        assert done.returncode == (3 if command[0] == "ask" else 2), (command, done.stderr)
        line = _one_error_line(done.stderr)
        assert line.startswith("Error: the database has no birddog schema"), (command, line)
        assert line.endswith("run `birddog migrate`"), (command, line)
        assert "birddog is ready" not in done.stderr + done.stdout
