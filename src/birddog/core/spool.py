"""The local spool, the pure part: what a spooled mail is, and what to do with each forward.

A sender outside a transaction of its own (the CLI, the MCP and A2A servers, a
:class:`~birddog.MailService` with a spool) that cannot reach the database keeps the mail
in a local spool as an :class:`Outgoing`: the job and how its write is checked, so the
forwarder writes it later exactly as the sender would have. What a forward attempt came
to decides the row's fate (:func:`decide_forward`): forwarded (delete the row), refused
for what the mail is (quarantine it with the reason, never retry it), or the database
away (stop and keep every row, in order, for the next attempt).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from birddog.core.ages import format_age
from birddog.core.ask import address_text
from birddog.core.errors import (
    BirdDogError,
    DatabaseRefused,
    InvalidJobPayload,
    StoreRefused,
    StoreUnavailable,
)
from birddog.core.jobs import Job, decode_agent_job
from birddog.core.mail import AgentAddress, Mail
from birddog.core.model import Model

DEFAULT_SPOOL_MAX_BYTES = 256 * 1024 * 1024
"""A spool holding this much refuses new mail (``BIRDDOG_SPOOL_MAX_BYTES``)."""

DEFAULT_SPOOL_MAX_AGE_S = 5 * 86400.0
"""Spooled mail older than this is quarantined, never sent late (``BIRDDOG_SPOOL_MAX_AGE_S``)."""


class Destination(Model):
    """The database a spooled mail was meant for: the DSN as given, and the server once known.

    Never the password. A forwarder forwards only mail meant for its own database
    (:func:`meant_for`): the same login, host, port and database, and, when both are
    known, the same server.

    Attributes:
        host: the host (or the unix socket's directory) as the DSN gives it.
        port: the port.
        database: the database name.
        user: the login, so that mail is forwarded under the identity that spooled it.
        server: the server's identity (its ``system_identifier`` and the database's oid)
            when a process of this host reached it under this DSN; None: not known.
    """

    host: str
    port: int
    database: str
    user: str
    server: str | None = None

    @property
    def key(self) -> str:
        """``user@host:port/database``: what mail of this DSN is filed under."""
        return f"{self.user}@{self.host}:{self.port}/{self.database}"

    def describe(self) -> str:
        """For people: ``database "mail" on db:5432 as "bird"``."""
        host = self.host or "the default host"
        return f'database "{self.database}" on {host}:{self.port} as "{self.user}"'


UNRECORDED = "no database recorded (spooled by an older BirdDog): birddog spool forward --adopt"
"""How ``spool status`` names mail whose row records no destination."""


def meant_for(row: Destination | None, own: Destination | None, server: str | None) -> bool:
    """Whether a forwarder of ``own`` database (its server ``server``) may forward the mail.

    The same key (login, host, port, database), and not another server when both are
    known: mail of a mistyped ``DATABASE_URL`` never reaches the database a forwarder
    happens to reach, and mail is forwarded only under the login that spooled it. A row
    that records no destination (an older BirdDog's) is forwarded only by a forwarder
    that knows none either (a library sender given no DSN), or by ``--adopt``.

    Args:
        row: the destination the mail records (None: none).
        own: the forwarder's database (None: not known).
        server: the identity of the server the forwarder reached (None: not known).
    """
    if row is None or own is None:
        return row is None and own is None
    if row.key != own.key:
        return False
    return row.server is None or server is None or row.server == server


class Outgoing(Model):
    """One mail on its way to the database, as the spool keeps it.

    Attributes:
        job: the agent job carrying the mail.
        checked: True for a send or an ask (the target must be known, the mail key's
            replay rules, a mailbox route for ``mailbox_for``); False for a job enqueued as
            it is (``birddog send --job-id``: the job id's replay rules only).
        mailbox_for: give this agent a mailbox route when it has none (checked only).
        require_mailbox: an ask: the reply to ``mailbox_for`` lands in its mailbox even
            when its route posts to an inbox URL.
        keep_stored_time: unchecked only: a job already stored under this id lends its
            mail's ``createdAt``, so a retried send whose time was not pinned is a replay.
        destination: the database the mail was meant for (the spool stamps its own when
            it keeps the mail; None: not known, or spooled by an older BirdDog).
        require_known: unchecked only: refuse (:class:`~birddog.UnknownAgent`) a target
            with no route whose session was never sent work, as a checked send does
            (``birddog send`` without ``--allow-unknown``). A mail spooled by an older
            BirdDog has none, and is enqueued as it was then.
    """

    job: Job
    checked: bool
    mailbox_for: AgentAddress | None = None
    require_mailbox: bool = False
    keep_stored_time: bool = False
    require_known: bool = False
    destination: Destination | None = None

    @property
    def mail(self) -> Mail:
        """The mail the job carries.

        Raises:
            InvalidJobPayload: the job carries no mail (a spooled job always does).
        """
        mail = decode_agent_job(self.job).mail
        if mail is None:
            raise InvalidJobPayload("a spooled job carries mail", field="mail")
        return mail

    @property
    def lane(self) -> tuple[str, str]:
        """``(sender AGENT:SESSION, recipient session)``: mail of one lane keeps its order."""
        return address_text(self.mail.from_), self.job.queue


def with_created_at(job: Job, created_at_ms: int) -> Job:
    """The same agent job whose mail carries another ``createdAt``.

    A send retried without a pinned time stamps a new one; the stored mail's time makes
    the retry the same mail again, so an identical send is a replay.

    Args:
        job: an agent job with mail.
        created_at_ms: the time to carry.

    Returns:
        The job, its payload's mail re-stamped.

    Raises:
        InvalidJobPayload: the job is not an agent job with mail.
    """
    payload = decode_agent_job(job)
    if payload.mail is None:
        raise InvalidJobPayload("only mail carries a createdAt", field="mail")
    mail = payload.mail.model_copy(update={"created_at": created_at_ms})
    restamped = payload.model_copy(update={"mail": mail})
    return job.model_copy(update={"payload": restamped.as_payload()})


def outgoing_from_json(text: str | bytes) -> Outgoing:
    """A spooled mail back from the JSON the spool stored.

    Args:
        text: what :meth:`Outgoing.model_dump_json` wrote.

    Returns:
        The mail, checked as on the way in.

    Raises:
        InvalidInput: the text is not such a mail (written by another version, damaged),
            naming the field.
    """
    outgoing = Outgoing.model_validate_json(text)
    _ = outgoing.lane  # the job must decode as an agent job with mail
    return outgoing


class ForwardOutcome(StrEnum):
    """What becomes of a spooled row after one attempt to forward it."""

    FORWARDED = "forwarded"
    """Written (or found written: a replay); the row is deleted."""
    QUARANTINED = "quarantined"
    """Refused for what the mail is; the row moves to quarantine with the reason."""
    KEPT = "kept"
    """The database was away or busy; the row and every later one stay, in order."""


def decide_forward(error: BaseException | None) -> ForwardOutcome:
    """The fate of a spooled row, from what writing it raised.

    A refusal of the mail itself (a job id replayed with other fields, an unknown target,
    bad data, a statement the server refused) is never retried: it is quarantined. The
    database away, busy or turning BirdDog's login away concerns every row, so all stay.

    Args:
        error: what the write raised; None when it returned.

    Returns:
        The fate.
    """
    if error is None:
        return ForwardOutcome.FORWARDED
    if isinstance(error, StoreRefused):
        return ForwardOutcome.QUARANTINED
    if isinstance(error, StoreUnavailable | DatabaseRefused):
        return ForwardOutcome.KEPT
    if isinstance(error, BirdDogError):
        return ForwardOutcome.QUARANTINED
    return ForwardOutcome.KEPT


@dataclass(frozen=True, slots=True)
class SpoolRow:
    """One waiting row, as stored (decoding it is the forwarder's, so a bad row is caught).

    Attributes:
        id: its place in spool order.
        spooled_at: when it was spooled.
        key: the mail key it was stored under.
        body: the stored JSON of the :class:`Outgoing`.
    """

    id: int
    spooled_at: datetime
    key: str
    body: str | bytes


@dataclass(frozen=True, slots=True)
class SpoolStatus:
    """What a spool holds.

    Attributes:
        path: the spool file.
        mails: spooled mails waiting to be forwarded.
        quarantined: mails set aside, each with its reason.
        bytes: the bytes of mail the spool holds, waiting or quarantined (what
            ``BIRDDOG_SPOOL_MAX_BYTES`` bounds).
        oldest_at: when the oldest waiting mail was spooled; None when none waits.
        last_error: the last forward attempt's failure, None after a clean one.
        last_error_at: when that failure happened.
        last_forward_at: when a forward last ran to its end.
        elsewhere: the waiting mail not meant for this spool's database, by destination
            (:meth:`Destination.describe`, or :data:`UNRECORDED`): how many and since when.
            Included in ``mails``; never forwarded here (``spool forward --adopt`` does).
    """

    path: str
    mails: int
    quarantined: int
    bytes: int
    oldest_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None
    last_forward_at: datetime | None
    elsewhere: tuple[tuple[str, int, datetime], ...] = ()

    def oldest_age_s(self, now: datetime) -> float | None:
        """Seconds since the oldest waiting mail was spooled (None: the spool is empty)."""
        return None if self.oldest_at is None else max(0.0, (now - self.oldest_at).total_seconds())


def full_message(status: SpoolStatus, *, max_bytes: int, now: datetime) -> str:
    """The refusal of a full spool: how many mails it holds and since when.

    Args:
        status: the spool's status when the mail was refused.
        max_bytes: the bound (``BIRDDOG_SPOOL_MAX_BYTES``).
        now: the current time.

    Returns:
        E.g. ``spool full: 1204 mails, oldest spooled 2026-01-01 10:00:00Z (3h 02m ago);
        256.0 MiB of 256.0 MiB (BIRDDOG_SPOOL_MAX_BYTES); nothing was written``.
    """
    age = status.oldest_age_s(now)
    if status.oldest_at is None or age is None:
        oldest = "none waiting"
    else:
        at = status.oldest_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        oldest = f"oldest spooled {at} ({format_age(age)} ago)"
    held = f"{status.mails} {'mail' if status.mails == 1 else 'mails'}, {oldest}"
    if status.quarantined:
        held += f", {status.quarantined} quarantined"
    return (
        f"spool full: {held}; {_size(status.bytes)} of {_size(max_bytes)} "
        "(BIRDDOG_SPOOL_MAX_BYTES); nothing was written"
    )


def _size(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def aged_reason(max_age_s: float) -> str:
    """Why mail spooled longer than ``max_age_s`` is quarantined, not sent late.

    Args:
        max_age_s: the spool's age limit (``BIRDDOG_SPOOL_MAX_AGE_S``).
    """
    return (
        f"spooled longer than BIRDDOG_SPOOL_MAX_AGE_S ({format_age(max_age_s)}) "
        "without reaching the database; never forwarded"
    )


__all__ = [
    "DEFAULT_SPOOL_MAX_AGE_S",
    "DEFAULT_SPOOL_MAX_BYTES",
    "UNRECORDED",
    "Destination",
    "ForwardOutcome",
    "Outgoing",
    "SpoolRow",
    "SpoolStatus",
    "aged_reason",
    "decide_forward",
    "full_message",
    "meant_for",
    "outgoing_from_json",
    "with_created_at",
]
