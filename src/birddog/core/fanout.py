"""Fan-out: the replies a settled job owes, one per ``replyTo`` address."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import InvalidInput
from birddog.core.jobs import Job, JobState, check_content_size, decode_agent_job
from birddog.core.mail import OUTCOMES_WITH_DIAGNOSTIC, Outcome, Reply, ReplyFacts, reply_key

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def created_at_ms(now: datetime) -> int:
    """A settlement time as a reply's ``createdAt``: whole milliseconds, rounded down.

    Integer arithmetic, not ``timestamp() * 1000``: the float product can fall a hair
    below a whole millisecond and round to the one before, which the database's own
    derivation of the same reply (``floor(extract(epoch ...) * 1000)``) never does.

    Args:
        now: a timezone-aware time.

    Returns:
        The milliseconds since 1970-01-01 UTC.
    """
    return (now - _EPOCH) // timedelta(milliseconds=1)


def reply_diagnostic(outcome: Outcome, diagnostic: str | None) -> str | None:
    """The diagnostic a reply carries: bounded, for failed, interrupted, outcome_unknown only.

    Args:
        outcome: how the work ended.
        diagnostic: the session's terminal diagnostic.

    Returns:
        The diagnostic for the reply, or None.
    """
    if diagnostic is None or outcome not in OUTCOMES_WITH_DIAGNOSTIC:
        return None
    return bounded_diagnostic(diagnostic)


def empty_reply_text(outcome: Outcome) -> str:
    """The content of a reply whose settlement had no text, so a reply is never empty."""
    return f"The delegated work ended {outcome.value} without reply text."


def replies_for(
    job: Job,
    *,
    content: str,
    diagnostic: str | None = None,
    now: datetime,
    max_content_bytes: int,
) -> list[Reply]:
    """The replies a settled job owes.

    Args:
        job: the settled job; its payload must be a BirdDog agent job.
        content: the text owed to correspondents (for a cancelled job, the cancellation
            result), delivered verbatim.
        diagnostic: the session's terminal diagnostic; kept, bounded, only for
            ``failed``, ``interrupted`` and ``outcome_unknown``.
        now: the settlement time, the replies' ``createdAt``.
        max_content_bytes: the largest content allowed.

    Returns:
        One reply per ``replyTo`` address, in list order; none when the job has no mail.

    Raises:
        InvalidInput: the job is not settled, or the content is not storable or too large.
        InvalidJobPayload: the job's payload is not a BirdDog agent job.
    """
    if job.state is not JobState.SETTLED or job.outcome is None:
        raise InvalidInput("fan-out needs a settled job with an outcome", field="state")
    if not isinstance(content, str):
        raise InvalidInput("content must be a string", field="content")
    check_content_size(content, limit_bytes=max_content_bytes)
    payload = decode_agent_job(job)
    mail = payload.mail
    if mail is None:
        return []
    outcome = job.outcome
    facts = ReplyFacts(
        command_id=payload.command_fact_id,
        outcome=outcome,
        diagnostic=reply_diagnostic(outcome, diagnostic),
    )
    text = content or empty_reply_text(outcome)
    created_at = created_at_ms(now)
    return [
        Reply(
            key=reply_key(mail.key, index),
            in_reply_to=mail.key,
            to=address,
            from_=mail.to,
            content=text,
            created_at=created_at,
            reply=facts,
        )
        for index, address in enumerate(mail.reply_to)
    ]
