"""The client side of the composition root: the mail service and the spool, over a pool.

What a library caller (or a command that only sends, asks or reads) wires without a
whole adapters: :func:`open_asking` (the mail service without a spool), :func:`open_sender`
(with the local spool behind it) and :func:`open_spool`, and the clock every adapter of
this process reads. :func:`build_mail` and :func:`describe_refusal` are what the adapters
wires its own mail service with.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from birddog.clock import SystemClock
from birddog.core.jobs import DEFAULT_MAX_CONTENT_BYTES
from birddog.ports import Clock
from birddog.postgres.asks import PostgresAsks
from birddog.postgres.locate import destination_for
from birddog.postgres.mailbox import PostgresMailbox
from birddog.postgres.notices import PostgresNotices
from birddog.postgres.pool import (
    Pool,
    destination_of,
    refusal_reason,
)
from birddog.runtime import every, stop_task
from birddog.service.mail import MailService
from birddog.settings import Settings
from birddog.sqlite import SqliteSpool

if TYPE_CHECKING:
    from birddog.ports import Spool


CLOCK: Clock = SystemClock()
"""The wall clock every adapter and command of this process reads."""


@contextlib.asynccontextmanager
async def open_asking(
    pool: Pool,
    listen_dsn: str | None,
    *,
    poll_s: float = 2.0,
    clock: Clock | None = None,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
) -> AsyncIterator[MailService]:
    """The mail service over ``pool``, without a spool, its waits sharing one LISTEN.

    Make one per process (it keeps one listening connection for all its waits) and use
    it for every send and ask; while the database is away, its calls raise
    :class:`~birddog.StoreUnavailable` (:func:`open_sender` spools instead)::

        async with birddog.open_asking(pool, dsn) as asking:
            answer = await asking.ask(to="upper:s-upper", from_="me:s-me", content="hi")

    Args:
        pool: an asyncpg pool on the BirdDog database (any size: a waiting ask holds no
            connection).
        listen_dsn: the database for the one listening connection (a direct one, not
            PgBouncer's); None: waits poll only.
        poll_s: while waiting, look again at least this often, notification or not.
        clock: the time source (default: the system clock).
        max_content_bytes: the largest question allowed.

    Yields:
        The mail service, for the life of the block; its listener closes with it.
    """
    notices = PostgresNotices(listen_dsn)
    mailbox = PostgresMailbox(pool, poll_s=poll_s, clock=clock or CLOCK, notices=notices)
    try:
        yield build_mail(
            pool, mailbox, clock=clock or CLOCK, max_content_bytes=max_content_bytes, poll_s=poll_s
        )
    finally:
        await mailbox.close()
        await notices.close()


@contextlib.asynccontextmanager
async def open_sender(
    pool: Pool,
    listen_dsn: str | None,
    *,
    spool_path: str | Path | None = None,
    spool_max_bytes: int | None = None,
    spool_max_age_s: float | None = None,
    forward_every_s: float | None = None,
    poll_s: float = 2.0,
    clock: Clock | None = None,
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES,
    database_url: str | None = None,
) -> AsyncIterator[MailService]:
    """The mail service over ``pool`` with the local spool behind it.

    Make one per process and send and ask through it; while the database cannot be
    reached, mail goes to the spool and is forwarded (in order, exactly once) by the
    service itself while it is open, by a daemon on this host, or by ``birddog spool
    forward``::

        pool = await birddog.postgres.pool.create_pool(dsn, min_size=0)  # opens while away
        async with birddog.open_sender(pool, dsn) as sender:
            sent = await sender.send(to="upper:s-upper", from_="me:s-me", content="hi")
            if sent.spooled:
                ...  # accepted on this machine's disk; forwarded once the database answers

    Args:
        pool: an asyncpg pool on the BirdDog database; make it with ``min_size=0`` so it
            opens even while the database is away.
        listen_dsn: the database for the one listening connection; None: waits poll only.
        spool_path: the spool file (default: ``BIRDDOG_SPOOL_PATH``, else the default
            location, as the command line uses).
        spool_max_bytes: the spool's bound (default ``BIRDDOG_SPOOL_MAX_BYTES``).
        spool_max_age_s: spooled mail older than this is quarantined (default
            ``BIRDDOG_SPOOL_MAX_AGE_S``).
        forward_every_s: while open, forward waiting mail this often (default
            ``BIRDDOG_SPOOL_FORWARD_S``); 0: only when a send or a wait needs it.
        poll_s: while waiting, look again at least this often.
        clock: the time source (default: the system clock).
        max_content_bytes: the largest content allowed.
        database_url: the DSN ``pool`` was made with (default: ``listen_dsn``): spooled
            mail records it and only mail meant for it is forwarded here (with neither,
            mail records no database and only such mail is forwarded here).

    Yields:
        The mail service, for the life of the block.
    """
    settings = Settings()
    clock = clock or CLOCK
    named = database_url or listen_dsn
    spool = SqliteSpool(
        Path(spool_path) if spool_path is not None else settings.spool_location(),
        clock=clock,
        max_bytes=settings.spool_max_bytes if spool_max_bytes is None else spool_max_bytes,
        max_age_s=settings.spool_max_age_s if spool_max_age_s is None else spool_max_age_s,
        destination=None if named is None else destination_of(named),
    )
    every_s = settings.spool_forward_s if forward_every_s is None else forward_every_s
    async with open_asking(
        pool, listen_dsn, poll_s=poll_s, clock=clock, max_content_bytes=max_content_bytes
    ) as asking:
        sender = asking.with_spool(spool, describe=describe_refusal)
        stop = asyncio.Event()
        forwarding = (
            asyncio.create_task(
                every(every_s, sender.forward_waiting, stop=stop, name="spool_forward"),
                name="birddog-spool-forward",
            )
            if every_s > 0
            else None
        )
        try:
            yield sender
        finally:
            stop.set()
            await stop_task(forwarding)


def open_spool(settings: Settings, *, dsn: str | None = None) -> SqliteSpool:
    """The local spool the settings name (``BIRDDOG_SPOOL_*``); opening it touches no file.

    Args:
        settings: where the spool is and its bounds, and the database its mail is meant
            for (``DATABASE_URL``, else the embedded server's).
        dsn: the DSN in use, when it is known (it names the database instead).

    Returns:
        The spool.
    """
    return SqliteSpool(
        settings.spool_location(),
        clock=CLOCK,
        max_bytes=settings.spool_max_bytes,
        max_age_s=settings.spool_max_age_s,
        destination=destination_of(dsn) if dsn is not None else destination_for(settings),
    )


def describe_refusal(exc: BaseException) -> str:
    """Why a spooled mail was refused: the server's own words for a refused statement.

    Args:
        exc: what writing the mail raised.

    Returns:
        The reason a quarantined mail keeps.
    """
    reason = refusal_reason(exc)
    return f"the database refused it: {reason}" if reason is not None else str(exc)


def build_mail(
    pool: Pool,
    mailbox: PostgresMailbox,
    *,
    clock: Clock,
    max_content_bytes: int,
    poll_s: float = 2.0,
    spool: Spool | None = None,
) -> MailService:
    """The mail service over the ask store on ``pool`` and the answers of ``mailbox``.

    Args:
        pool: the pool on the BirdDog database.
        mailbox: the mailbox's answers (its waits share the process's notices).
        clock: the time source.
        max_content_bytes: the largest content allowed.
        poll_s: while the database is away, a wait looks again at least this often.
        spool: the local spool (None: nothing is spooled).

    Returns:
        The service.
    """
    return MailService(
        asks=PostgresAsks(pool),
        answers=mailbox,
        clock=clock,
        spool=spool,
        describe=describe_refusal,
        poll_s=poll_s,
        max_content_bytes=max_content_bytes,
    )
