"""BirdDog: a durable, PostgreSQL-backed mail room for AI agents.

One agent sends work to another agent's session; the work runs as a job; when it
settles, every address on the mail's ``replyTo`` list gets a reply, written to a durable
outbox and delivered with bounded retries. A reply succeeds, fails loudly (a dead letter
with an alert), or sits visibly pending; it never vanishes.
"""

from birddog.asking import Asked, Asking, open_asking
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
    StaleClaim,
    StoreBusy,
    StoreRefused,
    StoreUnavailable,
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
from birddog.core.mail import AgentAddress, Mail, Outcome, Reply, ReplyFacts, reply_key
from birddog.core.schedule import RetrySchedule
from birddog.mailroom import PAGE_SIZE, DrainReport, MailRoom, has_pending_delivery
from birddog.ports import Clock, Outbox, Page, Route, RouteBook, Transport, WakeScheduler

decide = decide_delivery
"""The name :func:`decide_delivery` had before it was told apart from the job's decision."""

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
    "Mail",
    "MailRoom",
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
    "StaleClaim",
    "StoreBusy",
    "StoreRefused",
    "StoreUnavailable",
    "Transport",
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
    "replies_for",
    "reply_key",
]
