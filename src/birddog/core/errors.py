"""Errors raised by BirdDog.

Every error BirdDog raises on purpose derives from one root::

    BirdDogError
    ├── InvalidInput (also a ValueError): bad input, refused before anything is written
    │   ├── InvalidJobPayload: a job payload that is not a BirdDog agent job
    │   ├── ContentTooLarge: mail or reply content above the configured limit
    │   ├── InvalidSecret: a signing secret that is not ``whsec_<base64>``
    │   ├── InvalidSetting: a setting that cannot work as given (named, never echoed)
    │   ├── UnknownAgent: an ask to an agent session BirdDog has never heard of
    │   └── NotAMailbox: kept for callers that catch it; no longer raised
    ├── JobConflict: a replayed job id whose fields differ from the stored job
    ├── JobNotFound: no job with that id
    ├── StaleClaim: a claim token that no longer holds the job
    ├── WorkCancelled: a handler's work was cancelled where it ran (the job: cancelled)
    ├── RouteNotFound: no route for that agent id
    ├── AgentNotFound: no agent with that id was added (``birddog agent add``)
    ├── AskFailed: an asked question whose work ended otherwise than ``completed``
    ├── AskTimedOut: no reply to an ask in time (it is still owed to the mailbox)
    ├── StoreUnavailable: the database could not be reached or failed mid-operation
    │   ├── StoreUnreachable: no connection could be opened (nothing reached the database)
    │   ├── StoreRefused: the database refused a statement (its data, not the connection)
    │   └── StoreBusy: no database connection was free in time (nothing was done)
    ├── SpoolFull: the local spool holds as much as it may (nothing was written)
    ├── SpoolFailed: the local spool could not be read or written (nothing was written)
    ├── DatabaseRefused: the database turned BirdDog away for good (login, name, URL)
    ├── UnreadableRow: a stored row that is not what BirdDog wrote (SQL, another version)
    ├── SecretUnreadable: a sealed secret that no configured BIRDDOG_SECRET_KEY opens
    └── InboxRefused: the recipient's inbox refused a delivered reply
        ├── InvalidSignature: missing headers or no matching Standard Webhooks signature
        ├── StaleTimestamp: a signed timestamp outside the tolerance (a replay or skew)
        ├── MalformedReply: a body that is not a reply, or whose key is not the webhook-id
        └── ReplyMismatch: a reply that does not answer the mail it claims to answer

Most classes are a docstring that doubles as the default message.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from birddog.core.ask_facts import AskFacts


class BirdDogError(Exception):
    """BirdDog failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or "").strip())


class InvalidInput(BirdDogError, ValueError):
    """The input is invalid.

    Attributes:
        field: the first offending field, dotted, with JSON (camelCase) names; "" when the
            whole value is wrong.
        errors: every problem found, as ``(field, message)`` pairs.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        field: str = "",
        errors: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.field = field
        self.errors: list[tuple[str, str]] = list(errors) or ([(field, message)] if message else [])
        super().__init__(message)

    @classmethod
    def from_pydantic(cls, model: str, errors: Sequence[Any]) -> InvalidInput:
        """Build the error from pydantic's error list, naming each field.

        Args:
            model: the name of the model or function that refused the input.
            errors: ``ValidationError.errors()`` of the refused input.

        Returns:
            An error whose message names every offending field.
        """
        pairs = [(_dotted(err["loc"]), str(err["msg"])) for err in errors]
        text = "; ".join(f"{field or '(value)'}: {msg}" for field, msg in pairs)
        first = pairs[0][0] if pairs else ""
        return cls(f"invalid {model}: {text}", field=first, errors=pairs)


def _dotted(loc: Sequence[int | str]) -> str:
    return ".".join(_json_name(part) for part in loc)


def _json_name(part: int | str) -> str:
    """The JSON (camelCase) name of a field, whichever name the caller used."""
    if isinstance(part, int):
        return str(part)
    head, *rest = part.rstrip("_").split("_")
    return head + "".join(word.capitalize() for word in rest)


class InvalidJobPayload(InvalidInput):
    """The job's payload is not a BirdDog agent job."""


class ContentTooLarge(InvalidInput):
    """The content is larger than the configured limit."""


class InvalidSetting(InvalidInput):
    """A setting cannot work as given; its ``field`` is the environment variable to change.

    The message names the setting and never repeats its value (it may be a secret).
    """


class UnknownAgent(InvalidInput):
    """Nobody can be known to serve this agent session: ask an agent with a route."""


class NotAMailbox(InvalidInput):
    """Kept for callers that catch it; BirdDog no longer raises it.

    An ask from an agent whose route posts to an inbox URL was refused with it; such an ask
    is now marked so that its reply lands in the asker's mailbox (``askerMailbox``).
    """


class JobConflict(BirdDogError):
    """A job with this id exists with different fields; a replay must match exactly."""


class JobNotFound(BirdDogError):
    """No job has this id."""


class WorkCancelled(BirdDogError):
    """The work was cancelled where it ran (e.g. a remote A2A agent's task ended CANCELED).

    A handler raises it to settle its job ``cancelled`` (not ``failed``); the replies carry
    ``content``.

    Attributes:
        content: the cancellation result the replies carry (empty: the default text).
    """

    def __init__(self, content: str = "") -> None:
        self.content = content
        super().__init__("the work was cancelled where it ran")


class StaleClaim(BirdDogError):
    """The claim token no longer holds this job: another claim or a settlement won."""


class RouteNotFound(BirdDogError):
    """No route is configured for this agent id."""


class AgentNotFound(BirdDogError):
    """No agent with this id was added (add it with ``birddog agent add``)."""


class AskFailed(BirdDogError):
    """The asked work did not complete.

    Attributes:
        key: the mail key of the ask.
        outcome: how the work ended (``failed``, ``interrupted``, ``cancelled``,
            ``outcome_unknown``), or why the reply could not be read.
        diagnostic: why, when the outcome carries a diagnostic.
        content: the reply's content (a cancellation's result, or the text that says the
            work ended without reply text).
    """

    def __init__(
        self, message: str, *, key: str, outcome: str, diagnostic: str | None, content: str
    ) -> None:
        self.key = key
        self.outcome = outcome
        self.diagnostic = diagnostic
        self.content = content
        super().__init__(message)


class AskTimedOut(BirdDogError):
    """No reply to the ask arrived in time; it is still owed and will land in the mailbox.

    The message says where the ask stands (queued, running, its reply pending or dead),
    from ``facts``.

    Attributes:
        key: the mail key of the ask.
        asker: ``AGENT:SESSION`` of the mailbox the reply will land in.
        facts: what the database said about the ask when the wait ended
            (:class:`birddog.core.ask_facts.AskFacts`; None: it could not be read).
        spooled: True when the mail itself still waits in the local spool (the database
            has not taken it yet).
    """

    def __init__(
        self,
        message: str,
        *,
        key: str,
        asker: str,
        facts: AskFacts | None = None,
        spooled: bool = False,
    ) -> None:
        self.key = key
        self.asker = asker
        self.facts = facts
        self.spooled = spooled
        super().__init__(message)


class StoreUnavailable(BirdDogError):
    """The database could not be reached or failed during the operation."""


class StoreUnreachable(StoreUnavailable):
    """The database could not be reached: no connection opened, so nothing reached it.

    Unlike a connection lost in the middle of a statement, nothing of the operation was
    sent, so nothing of it can have been committed: a sender outside a transaction of its
    own may keep the mail in the local spool and forward it later.
    """


class StoreRefused(StoreUnavailable):
    """The database refused a statement: a value, a constraint, a trigger, a privilege.

    The connection is fine; what failed may be one row's data, so a caller that wrote
    several rows at once can try them one by one and set the one that fails aside.
    """


class StoreBusy(StoreUnavailable):
    """No database connection was free in time; nothing was done.

    Many callers share a small pool; one with a deadline gives up waiting for a
    connection rather than overrun it. Trying again later may succeed.
    """


class SpoolFull(BirdDogError):
    """The local spool is full; nothing was written and no spooled mail was dropped."""


class SpoolFailed(BirdDogError):
    """The local spool could not be read or written; nothing was written to it."""


class DatabaseRefused(BirdDogError):
    """The database refused the connection for a reason retrying cannot fix.

    A failed login, a role or database that does not exist, a missing CONNECT privilege,
    or a URL that cannot be parsed: the configuration must change.
    """


class SchemaMissing(DatabaseRefused):
    """The database has no birddog schema, or an older one than this BirdDog: run `birddog migrate`.

    Nothing was written. Retrying cannot help: the schema must be created or upgraded
    first (``birddog migrate``, or ``birddog run --migrate`` for a single daemon).
    """


class UnreadableRow(BirdDogError):
    """A stored row cannot be read as what BirdDog wrote there.

    Attributes:
        field: the first offending column or field, dotted, with JSON names.
    """

    def __init__(self, message: str | None = None, *, field: str = "") -> None:
        self.field = field
        super().__init__(message)


class SecretUnreadable(BirdDogError):
    """A stored secret is sealed with a key BirdDog was not given, or does not open.

    Set ``BIRDDOG_SECRET_KEY`` (or ``BIRDDOG_SECRET_KEY_PREVIOUS``) to the key that sealed
    it. The message names the key id, never a key or a secret.
    """


class InvalidSecret(InvalidInput):
    """The signing secret must be ``whsec_`` followed by base64."""


class InboxRefused(BirdDogError):
    """The inbox refused the delivery."""


class InvalidSignature(InboxRefused):
    """The delivery carries no valid Standard Webhooks signature for this inbox's secret."""


class StaleTimestamp(InboxRefused):
    """The delivery's signed timestamp is outside the tolerance: a replay or a skewed clock."""


class MalformedReply(InboxRefused):
    """The delivery's body is not a valid BirdDog reply."""


class ReplyMismatch(InboxRefused):
    """The reply does not answer the mail it names.

    Attributes:
        field: the reply field (JSON name) that does not match: ``inReplyTo``, ``key``,
            ``to`` or ``from``.
    """

    def __init__(self, message: str | None = None, *, field: str = "") -> None:
        self.field = field
        super().__init__(message)
