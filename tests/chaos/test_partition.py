"""A network partition across hosts made of network namespaces: the sender spools, then forwards.

The test makes its own namespaces (names with a random tag), a bridge in the database's
namespace and one veth pair per other host, with addresses on a subnet that exists only
inside them; it removes all of them at the end and touches nothing else. PostgreSQL runs in
the database's namespace, listening only on its bridge address (the test itself reads the
database through the server's unix socket, which no network cut reaches). A ``birddog
send`` in the sender's namespace whose link is down spools the mail; once the link is
back, ``birddog spool forward`` there sends it, once.

Skipped, with the reason, where namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from birddog.postgres import migrate
from birddog.postgres.embedded import POSTGRES_BIN_PATH, SERVER_USER, EmbeddedPostgres
from birddog.postgres.pool import create_pool
from tests.support.chaos import birddog_env
from tests.support.cli import BIRDDOG, ROOT

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

SUBNET = "10.77.0"
"""The /24 the namespaces share; it exists only inside them."""

IP = shutil.which("ip") or "/usr/sbin/ip"


def ip(*args: str) -> None:
    """Run ``ip`` on what this test made; fail loudly with what it said."""
    done = subprocess.run(  # noqa: S603 - fixed program, arguments of our own
        [IP, *args], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"


@dataclass
class Hosts:
    """The namespaces of one run: ``db`` holds the bridge, every other host a veth to it."""

    tag: str
    names: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)

    def make(self, hosts: list[str]) -> None:
        """The database's namespace with its bridge, then each host linked to the bridge."""
        db = self.names["db"] = f"bd{self.tag}-db"
        ip("netns", "add", db)
        ip("-n", db, "link", "set", "lo", "up")
        ip("-n", db, "link", "add", "br0", "type", "bridge")
        ip("-n", db, "addr", "add", f"{SUBNET}.1/24", "dev", "br0")
        ip("-n", db, "link", "set", "br0", "up")
        self.addresses["db"] = f"{SUBNET}.1"
        for number, host in enumerate(hosts, start=2):
            name = self.names[host] = f"bd{self.tag}-{host}"
            ip("netns", "add", name)
            ip("-n", name, "link", "set", "lo", "up")
            outside, inside = f"bd{self.tag}a{number}", f"bd{self.tag}b{number}"
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", outside, "netns", name)
            ip("link", "set", inside, "netns", db)
            ip("-n", name, "link", "set", outside, "name", "eth0")
            ip("-n", name, "addr", "add", f"{SUBNET}.{number}/24", "dev", "eth0")
            ip("-n", name, "link", "set", "eth0", "up")
            ip("-n", db, "link", "set", inside, "master", "br0")
            ip("-n", db, "link", "set", inside, "up")
            self.addresses[host] = f"{SUBNET}.{number}"

    def link(self, host: str, *, up: bool) -> None:
        """Cut or restore ``host``'s only link."""
        ip("-n", self.names[host], "link", "set", "eth0", "up" if up else "down")

    def remove(self) -> None:
        """Delete every namespace this run made (their veths go with them)."""
        for name in self.names.values():
            subprocess.run([IP, "netns", "delete", name], capture_output=True, check=False)  # noqa: S603

    def run(
        self, host: str, args: list[str], env: dict[str, str]
    ) -> subprocess.CompletedProcess[str]:
        """``birddog ARGS`` on ``host``."""
        return subprocess.run(  # noqa: S603 - our own console script, in our own namespace
            [IP, "netns", "exec", self.names[host], BIRDDOG, *args],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


@pytest.fixture
def hosts() -> Iterator[Hosts]:
    """The namespaces of this test, removed at the end; skipped where they cannot be made."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    if not Path(IP).exists():
        pytest.skip("no ip command (iproute2) here")
    hosts = Hosts(tag=secrets.token_hex(3))
    probe = subprocess.run(  # noqa: S603
        [IP, "netns", "add", f"bd{hosts.tag}-probe"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.strip()}")
    subprocess.run([IP, "netns", "delete", f"bd{hosts.tag}-probe"], check=False)  # noqa: S603
    try:
        yield hosts
    finally:
        hosts.remove()


class NamespacedServer:
    """The test's own PostgreSQL, its postmaster in the database's namespace on its bridge."""

    def __init__(self, root: Path, hosts: Hosts) -> None:
        self.embedded = EmbeddedPostgres(root)
        self.hosts = hosts

    def prepare(self) -> str:
        """Initdb through the embedded server, stopped again; the unix socket DSN."""
        dsn = self.embedded.start()
        hba = self.embedded.pgdata / "pg_hba.conf"
        hba.write_text(hba.read_text() + f"host all all {SUBNET}.0/24 scram-sha-256\n")
        return dsn

    def pg_ctl(self, *args: str) -> None:
        """``pg_ctl`` as the server's user, inside the database's namespace."""
        user = ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []
        done = subprocess.run(  # noqa: S603 - the package's own binaries
            [IP, "netns", "exec", self.hosts.names["db"], *user,
             str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.embedded.pgdata), *args],
            capture_output=True, text=True, timeout=90, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def start_in_namespace(self) -> None:
        """Listen on the bridge address only (and the private socket, for the test)."""
        self.embedded.stop("fast")
        options = (
            f"-c listen_addresses={self.hosts.addresses['db']}"
            f" -c unix_socket_directories={self.embedded.pgdata} -c unix_socket_permissions=0700"
        )
        log = str(self.embedded.pgdata / "log")
        self.pg_ctl("-w", "-t", "60", "-l", log, "-o", options, "start")

    def tcp_dsn(self) -> str:
        """The database over TCP at the bridge address, the password from the passfile."""
        return (
            f"postgresql://postgres@{self.hosts.addresses['db']}:5432/postgres"
            f"?passfile={self.embedded.passfile}"
        )

    def stop(self) -> None:
        """Stop the postmaster, wherever it runs."""
        if self.embedded.pid is not None:
            self.pg_ctl("-w", "-m", "immediate", "stop")


def send_args(index: int) -> list[str]:
    """``birddog send`` of mail ``index``, alice to bob."""
    return [
        "send", "--job-id", f"part-{index}", "--to", "bob:s-bob", "--from", "alice:s-alice",
        "--reply-to", "alice:s-alice", "--key", f"mail-{index}", "--command-id", f"cmd-{index}",
        "--content", f"mail {index}",
    ]  # fmt: skip


async def test_a_cut_off_sender_spools_and_forwards_once_its_link_returns(hosts: Hosts) -> None:
    """Link down: send spools (exit 0); link up: spool forward sends each mail once, in order."""
    hosts.make(["sender"])
    root = Path(tempfile.mkdtemp(prefix="bd-part-"))
    server = NamespacedServer(root, hosts)
    try:
        unix_dsn = await asyncio.to_thread(server.prepare)
        await asyncio.wait_for(migrate(unix_dsn), 60)
        await asyncio.to_thread(server.start_in_namespace)
        env = birddog_env(server.tcp_dsn())
        env["BIRDDOG_SPOOL_PATH"] = str(root / "sender" / "spool.db")

        first = hosts.run("sender", send_args(0), env)
        assert (first.returncode, first.stdout.strip()) == (0, "sent: part-0"), first.stderr
        hosts.link("sender", up=False)
        for index in (1, 2, 3):
            cut = hosts.run("sender", send_args(index), env)
            assert cut.returncode == 0, cut.stderr
            assert cut.stdout.strip() == f"spooled (database unreachable): part-{index}"
        status = json.loads(hosts.run("sender", ["spool", "status", "--json"], env).stdout)
        assert status["mails"] == 3
        hosts.link("sender", up=True)
        forwarded = hosts.run("sender", ["spool", "forward"], env)
        assert (forwarded.returncode, forwarded.stdout.strip()) == (0, "forwarded 3 mails"), (
            forwarded.stderr
        )
        again = hosts.run("sender", ["spool", "forward"], env)
        assert again.returncode == 0, again.stderr

        pool = await create_pool(unix_dsn, min_size=1, max_size=1)
        try:
            rows = await pool.fetch("SELECT job_id FROM birddog.jobs ORDER BY created_at, job_id")
        finally:
            await pool.close()
        assert [row["job_id"] for row in rows] == [f"part-{i}" for i in range(4)]
        status = json.loads(hosts.run("sender", ["spool", "status", "--json"], env).stdout)
        assert (status["mails"], status["quarantined"]) == (0, 0)
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)
