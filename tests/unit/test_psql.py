"""Opening psql: the password goes through the environment, never the argument list."""

from __future__ import annotations

import pytest

from birddog.postgres.psql import psql_invocation


def test_the_password_travels_in_pgpassword_not_in_the_arguments() -> None:
    """A URL password (percent-encoded or as a query parameter) moves to PGPASSWORD."""
    argv, env = psql_invocation(
        "postgresql://bird:p%40ss@db:5432/mail?sslmode=require",
        ["-c", "SELECT 1"],
        executable="psql",
    )
    assert argv == ["psql", "postgresql://bird@db:5432/mail?sslmode=require", "-c", "SELECT 1"]
    assert env["PGPASSWORD"] == "p@ss"
    argv, env = psql_invocation("postgresql://bird@db/mail?password=pw", [], executable="psql")
    assert argv == ["psql", "postgresql://bird@db/mail"]
    assert env["PGPASSWORD"] == "pw"


def test_a_url_without_password_leaves_the_environment_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A socket DSN without a password is passed on as it is, with no PGPASSWORD added."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    argv, env = psql_invocation(
        "postgresql://postgres:@/postgres?host=/run/pg", [], executable="/bin/psql"
    )
    assert argv == ["/bin/psql", "postgresql://postgres@/postgres?host=%2Frun%2Fpg"]
    assert "PGPASSWORD" not in env
