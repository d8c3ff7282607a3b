"""How a database is named and why a connection failed, in one line, without the password."""

from __future__ import annotations

import socket

import asyncpg
import pytest

from birddog.core.errors import DatabaseRefused, StoreUnavailable
from birddog.postgres.pool import (
    connect_errors,
    describe_database,
    failure_reason,
    refusal_reason,
    store_errors,
    transient_reason,
    url_problem,
)


@pytest.mark.parametrize(
    ("dsn", "described"),
    [
        (
            "postgresql://bird:pw@db.internal:6432/mail",
            'database "mail" on db.internal:6432 as "bird"',
        ),
        ("postgres://bird@db.internal/mail", 'database "mail" on db.internal as "bird"'),
        (
            "postgresql://postgres:@/postgres?host=/run/pg",
            'database "postgres" on /run/pg as "postgres"',
        ),
        ("postgresql:///mail", 'database "mail" on the default socket'),
        ("postgresql://h/m%20x", 'database "m x" on h'),
    ],
)
def test_a_database_is_named_by_database_host_and_user_never_password(
    dsn: str, described: str
) -> None:
    """The description names database, host (or socket directory), port and user, and no password."""
    assert describe_database(dsn) == described
    assert "pw" not in describe_database(dsn)


@pytest.mark.parametrize(
    ("dsn", "problem"),
    [
        ("mysql://u:secretpw@h/db", "the scheme must be postgresql:// or postgres://, not mysql"),
        ("not a url", "the scheme must be postgresql:// or postgres://, not none"),
        ("postgresql://u:secretpw@h:abc/db", "Port could not be cast to integer value as 'abc'"),
        ("postgresql://u:secretpw@h/db", None),
    ],
)
def test_a_malformed_url_names_the_part_that_is_wrong(dsn: str, problem: str | None) -> None:
    """The scheme and the port are checked; a well-formed URL has no problem."""
    assert url_problem(dsn) == problem


def test_the_reason_masks_the_password_as_a_whole_word_only() -> None:
    """A password the driver repeats is masked; the same letters inside a word are kept."""
    dsn = "postgresql://u:x@h/db"
    assert failure_reason(ValueError("role x does not exist"), dsn=dsn) == "role *** does not exist"
    long_dsn = "postgresql://u:hunter22@h/db?sslmode=require"
    reason = failure_reason(ValueError("bad option near 'hunter22'"), dsn=long_dsn)
    assert "hunter22" not in reason
    assert reason == "bad option near '***'"


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ConnectionRefusedError(111, "Connect call failed"), "connection refused"),
        (FileNotFoundError(2, "No such file or directory"), "no server socket there"),
        (socket.gaierror(-2, "Name or service not known"), "cannot resolve the host name"),
        (TimeoutError(), "timed out"),
        (OSError(113, "No route to host"), "No route to host"),
    ],
)
def test_network_failures_read_plainly(error: BaseException, reason: str) -> None:
    """Network errors become a short reason, without errno prefixes or class names."""
    assert failure_reason(error).startswith(reason)
    assert "Errno" not in failure_reason(error)


def test_a_refusal_is_permanent_and_names_the_database() -> None:
    """A missing database is DatabaseRefused with the server's own message."""
    dsn = "postgresql://bird:secretpw@db/mail"
    with pytest.raises(DatabaseRefused) as caught, connect_errors(dsn):
        raise asyncpg.InvalidCatalogNameError('database "mail" does not exist')
    assert str(caught.value) == (
        'database "mail" on db as "bird" refused the connection: database "mail" does not exist'
    )


def test_an_unreachable_server_is_transient_and_names_the_database() -> None:
    """A refused TCP connection is StoreUnavailable naming the host and the reason."""
    with (
        pytest.raises(StoreUnavailable) as caught,
        connect_errors("postgresql://bird:secretpw@db:5432/mail"),
    ):
        raise ConnectionRefusedError(111, "Connect call failed")
    assert str(caught.value).startswith(
        'cannot reach database "mail" on db:5432 as "bird": connection refused'
    )


def test_a_malformed_url_is_permanent_and_names_the_setting() -> None:
    """A URL asyncpg cannot parse is DatabaseRefused naming DATABASE_URL, not the password."""
    dsn = "mysql://bird:secretpw@db/mail"
    with pytest.raises(DatabaseRefused) as caught, connect_errors(dsn):
        raise asyncpg.ClientConfigurationError("invalid DSN")
    assert "DATABASE_URL" in str(caught.value)
    assert "secretpw" not in str(caught.value)


def test_a_connection_the_driver_finds_in_a_broken_state_is_unavailable() -> None:
    """Asyncpg's InternalClientError (a dropped idle connection handed out) is no crash."""
    with pytest.raises(StoreUnavailable, match="during claim"), store_errors("claim"):
        raise asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        )


def test_a_statement_the_server_gave_up_is_one_line_saying_to_run_it_again() -> None:
    """A deadlock (a transient error) is named with its SQLSTATE; a refusal is not transient."""
    deadlock = asyncpg.DeadlockDetectedError("deadlock detected")
    assert transient_reason(StoreUnavailable("lost")) is None
    assert transient_reason(deadlock) == (
        "deadlock detected (SQLSTATE 40P01); it may succeed when run again"
    )
    assert transient_reason(asyncpg.UniqueViolationError("duplicate key")) is None
    assert refusal_reason(deadlock) is None
