"""BirdDog: a durable, PostgreSQL-backed mail room for AI agents.

One agent sends work to another agent's session; the work runs as a job; when it
settles, every address on the mail's ``replyTo`` list gets a reply, written to a durable
outbox and delivered with bounded retries. A reply succeeds, fails loudly (a dead letter
with an alert), or sits visibly pending; it never vanishes.
"""

from typing import TYPE_CHECKING

from birddog.lazy import exports

if TYPE_CHECKING:
    from birddog.bootstrap.clients import open_asking, open_sender
    from birddog.core.batched import MailTurn, TurnAnswer, TurnMail
    from birddog.core.delivery import (
        Accepted,
        DeadReason,
        Deferred,
        DeliveryResult,
        Failed,
        OutboxRow,
        Receipt,
        Rejected,
        RowState,
        decide_delivery,
    )
    from birddog.core.delivery import decide_delivery as decide
    from birddog.core.diagnostic import DIAGNOSTIC_MAX_LENGTH, bounded_diagnostic
    from birddog.core.errors import (
        AskFailed,
        AskTimedOut,
        BirdDogError,
        ContentTooLarge,
        DatabaseRefused,
        InvalidInput,
        InvalidJobPayload,
        InvalidSetting,
        JobConflict,
        JobNotFound,
        NotAMailbox,
        RouteNotFound,
        SchemaMissing,
        SpoolFailed,
        SpoolFull,
        StaleClaim,
        StoreBusy,
        StoreRefused,
        StoreUnavailable,
        StoreUnreachable,
        UnknownAgent,
        UnreadableRow,
    )
    from birddog.core.fanout import empty_reply_text, replies_for
    from birddog.core.jobs import (
        DEFAULT_MAX_CONTENT_BYTES,
        AgentJobPayload,
        AgentWork,
        Job,
        JobState,
        Recovery,
        agent_job,
        decode_agent_job,
    )
    from birddog.core.kinds import Kind
    from birddog.core.mail import AgentAddress, Mail, Outcome, Reply, ReplyFacts, reply_key
    from birddog.core.schedule import RetrySchedule
    from birddog.ports import Clock, Outbox, Page, Route, RouteBook, Transport, WakeScheduler
    from birddog.service.asked import Asked
    from birddog.service.mail import MailService
    from birddog.service.mail import MailService as Asking
    from birddog.service.mail import MailService as Sender
    from birddog.service.mailroom import PAGE_SIZE, DrainReport, MailRoom, has_pending_delivery
    from birddog.turns import turn_handler

# Each public name is imported when first used, so that ``import birddog`` (every CLI
# command starts with it) loads only what the command needs.
_HOMES: dict[str, str] = {
    "Asked": "birddog.service.asked",
    "Asking": "birddog.service.mail",
    "MailService": "birddog.service.mail",
    "Sender": "birddog.service.mail",
    "open_asking": "birddog.bootstrap.clients",
    "open_sender": "birddog.bootstrap.clients",
    "Accepted": "birddog.core.delivery",
    "DeadReason": "birddog.core.delivery",
    "Deferred": "birddog.core.delivery",
    "DeliveryResult": "birddog.core.delivery",
    "Failed": "birddog.core.delivery",
    "OutboxRow": "birddog.core.delivery",
    "Receipt": "birddog.core.delivery",
    "Rejected": "birddog.core.delivery",
    "RowState": "birddog.core.delivery",
    "decide_delivery": "birddog.core.delivery",
    "DIAGNOSTIC_MAX_LENGTH": "birddog.core.diagnostic",
    "bounded_diagnostic": "birddog.core.diagnostic",
    "AskFailed": "birddog.core.errors",
    "AskTimedOut": "birddog.core.errors",
    "BirdDogError": "birddog.core.errors",
    "ContentTooLarge": "birddog.core.errors",
    "DatabaseRefused": "birddog.core.errors",
    "InvalidInput": "birddog.core.errors",
    "InvalidJobPayload": "birddog.core.errors",
    "InvalidSetting": "birddog.core.errors",
    "JobConflict": "birddog.core.errors",
    "JobNotFound": "birddog.core.errors",
    "NotAMailbox": "birddog.core.errors",
    "RouteNotFound": "birddog.core.errors",
    "SchemaMissing": "birddog.core.errors",
    "SpoolFailed": "birddog.core.errors",
    "SpoolFull": "birddog.core.errors",
    "StaleClaim": "birddog.core.errors",
    "StoreBusy": "birddog.core.errors",
    "StoreRefused": "birddog.core.errors",
    "StoreUnavailable": "birddog.core.errors",
    "StoreUnreachable": "birddog.core.errors",
    "UnknownAgent": "birddog.core.errors",
    "UnreadableRow": "birddog.core.errors",
    "empty_reply_text": "birddog.core.fanout",
    "replies_for": "birddog.core.fanout",
    "DEFAULT_MAX_CONTENT_BYTES": "birddog.core.jobs",
    "AgentJobPayload": "birddog.core.jobs",
    "AgentWork": "birddog.core.jobs",
    "Job": "birddog.core.jobs",
    "Kind": "birddog.core.kinds",
    "MailTurn": "birddog.core.batched",
    "TurnAnswer": "birddog.core.batched",
    "TurnMail": "birddog.core.batched",
    "turn_handler": "birddog.turns",
    "JobState": "birddog.core.jobs",
    "Recovery": "birddog.core.jobs",
    "agent_job": "birddog.core.jobs",
    "decode_agent_job": "birddog.core.jobs",
    "AgentAddress": "birddog.core.mail",
    "Mail": "birddog.core.mail",
    "Outcome": "birddog.core.mail",
    "Reply": "birddog.core.mail",
    "ReplyFacts": "birddog.core.mail",
    "reply_key": "birddog.core.mail",
    "RetrySchedule": "birddog.core.schedule",
    "PAGE_SIZE": "birddog.service.mailroom",
    "DrainReport": "birddog.service.mailroom",
    "MailRoom": "birddog.service.mailroom",
    "has_pending_delivery": "birddog.service.mailroom",
    "Clock": "birddog.ports",
    "Outbox": "birddog.ports",
    "Page": "birddog.ports",
    "Route": "birddog.ports",
    "RouteBook": "birddog.ports",
    "Transport": "birddog.ports",
    "WakeScheduler": "birddog.ports",
    "decide": "birddog.core.delivery",
}
# ``decide`` is the name ``decide_delivery`` had before it was told apart from the job's;
# ``Asking`` (without a spool) and ``Sender`` (with one) are the one mail service's names
# from before the two were one class.
_RENAMED = {"decide": "decide_delivery", "Asking": "MailService", "Sender": "MailService"}

__getattr__, __dir__ = exports(__name__, _HOMES, renamed=_RENAMED)

__all__ = [
    "DEFAULT_MAX_CONTENT_BYTES",
    "DIAGNOSTIC_MAX_LENGTH",
    "PAGE_SIZE",
    "Accepted",
    "AgentAddress",
    "AgentJobPayload",
    "AgentWork",
    "AskFailed",
    "AskTimedOut",
    "Asked",
    "Asking",
    "BirdDogError",
    "Clock",
    "ContentTooLarge",
    "DatabaseRefused",
    "DeadReason",
    "Deferred",
    "DeliveryResult",
    "DrainReport",
    "Failed",
    "InvalidInput",
    "InvalidJobPayload",
    "InvalidSetting",
    "Job",
    "JobConflict",
    "JobNotFound",
    "JobState",
    "Kind",
    "Mail",
    "MailRoom",
    "MailService",
    "MailTurn",
    "NotAMailbox",
    "Outbox",
    "OutboxRow",
    "Outcome",
    "Page",
    "Receipt",
    "Recovery",
    "Rejected",
    "Reply",
    "ReplyFacts",
    "RetrySchedule",
    "Route",
    "RouteBook",
    "RouteNotFound",
    "RowState",
    "SchemaMissing",
    "Sender",
    "SpoolFailed",
    "SpoolFull",
    "StaleClaim",
    "StoreBusy",
    "StoreRefused",
    "StoreUnavailable",
    "StoreUnreachable",
    "Transport",
    "TurnAnswer",
    "TurnMail",
    "UnknownAgent",
    "UnreadableRow",
    "WakeScheduler",
    "agent_job",
    "bounded_diagnostic",
    "decide",
    "decide_delivery",
    "decode_agent_job",
    "empty_reply_text",
    "has_pending_delivery",
    "open_asking",
    "open_sender",
    "replies_for",
    "reply_key",
    "turn_handler",
]
