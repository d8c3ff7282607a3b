"""``--user`` refuses a user that owns or can write the worker's data, spool or their files.

Issue 38: ``--user embedded_postgres`` was accepted (only uid 0 was refused), and that
agent could edit ``pg_hba.conf``, signal the postmaster and use the socket. The rule now
is one for every path the worker keeps from agents: no agent's user (nor any of its
groups) may own or write it, or an entry of it.
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from birddog.spawn import AgentSetupRefused, Guarded, check_guarded, command_handler, run_as
from tests.support.users import os_user


@pytest.fixture
def agent() -> Iterator[str]:
    """A fresh OS user agents run as (root only)."""
    with os_user() as name:
        yield name


@pytest.fixture
def private(tmp_path: Path) -> Path:
    """A root-owned directory (mode 0700) holding a root-owned file: nobody else's."""
    directory = tmp_path / "data"
    directory.mkdir(mode=0o700)
    (directory / "pgpass").write_text("secret\n")
    (directory / "pgpass").chmod(0o600)
    return directory


def refusal(agent: str, *guarded: Guarded) -> str:
    """The one-line refusal check_guarded raises for ``agent`` (fails if it accepts)."""
    with pytest.raises(AgentSetupRefused) as refused:
        check_guarded(run_as(agent), guarded)
    message = str(refused.value)
    assert "\n" not in message
    assert "may own or write none of the worker's data directory, spool or secrets" in message
    return message


def test_a_user_owning_nothing_of_the_workers_is_accepted(agent: str, private: Path) -> None:
    """Root-owned, private paths leave a fresh user acceptable; missing paths are skipped."""
    check_guarded(run_as(agent), [Guarded(private, "the data"), Guarded(private / "no", "gone")])


def test_a_user_owning_a_guarded_directory_or_an_entry_of_it_is_refused(
    agent: str, private: Path
) -> None:
    """The uid owning the directory, or only a file in it, is refused, naming that path."""
    entry = pwd.getpwnam(agent)
    server = private / "postgres"
    server.mkdir(mode=0o700)
    os.chown(server, entry.pw_uid, entry.pw_gid)  # as the embedded server's own directory
    message = refusal(agent, Guarded(private, "the embedded server's data directory"))
    assert f"uid {entry.pw_uid} owns {server}" in message
    assert "(the embedded server's data directory)" in message
    os.chown(private, entry.pw_uid, 0)
    assert f"owns {private} " in refusal(agent, Guarded(private, "the data"))


def test_a_user_whose_group_owns_a_guarded_path_is_refused(agent: str, private: Path) -> None:
    """A group of the user owning the path is enough (root:embedded_postgres 0710, say)."""
    gid = pwd.getpwnam(agent).pw_gid
    os.chown(private, 0, gid)
    private.chmod(0o710)
    message = refusal(agent, Guarded(private, "the embedded server's data directory"))
    assert f"its group {gid} owns {private}" in message
    assert grp.getgrgid(gid).gr_name == agent


def test_a_guarded_path_every_user_can_write_refuses_any_user(agent: str, private: Path) -> None:
    """A world-writable spool is no place to keep from agents: every --user is refused."""
    spool = private / "spool.db"
    spool.write_bytes(b"")
    spool.chmod(0o666)
    message = refusal(agent, Guarded(spool, "the spool"))
    assert f"every user can write {spool} (the spool)" in message


def test_the_command_handler_refuses_a_guarded_user_at_start(agent: str, private: Path) -> None:
    """Worker --command --user checks the guarded paths before any job runs."""
    os.chown(private, 0, pwd.getpwnam(agent).pw_gid)
    with pytest.raises(AgentSetupRefused, match="its group"):
        command_handler("cat", user=agent, guarded=[Guarded(private, "the data")])
    private.chmod(0o700)
    os.chown(private, 0, 0)
    assert callable(command_handler("cat", user=agent, guarded=[Guarded(private, "the data")]))


def test_root_and_the_root_group_are_refused_by_the_same_rule(private: Path) -> None:
    """A user in root's group is refused where root's group owns the guarded path."""
    if os.geteuid() != 0:
        pytest.skip("--user needs the worker to run as root")
    with os_user() as name:
        subprocess.run(  # noqa: S603 - fixed arguments, a test-made name
            ["/usr/sbin/usermod", "-a", "-G", "root", name], check=True, capture_output=True
        )
        message = refusal(name, Guarded(private, "the data"))
    assert f"its group 0 owns {private}" in message
