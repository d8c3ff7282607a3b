"""What a send came to (:class:`Asked`), how a question is composed, and how a reply reads.

:func:`compose` checks a send's or an ask's arguments and makes the mail's job, before
anything is written; :func:`answer_of` turns the reply in the asker's mailbox into the
answer, or the error that says how the work ended otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from birddog.clock import epoch_ms
from birddog.core.ask import address_text, ask_job, new_mail_key, parse_address
from birddog.core.errors import AskFailed
from birddog.core.kinds import DEFAULT_KIND, Kind, check_interactive
from birddog.core.mail import AgentAddress, Outcome
from birddog.core.spool import Outgoing

if TYPE_CHECKING:
    from birddog.core.mailbox import MailboxEntry

__all__ = ["Asked", "answer_of", "compose"]


@dataclass(frozen=True, slots=True)
class Asked:
    """A mail that is on its way (or was already, for a replay).

    Attributes:
        key: the mail key; the reply's ``inReplyTo``.
        job_id: the job that runs it.
        to: the agent session asked.
        asker: the agent session that sent it (whose mailbox gets an ask's reply).
        replay: True when this key had been sent before (nothing new was written).
        mailbox_added: True when the sender got a mailbox route by this send.
        spooled: why the mail waits in the local spool instead of the database (``database
            unreachable``), to be forwarded once it can be (a service with a spool);
            None when it reached the database.
    """

    key: str
    job_id: str
    to: AgentAddress
    asker: AgentAddress
    replay: bool
    mailbox_added: bool
    spooled: str | None = None

    @classmethod
    def of(
        cls, outgoing: Outgoing, *, replay: bool, mailbox_added: bool, spooled: str | None = None
    ) -> Asked:
        """What sending ``outgoing`` came to.

        Args:
            outgoing: the mail sent.
            replay: its key (or job id) had been sent before.
            mailbox_added: the sender got a mailbox route.
            spooled: why it waits in the local spool (None: it reached the database).
        """
        mail = outgoing.mail
        return cls(
            key=mail.key,
            job_id=outgoing.job.job_id,
            to=mail.to,
            asker=mail.from_,
            replay=replay,
            mailbox_added=mailbox_added,
            spooled=spooled,
        )

    @property
    def asker_text(self) -> str:
        """``AGENT:SESSION`` of the asker, as ``birddog inbox`` takes it."""
        return address_text(self.asker)


def compose(
    *,
    to: str | AgentAddress,
    from_: str | AgentAddress,
    content: str,
    key: str | None,
    reply_to: Sequence[str | AgentAddress] | None,
    mailbox_required: bool,
    priority: int,
    now: datetime,
    kind: Kind = DEFAULT_KIND,
    token: str,
    max_content_bytes: int,
) -> Outgoing:
    """The mail a send would write, checked, and how its write is checked.

    Args:
        to: the agent session addressed, ``AGENT:SESSION`` or an address.
        from_: the sending agent session.
        content: the mail's content.
        key: the mail key; None makes a fresh one from ``now`` and ``token``
            (:func:`~birddog.core.ask.new_mail_key`: ``ask-...`` for an ask, else
            ``mail-...``).
        reply_to: who gets the replies (None: the sender; empty: nobody).
        mailbox_required: an ask: the reply to the sender lands in its mailbox, whatever
            its route.
        priority: -32768 to 32767, higher first among the session's queued jobs.
        now: the mail's ``createdAt``.
        token: random hex for a fresh key.
        max_content_bytes: the largest content allowed.
        kind: what the mail is for; an ask (``mailbox_required``) only an interactive one.

    Returns:
        The job, and that the write checks it (the sender gets a mailbox route when it has
        none and is on ``reply_to``).

    Raises:
        InvalidInput: a bad address, key or content, naming the field.
        ContentTooLarge: the content is above ``max_content_bytes``.
    """
    if mailbox_required:
        check_interactive(kind)
    target = parse_address(to, "to")
    sender = parse_address(from_, "from")
    replies = (
        [sender]
        if reply_to is None
        else [parse_address(value, f"replyTo.{index}") for index, value in enumerate(reply_to)]
    )
    job = ask_job(
        to=target,
        asker=sender,
        content=content,
        # A fresh key says what the mail is: an ask's (its reply awaited in the asker's
        # mailbox) is ask-..., any other send's mail-... (its job send:...).
        key=key if key is not None else new_mail_key(now, token, asking=mailbox_required),
        created_at_ms=epoch_ms(now),
        max_content_bytes=max_content_bytes,
        reply_to=replies,
        priority=priority,
        kind=kind,
    )
    return Outgoing(
        job=job,
        checked=True,
        mailbox_for=sender if sender in replies else None,
        require_mailbox=mailbox_required,
    )


def answer_of(entry: MailboxEntry, key: str) -> str:
    """The content of a completed reply; any other reply raises.

    Args:
        entry: the reply, from the asker's mailbox.
        key: the mail key it answers.

    Returns:
        The content (never empty: an empty settlement says so in words).

    Raises:
        AskFailed: the work ended otherwise than ``completed``, or the reply cannot be read.
    """
    if entry.reply is not None and entry.outcome == Outcome.COMPLETED:
        return entry.content
    outcome = str(entry.outcome) if entry.reply is not None else "unreadable"
    diagnostic = entry.diagnostic
    who = address_text(entry.sender) if entry.sender is not None else "the agent asked"
    message = f"{who} ended {outcome}" + (f": {diagnostic}" if diagnostic else "")
    raise AskFailed(message, key=key, outcome=outcome, diagnostic=diagnostic, content=entry.content)
