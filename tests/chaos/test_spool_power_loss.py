"""A power cut under the spool: every mail acknowledged "spooled" is still there after it.

Killing a process keeps what it wrote in the kernel's page cache, so it proves nothing
about fsync. Here the spool lives on LazyFS (``tests.support.lazyfs``), which holds every
write not yet fsynced in a cache of its own: N mails are sent through the real
:class:`~birddog.Sender` while the database is unreachable (a port nothing listens on),
each acknowledged as spooled; then LazyFS drops its unsynced data (the power cut) and is
mounted again, and the spool is read back. With ``synchronous=FULL`` (the spool's own)
every acknowledged mail is there; the same run with ``synchronous=OFF`` loses mail, so
the test can fail. Skipped, with the reason, unless ``BIRDDOG_LAZYFS`` names a lazyfs
binary (CI cannot build it; CONTRIBUTING.md says how to run it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from birddog import open_sender
from birddog.clock import SystemClock
from birddog.postgres.pool import create_pool
from birddog.sqlite import SpoolFile, SqliteSpool
from tests.support import free_port
from tests.support.cli import cli
from tests.support.lazyfs import lazyfs, lazyfs_binary

MAILS = 40
"""Mails sent through the Sender API in one run."""
CLI_MAILS = 8
"""Runs of ``birddog send`` (a process each) in one run."""

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

BINARY, WHY_NOT = lazyfs_binary()


class UnsyncedFile(SpoolFile):
    """The spool file with ``synchronous=OFF``: commits are never fsynced (what the test catches)."""

    SYNCHRONOUS = "OFF"


class UnsyncedSpool(SqliteSpool):
    """The spool on an :class:`UnsyncedFile`."""

    FILE = UnsyncedFile


SpoolMails = Callable[[Path], Awaitable[list[str]]]
"""Spools mail into the spool file given; returns the keys acknowledged as spooled."""


def dead_dsn() -> str:
    """A database on a port nothing listens on: every send spools."""
    return f"postgresql://birddog@127.0.0.1:{free_port()}/birddog"


def through_the_sender(spool_class: type[SqliteSpool]) -> SpoolMails:
    """``MAILS`` sends through the real :class:`~birddog.Sender` over a ``spool_class`` spool."""

    async def spool_mails(path: Path) -> list[str]:
        acknowledged: list[str] = []
        pool = await create_pool(dead_dsn(), min_size=0, max_size=2)
        try:
            async with open_sender(pool, None, spool_path=path, forward_every_s=0) as opened:
                sender = opened.with_spool(spool_class(path, clock=SystemClock()))
                for index in range(MAILS):
                    sent = await sender.send(
                        to="bob:s-bob",
                        from_="alice:s-alice",
                        content=f"mail {index}",
                        key=f"mail-{index}",
                        timeout_s=5,
                    )
                    assert sent.spooled == "database unreachable", sent
                    acknowledged.append(sent.key)
        finally:
            await pool.close()
        return acknowledged

    return spool_mails


async def through_birddog_send(path: Path) -> list[str]:
    """``CLI_MAILS`` runs of the real ``birddog send``, each printing that it spooled."""
    acknowledged: list[str] = []
    dsn = dead_dsn()
    for index in range(CLI_MAILS):
        done = await cli(
            dsn,
            "send", "--allow-unknown", "--job-id", f"job-{index}", "--to", "bob:s-bob", "--from", "alice:s-alice",
            "--reply-to", "alice:s-alice", "--key", f"mail-{index}",
            "--command-id", f"cmd-{index}", "--content", f"mail {index}",
            BIRDDOG_SPOOL_PATH=str(path),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("spooled (database unreachable)"), done.stdout
        acknowledged.append(f"mail-{index}")
    return acknowledged


async def through_a_power_cut(
    tmp_path: Path, spool_mails: SpoolMails
) -> tuple[list[str], list[str]]:
    """Spool mail on LazyFS, cut the power (drop what was not fsynced), mount again.

    Returns:
        The keys acknowledged as spooled, and the keys the spool holds after the cut.
    """
    assert BINARY is not None
    root, mount = tmp_path / "root", tmp_path / "mnt"
    async with lazyfs(BINARY, tmp_path, root, mount) as fs:
        acknowledged = await spool_mails(mount / "spool.db")
        await fs.clear_cache()
    async with lazyfs(BINARY, tmp_path, root, mount):
        after = SqliteSpool(mount / "spool.db", clock=SystemClock())
        kept = [row.key for row in await after.waiting(limit=MAILS + 1)] if after.exists() else []
    return acknowledged, kept


@pytest.mark.skipif(BINARY is None, reason=WHY_NOT)
async def test_a_full_sync_spool_keeps_every_acknowledged_mail_through_a_power_cut(
    tmp_path: Path,
) -> None:
    """synchronous=FULL: each mail acknowledged as spooled is in the spool after the cut."""
    acknowledged, kept = await through_a_power_cut(tmp_path, through_the_sender(SqliteSpool))
    assert len(acknowledged) == MAILS
    assert kept == acknowledged


@pytest.mark.skipif(BINARY is None, reason=WHY_NOT)
async def test_every_birddog_send_that_said_spooled_survives_a_power_cut(tmp_path: Path) -> None:
    """The real command, spool settings as shipped: each mail it said spooled is there after."""
    acknowledged, kept = await through_a_power_cut(tmp_path, through_birddog_send)
    assert len(acknowledged) == CLI_MAILS
    assert kept == acknowledged


@pytest.mark.skipif(BINARY is None, reason=WHY_NOT)
async def test_an_unsynced_spool_loses_acknowledged_mail_in_the_same_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """synchronous=OFF, the same run: acknowledged mail is gone, so the test above can fail."""
    acknowledged, kept = await through_a_power_cut(tmp_path, through_the_sender(UnsyncedSpool))
    assert len(acknowledged) == MAILS
    lost = [key for key in acknowledged if key not in kept]
    with capsys.disabled():
        print(f"\nsynchronous=OFF: {len(lost)} of {MAILS} acknowledged mails lost")
    assert lost, f"no mail lost with synchronous=OFF; kept {kept}"
