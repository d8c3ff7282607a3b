"""Agent jobs: addressed work translated into an opaque Watchdog-shaped job and back."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AwareDatetime, Field, JsonValue

from birddog.core.errors import ContentTooLarge, InvalidInput, InvalidJobPayload, JobConflict
from birddog.core.kinds import DEFAULT_KIND, Kind, parse_kind
from birddog.core.mail import Mail, Outcome
from birddog.core.model import Id, Model, check_text

DEFAULT_LANE = "default"
"""All agent work runs on Watchdog's default lane."""

RESERVED_QUEUE_PREFIX = "birddog:"
"""Queues (sessions) BirdDog keeps for itself, such as its probe's: a worker claims from
them only when it names them (``--queue``), never when it takes every queue."""


class JobState(StrEnum):
    """Where a job is in its life: queued, then running, then settled."""

    QUEUED = "queued"
    RUNNING = "running"
    SETTLED = "settled"


class Recovery(Model):
    """The recovery policy: how many times a job whose worker vanished is queued again."""

    max_recoveries: Annotated[int, Field(strict=True, ge=0, le=1000)]


class AgentWork(Model):
    """The work half of an agent job: which job, for which session, for which command."""

    job_id: Id
    session_id: Id
    command_fact_id: Id
    recovery: Recovery | None = None


Priority = Annotated[int, Field(strict=True, ge=-32768, le=32767)]
"""A job's priority: higher runs first within its queue (a smallint; 0 by default)."""

MAX_EXPIRES_IN_S = 366 * 86_400.0
"""The longest ``expires_in_s``: a year and a day."""

ExpiresIn = Annotated[float, Field(gt=0, le=MAX_EXPIRES_IN_S, allow_inf_nan=False)]
"""Seconds after its enqueue at which a job no worker took is cancelled."""


class Job(Model):
    """A Watchdog job. BirdDog's job store never reads ``payload``.

    ``not_before`` and ``expires_in_s`` are the job store's own timing, beside the
    Watchdog fields (absent from the job's JSON when unset, as for a seed's job): a job
    is not claimed before ``not_before``, and one still queued ``expires_in_s`` after its
    enqueue is cancelled with a reason that says so, its replies fanned out.
    """

    job_id: Id
    queue: Id
    lane: Id = DEFAULT_LANE
    priority: Priority = 0
    state: JobState = JobState.QUEUED
    payload: dict[str, JsonValue]
    recovery: Recovery | None = None
    outcome: Outcome | None = None
    not_before: AwareDatetime | None = None
    expires_in_s: ExpiresIn | None = None


class AgentJobPayload(Model):
    """What an agent job carries: the session, the command fact, the optional mail, its kind.

    ``kind`` is absent from the payload's JSON for a ``task`` (so a task's payload is the
    TypeScript BirdDog's), present for any other kind; it is never inside the mail.
    ``asker_mailbox`` (``askerMailbox``, present only when true) marks an ask: the
    settlement delivers the reply to the asker into its mailbox, where the ask waits,
    whatever its route is then (``birddog.send_mail`` sets it on every ask, never on a
    plain send).
    """

    session_id: Id
    command_fact_id: Id
    mail: Mail | None = None
    kind: Kind = DEFAULT_KIND
    asker_mailbox: bool = Field(default=False, strict=True)

    def as_payload(self) -> dict[str, JsonValue]:
        """The payload's JSON: ``kind`` unless ``task``, ``askerMailbox`` if true, no nulls."""
        fields = self.model_dump(mode="json", exclude_none=True, exclude={"kind", "asker_mailbox"})
        if self.kind is not DEFAULT_KIND:
            fields["kind"] = self.kind.value
        if self.asker_mailbox:
            fields["askerMailbox"] = True
        return fields


def agent_job(
    work: AgentWork,
    mail: Mail | None = None,
    *,
    max_content_bytes: int | None = None,
    priority: int = 0,
    not_before: datetime | None = None,
    expires_in_s: float | None = None,
    kind: Kind | str | None = None,
) -> Job:
    """Validate addressed work and return the queued job that runs it.

    Pure and synchronous, so it can run inside the caller's transaction before
    ``enqueue_accepted_job``. Without the keyword options the job is the seed's
    ``agentJob``: priority 0, claimable at once, bounded only by the maximum queued age.

    Args:
        work: the job id, target session, command fact id and optional recovery policy.
        mail: the request whose replies the settlement owes, addressed to ``work``'s session.
        max_content_bytes: the largest mail content, in UTF-8 bytes (default
            :data:`DEFAULT_MAX_CONTENT_BYTES`, 1 MiB; ``BIRDDOG_MAX_CONTENT_BYTES`` for the CLI).
        priority: -32768 to 32767; a higher priority runs first among the queued jobs of
            its session (default 0).
        not_before: the job is not claimed before this time (timezone-aware).
        expires_in_s: a job no worker claimed this many seconds after its enqueue is
            cancelled, and its replies say so.
        kind: what the mail is for (:class:`birddog.core.kinds.Kind`): ``task`` (the
            default), ``escalation``, ``report`` or ``receipt``.

    Returns:
        A queued job: queue = the session id, lane ``default``.

    Raises:
        InvalidInput: ``mail.to.sessionId`` is not the work's session, a timing option
            is out of range (naming it), or ``kind`` is none of the four.
        ContentTooLarge: the mail's content is above ``max_content_bytes``.
    """
    chosen = parse_kind(kind)
    if mail is not None:
        limit = DEFAULT_MAX_CONTENT_BYTES if max_content_bytes is None else max_content_bytes
        check_content_size(mail.content, limit_bytes=limit, field="mail.content")
    if mail is not None and mail.to.session_id != work.session_id:
        raise InvalidInput(
            f"mail.to.sessionId {mail.to.session_id!r} is not the work's session "
            f"{work.session_id!r}",
            field="mail.to.sessionId",
        )
    payload = AgentJobPayload(
        session_id=work.session_id, command_fact_id=work.command_fact_id, mail=mail, kind=chosen
    )
    return Job(
        job_id=work.job_id,
        queue=work.session_id,
        priority=priority,
        payload=payload.as_payload(),
        recovery=work.recovery,
        not_before=not_before,
        expires_in_s=expires_in_s,
    )


def decode_agent_job(job: Job | dict[str, Any]) -> AgentJobPayload:
    """Read an agent job's payload back on the executor side.

    Args:
        job: the claimed job (or its JSON form).

    Returns:
        The session id, command fact id and mail the job was made with.

    Raises:
        InvalidJobPayload: the payload is not a BirdDog agent job, naming the field.
    """
    try:
        if not isinstance(job, Job):
            job = Job.model_validate(job)
        payload = AgentJobPayload.model_validate(job.payload)
    except InvalidInput as exc:
        raise InvalidJobPayload(
            f"not a BirdDog agent job: {exc}", field=exc.field, errors=exc.errors
        ) from None
    if payload.session_id != job.queue:
        raise InvalidJobPayload(
            f"payload sessionId {payload.session_id!r} is not the job's queue {job.queue!r}",
            field="sessionId",
        )
    if payload.mail is not None and payload.mail.to.session_id != payload.session_id:
        raise InvalidJobPayload(
            "payload mail.to.sessionId is not the payload's sessionId", field="mail.to.sessionId"
        )
    return payload


def check_content_size(content: str, *, limit_bytes: int, field: str = "content") -> None:
    """Refuse content above the configured size limit.

    Args:
        content: the text to measure, in UTF-8 bytes.
        limit_bytes: the largest size allowed.
        field: the field name to report.

    Raises:
        ContentTooLarge: the content is larger than ``limit_bytes``.
    """
    size = len(content.encode("utf-8", "surrogatepass"))
    if size > limit_bytes:
        raise ContentTooLarge(
            f"{field} is {size} bytes, above the limit of {limit_bytes} bytes", field=field
        )


def check_stored_content(content: object, *, limit_bytes: int) -> None:
    """Refuse content a job store cannot keep (a cancellation's, say) before anything is written.

    Args:
        content: what was given.
        limit_bytes: the largest size allowed, in UTF-8 bytes.

    Raises:
        InvalidInput: not a string, or it holds NUL or a lone surrogate.
        ContentTooLarge: it is larger than ``limit_bytes``.
    """
    if not isinstance(content, str):
        raise InvalidInput("content must be a string", field="content")
    try:
        check_text(content)
    except ValueError as exc:
        raise InvalidInput(f"content {exc}", field="content") from None
    check_content_size(content, limit_bytes=limit_bytes)


DEFAULT_MAX_CONTENT_BYTES = 1_048_576
"""Mail and reply content above 1 MiB is refused unless the limit is raised."""

DEFAULT_MAX_LEASE_S = 3600.0
"""The longest lease ``birddog.limits`` lets a claim or heartbeat take, by default."""

DEFAULT_MAX_HOLD_S = 3600.0
"""How long one running job may hold a queue others wait in before ``birddog check`` says
so, by default (``birddog.limits.max_hold_s``)."""

DEFAULT_CANCEL_GRACE_S = 60.0
"""How long a running job's worker has to stop once it is cancelled before its lease ends,
by default (``birddog.limits.cancel_grace_s``)."""


def carried_mail_key(job: Job) -> str | None:
    """The mail key a job's payload carries (``mail.key``), as the job store reads it.

    A mail key names one job: no two jobs carry the same one, so the replies to a mail
    (their visibility and acknowledgement) follow the job that produced them.

    Returns:
        The key as text (None: the payload carries no mail, or its mail no key).
    """
    mail = job.payload.get("mail")
    if not isinstance(mail, dict) or mail.get("key") is None:
        return None
    key = mail["key"]
    return key if isinstance(key, str) else json.dumps(key, separators=(", ", ": "))


def mail_key_taken(key: str | None) -> JobConflict:
    """The refusal of a job whose mail key another job carries (nothing of that job told)."""
    return JobConflict(
        f"mail key {key!r} is carried by another job; a mail key names one job (its "
        "replies follow that job), so send this mail under a new key"
    )


def job_id_taken(job_id: str) -> JobConflict:
    """The refusal of a job id a job the caller may not read holds (nothing of it told)."""
    return JobConflict(f"job id {job_id!r} is taken; enqueue the job under another id")
