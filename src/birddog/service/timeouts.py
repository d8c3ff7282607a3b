"""The timeout rules of sends and asks, written once: the defaults, the deadline, the error.

- ``timeout_s`` bounds the whole call it is given to: the wait for a database connection
  to send, the wait for the reply, and the look at where the ask stands once the wait
  ends (:data:`FACTS_TIMEOUT_S` at most). A :class:`Deadline` is taken when the call
  begins, and every step gets what is left of it.
- No reply in time is :class:`~birddog.AskTimedOut`, never an empty answer: its message
  (:func:`still_owed`) says where the ask stands and where the reply will land; for a mail
  still in the local spool, :func:`still_spooled` says so instead. The message always
  names the whole call's ``timeout_s``, not what was left of it after the send.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Final

from birddog.core.ask import address_text
from birddog.core.ask_facts import waiting_message
from birddog.core.errors import AskTimedOut
from birddog.core.text import printable

if TYPE_CHECKING:
    from birddog.core.ask_facts import AskFacts
    from birddog.core.mail import AgentAddress

__all__ = [
    "DEFAULT_ASK_TIMEOUT_S",
    "DEFAULT_SEND_TIMEOUT_S",
    "FACTS_TIMEOUT_S",
    "Deadline",
    "still_owed",
    "still_spooled",
]

DEFAULT_ASK_TIMEOUT_S: Final = 240.0
"""How long an ask waits for its reply by default (complex questions take minutes)."""

DEFAULT_SEND_TIMEOUT_S: Final = 30.0
"""How long a send waits for a free database connection by default."""

FACTS_TIMEOUT_S: Final = 0.5
"""The longest look, after a wait ends without a reply, at where the ask stands.

An ask times out within its timeout plus a second (measured: a thousand ending at once on
a pool of ten, on an otherwise quiet 2-core machine), however many end at once: a look
that does not fit leaves the message without the facts, not the caller late. A starved
machine adds its own lag on top.
"""


class Deadline:
    """The moment a call runs out of time, on the running event loop's clock.

    Args:
        timeout_s: how long the call may take from now (negative: none at all).
    """

    def __init__(self, timeout_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.timeout_s = max(timeout_s, 0.0)
        self.at = self._loop.time() + self.timeout_s

    def left(self) -> float:
        """Seconds left before the deadline (0 once it passed)."""
        return max(self.at - self._loop.time(), 0.0)

    def waited(self) -> float:
        """Seconds since the call began."""
        return self.timeout_s - (self.at - self._loop.time())

    @property
    def passed(self) -> bool:
        """Whether no time is left."""
        return self._loop.time() >= self.at


def still_owed(
    key: str, asker: AgentAddress, timeout_s: float, facts: AskFacts | None = None
) -> AskTimedOut:
    """The error for no reply within ``timeout_s``, saying where the ask stands.

    Args:
        key: the ask's mail key.
        asker: whose mailbox the reply goes to.
        timeout_s: how long the call waited.
        facts: what the database says about the ask (None: unknown).

    Returns:
        The error (its message from :func:`~birddog.core.ask_facts.waiting_message`).
    """
    text = address_text(asker)
    return AskTimedOut(
        waiting_message(facts, key=key, asker=text, timeout_s=timeout_s),
        key=key,
        asker=text,
        facts=facts,
    )


def still_spooled(key: str, asker: AgentAddress, timeout_s: float) -> AskTimedOut:
    """The error for no reply within ``timeout_s`` while the mail itself is still spooled.

    Args:
        key: the ask's mail key.
        asker: whose mailbox the reply goes to.
        timeout_s: how long the call waited.

    Returns:
        The error (``spooled``): the mail waits in the local spool, and where its reply
        will land.
    """
    text = address_text(asker)
    shown = printable(text)
    return AskTimedOut(
        f"no reply to {printable(key)!r} within {timeout_s:g} s: the mail is still in the local "
        f"spool (the database is unreachable) and is forwarded once it answers; the reply will "
        f"land in the mailbox of {shown} (birddog inbox {shown})",
        key=key,
        asker=text,
        spooled=True,
    )
