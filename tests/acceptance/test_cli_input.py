"""Every bad command-line input is one line on stderr, exit 2, before anything runs."""

from __future__ import annotations

import asyncio
import subprocess

import asyncpg
import pytest

from tests.support.cli import BIRDDOG, ROOT, cli, cli_env

SECRET_LOOKING = "sk-not-to-be-echoed-4417"


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


async def _run_bytes(database_url: str, *args: bytes) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [BIRDDOG.encode(), *args],
        env=cli_env(database_url), cwd=ROOT, capture_output=True, text=True,
        errors="replace", timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        (b"route", b"hold", b"al\xffice"),
        (b"route", b"update", b"alice", b"--url", b"http://h/\xfe"),
        (b"replay", b"outbox:\xff:reply:0"),
    ],
    ids=["route-hold", "route-update", "replay"],
)
async def test_arguments_that_are_not_utf8_are_one_line_naming_their_position(
    database_url: str, args: tuple[bytes, ...]
) -> None:
    """Bytes the shell cannot decode are refused up front, naming the argument's position."""
    done = await _run_bytes(database_url, *args)
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert line.startswith(f"Error: argument {len(args)} is not valid UTF-8 text")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["pending", "--limit", "-1"], "--limit"),
        (["dead", "--limit", "99999999999"], "--limit"),
        (["check", "--pending-s", "nan"], "--pending-s"),
        (["check", "--dead-s", "1e400"], "--dead-s"),
        (["check", "--hold-s", "0"], "--hold-s"),
        (["probe", "--timeout-s", "inf"], "--timeout-s"),
        (["worker", "--handler", "examples.handler:handle", "--concurrency", "0"], "--concurrency"),
        (["send", "--to", "bob:s"], "--from"),
        (["no-such-command"], "No such command"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
async def test_out_of_range_and_missing_options_are_one_line_naming_the_option(
    database_url: str, args: list[str], named: str
) -> None:
    """Ranges, NaN, infinities and missing options exit 2 with one line and a --help pointer."""
    done = await cli(database_url, *args, timeout_s=30)
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert named in line
    assert line.endswith("--help)")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BIRDDOG_METRICS_PORT", SECRET_LOOKING),
        ("BIRDDOG_PAGE_SIZE", SECRET_LOOKING),
        ("BIRDDOG_LOG_LEVEL", SECRET_LOOKING),
    ],
)
async def test_a_bad_setting_is_named_and_its_value_never_echoed(
    database_url: str, variable: str, value: str
) -> None:
    """An invalid setting exits 2 naming the variable, without repeating what it held."""
    done = await cli(database_url, "status", variables={variable: value})
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert line.startswith(f"Error: invalid setting {variable}: ")
    assert SECRET_LOOKING not in done.stderr + done.stdout


async def test_a_setting_rule_across_two_settings_names_them(database_url: str) -> None:
    """A lease shorter than the post timeout names both settings in one line."""
    done = await cli(database_url, "status", BIRDDOG_LEASE_S="10", BIRDDOG_POST_TIMEOUT_S="30")
    assert done.returncode == 2
    line = _one_line(done.stderr)
    assert "BIRDDOG_LEASE_S" in line
    assert "BIRDDOG_POST_TIMEOUT_S" in line


async def test_a_statement_the_database_refuses_is_one_line_with_its_reason(
    empty_database_url: str,
) -> None:
    """A statement the server refuses gives its reason and SQLSTATE, not a traceback."""
    migrated = await cli(empty_database_url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    # A trigger of the operator's refuses every new route: the server's words come back.
    conn = await asyncpg.connect(empty_database_url)
    try:
        await conn.execute(
            "CREATE FUNCTION public.no_routes() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RAISE EXCEPTION 'routes are frozen today'; END$$;"
            "CREATE TRIGGER no_routes BEFORE INSERT ON birddog.routes "
            "FOR EACH ROW EXECUTE FUNCTION public.no_routes()"
        )
    finally:
        await conn.close()
    done = await cli(empty_database_url, "route", "add", "alice", "--mailbox")
    assert done.returncode == 1, done.stderr
    line = _one_line(done.stderr)
    assert line.startswith("Error: the database refused: ")
    assert "routes are frozen today (SQLSTATE P0001)" in line


LONG_ID = "a" * 300


LONG_ID_COMMANDS = [
    ["inbox", LONG_ID],
    ["inbox", f"alice:{LONG_ID}"],
    ["route", "add", LONG_ID, "--mailbox"],
    ["route", "hold", LONG_ID],
    ["route", "release", LONG_ID],
    ["listen", LONG_ID, "--count", "1"],
    ["send", "--job-id", "j", "--to", f"{LONG_ID}:s", "--from", "a:s", "--key", "k",
     "--command-id", "c", "--content", "x"],
    ["ask", "--to", f"{LONG_ID}:s", "--from", "me:s", "--timeout", "1", "hi"],
    ["ask", "--to", "bob:s", "--from", f"me:{LONG_ID}", "--timeout", "1", "hi"],
]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    LONG_ID_COMMANDS,
    ids=lambda args: "-".join(word for word in args[:2] if len(word) < 20),
)
async def test_an_agent_id_over_256_characters_is_a_one_line_error_everywhere(
    database_url: str, args: list[str]
) -> None:
    """A 300-character id is refused in one line naming the limit, never "no unread replies"."""
    done = await cli(database_url, *args)
    assert done.returncode != 0, done.stdout
    line = _one_line(done.stderr)
    assert "256" in line
    assert "no unread replies" not in done.stdout + done.stderr
    assert len(line) < 400, "the id is echoed whole"


@pytest.mark.parametrize(
    "args",
    [
        ["route", "hold", "b" * 256],
        ["jobs", "cancel", "j" * 256],
        ["replay", "k" * 600],
    ],
    ids=["route", "job", "replay"],
)
async def test_an_error_that_echoes_a_key_cuts_it_to_200_characters(
    database_url: str, args: list[str]
) -> None:
    """No route, no job, no dead letter: the message names the key, at most 200 characters of it."""
    done = await cli(database_url, *args)
    assert done.returncode != 0
    line = _one_line(done.stderr)
    shown = max(line.split("'")[1:-1] or [""], key=len)
    assert 0 < len(shown.rstrip("…")) <= 200, line
    assert shown.endswith("…")
