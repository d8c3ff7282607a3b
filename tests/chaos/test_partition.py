"""A network partition across hosts made of network namespaces: the sender spools, then forwards.

The test makes its own namespaces (names with a random tag), a bridge in the database's
namespace and one veth pair per other host, with addresses on a subnet that exists only
inside them; it removes all of them at the end and touches nothing else. PostgreSQL runs in
the database's namespace, listening only on its bridge address (the test itself reads the
database through the server's unix socket, which no network cut reaches). A ``birddog
send`` in the sender's namespace whose link is down spools the mail; once the link is
back, ``birddog spool forward`` there sends it, once. A daemon in a third namespace is cut
off while it drains replies to a slow inbox (a process in the database's namespace): its
leases end, a daemon in a fourth namespace finishes the work, nothing is lost, and no
reply is posted twice unless the cut-off daemon had it in flight.

Skipped, with the reason, where namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from birddog import AgentAddress, AgentWork, Mail, Outcome, agent_job
from birddog.clock import SystemClock
from birddog.postgres import migrate
from birddog.postgres.embedded import SERVER_USER, EmbeddedPostgres
from birddog.postgres.jobs import PostgresJobs, enqueue_accepted_job
from birddog.postgres.pool import Pool, create_pool
from birddog.postgres.routes import PostgresRoutes
from tests.support import eventually
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

    def start(
        self, host: str, argv: list[str], env: dict[str, str], log: Path
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host``, output to ``log`` (``ip netns exec`` execs it: one pid)."""
        with log.open("wb") as out:
            return subprocess.Popen(  # noqa: S603 - our own programs, in our own namespace
                [IP, "netns", "exec", self.names[host], *argv],
                env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

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
             str(self.embedded.bin_dir / "pg_ctl"), "-D", str(self.embedded.pgdata), *args],
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
        "send", "--allow-unknown", "--job-id", f"part-{index}", "--to", "bob:s-bob", "--from", "alice:s-alice",
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


REPLIES = 48
PAGE = "6"
"""A drain page: what one daemon holds leased at a time."""
INBOX_PORT = 8088
INBOX_DELAY_S = "0.15"


async def pending_replies(pool: Pool, count: int) -> None:
    """``count`` settled jobs whose replies to carol wait in the outbox."""
    carol = AgentAddress(agent_id="carol", session_id="s-carol")
    async with pool.acquire() as conn:
        for index in range(count):
            mail = Mail(
                key=f"ask-{index}", to=AgentAddress(agent_id="bob", session_id=f"s-{index}"),
                from_=carol, reply_to=[carol], content=f"question {index}", created_at=index,
            )  # fmt: skip
            work = AgentWork(
                job_id=f"d-{index}", session_id=f"s-{index}", command_fact_id=f"c-{index}"
            )
            await enqueue_accepted_job(conn, agent_job(work, mail))
    jobs = PostgresJobs(pool, clock=SystemClock())
    claimed_jobs = await jobs.claim_many(lease_s=60, limit=count)  # one queue each: all at once
    assert len(claimed_jobs) == count
    for claimed in claimed_jobs:
        await jobs.settle(
            job_id=claimed.job.job_id, claim_token=claimed.claim_token,
            outcome=Outcome.COMPLETED, content="answer",
        )  # fmt: skip


def print_logs(root: Path) -> None:
    """The end of every process's log, for a failure."""
    for log in sorted(root.glob("*.log")) + sorted(root.glob("*.out")):
        print(f"----- {log.name} -----\n" + "\n".join(log.read_text().splitlines()[-15:]))


def posted(log: Path) -> Counter[str]:
    """Posts the inbox took, per reply key."""
    return Counter(log.read_text().split()) if log.exists() else Counter()


async def test_a_daemon_cut_off_mid_drain_loses_its_lease_and_another_finishes(
    hosts: Hosts,
) -> None:
    """Cut mid-drain, a daemon's leased rows go to another daemon: 0 lost, repeats only in flight."""
    hosts.make(["daemon1", "daemon2"])
    root = Path(tempfile.mkdtemp(prefix="bd-part-"))
    server = NamespacedServer(root, hosts)
    processes: list[subprocess.Popen[bytes]] = []
    pool: Pool | None = None
    try:
        unix_dsn = await asyncio.to_thread(server.prepare)
        await asyncio.wait_for(migrate(unix_dsn), 60)
        await asyncio.to_thread(server.start_in_namespace)
        pool = opened = await create_pool(unix_dsn, min_size=1, max_size=2)  # `opened`: never None
        inbox_log = root / "inbox.log"
        inbox = [sys.executable, "-m", "tests.support.netns_inbox"]
        db_host = hosts.addresses["db"]
        inbox_args = [*inbox, db_host, str(INBOX_PORT), str(inbox_log), INBOX_DELAY_S]
        processes.append(hosts.start("db", inbox_args, dict(os.environ), root / "inbox.out"))
        await PostgresRoutes(pool, clock=SystemClock()).add(
            "carol", f"http://{db_host}:{INBOX_PORT}/inbox/carol"
        )
        await pending_replies(pool, REPLIES)
        env = birddog_env(server.tcp_dsn(), BIRDDOG_PAGE_SIZE=PAGE)

        first = hosts.start("daemon1", [BIRDDOG, "run"], env, root / "daemon1.log")
        processes.append(first)
        await eventually(
            lambda: asyncio.to_thread(lambda: sum(posted(inbox_log).values())),
            "the first daemon's first posts",
            until=lambda n: n >= 2 * int(PAGE),
            within_s=120,
        )
        hosts.link("daemon1", up=False)
        in_flight = await pool.fetchval(
            "SELECT count(*) FROM birddog.outbox WHERE lease_expires_at > now()"
        )
        assert in_flight > 0  # leased by the cut-off daemon, their outcome not stored
        second = hosts.start("daemon2", [BIRDDOG, "run"], env, root / "daemon2.log")
        processes.append(second)
        await eventually(
            lambda: opened.fetchval("SELECT count(*) FROM birddog.receipts"),
            "every reply's receipt",
            until=lambda n: n == REPLIES,
            within_s=180,
        )
        assert first.poll() is None  # cut off, not dead: its leases simply ran out
        assert await pool.fetchval("SELECT count(*) FROM birddog.outbox") == 0
        counts = posted(inbox_log)
        receipts = await pool.fetch("SELECT key FROM birddog.receipts")
        assert set(counts) == {row["key"] for row in receipts}  # every reply posted: 0 lost
        repeated = sum(n - 1 for n in counts.values())
        assert repeated <= in_flight, (repeated, in_flight)
        print(
            f"partition: {REPLIES} replies, {in_flight} in flight at the cut, {repeated} repeated"
        )
    except BaseException:
        print_logs(root)
        raise
    finally:
        for proc in processes:
            if proc.poll() is None:
                proc.kill()  # our own children, by their pids
                proc.wait(timeout=30)
        if pool is not None:
            await pool.close()
        await asyncio.to_thread(server.stop)
        shutil.rmtree(root, ignore_errors=True)
