"""What a mailbox holds: a reply delivered into the mailbox table, until its agent reads it.

The reading side (:class:`birddog.postgres.mailbox.PostgresMailbox`) returns these; the
ask waits for one (:mod:`birddog.service.mail`); the MCP tools list them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from birddog.core.mail import AgentAddress, Outcome, Reply


@dataclass(frozen=True, slots=True)
class MailboxEntry:
    """One reply in a mailbox.

    Attributes:
        key: the reply key, ``outbox:<mail key>:reply:<index>``.
        agent_id: the agent it is addressed to.
        session_id: the session it is addressed to.
        in_reply_to: the key of the mail it answers.
        command_id: the command fact id of the work that settled.
        outcome: how that work ended.
        reply: the reply itself; None when the stored JSON is not a reply this version
            can read (then ``problem`` says why).
        delivered_at: when it was delivered into the mailbox.
        read_at: when it was acknowledged (None while unread).
        problem: why ``reply`` could not be read, else None.
    """

    key: str
    agent_id: str
    session_id: str
    in_reply_to: str
    command_id: str
    outcome: Outcome | str
    reply: Reply | None
    delivered_at: datetime
    read_at: datetime | None = None
    problem: str | None = None

    @property
    def content(self) -> str:
        """The reply's content ("" when the reply could not be read)."""
        return self.reply.content if self.reply is not None else ""

    @property
    def diagnostic(self) -> str | None:
        """Why the work did not complete, when the outcome carries a diagnostic."""
        if self.reply is None:
            return self.problem
        return self.reply.reply.diagnostic

    @property
    def sender(self) -> AgentAddress | None:
        """The agent session that answered (the mail's recipient)."""
        return self.reply.from_ if self.reply is not None else None

    def addressed_to(self, address: AgentAddress) -> bool:
        """Whether this reply is in ``address``'s mailbox (its agent and its session)."""
        return (self.agent_id, self.session_id) == (address.agent_id, address.session_id)
