"""Fan-out: the replies a settled job owes, one per ``replyTo`` address."""

from __future__ import annotations

from datetime import datetime

from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import InvalidInput
from birddog.core.jobs import Job, JobState, check_content_size, decode_agent_job
from birddog.core.mail import OUTCOMES_WITH_DIAGNOSTIC, Outcome, Reply, ReplyFacts, reply_key


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
        diagnostic=(
            bounded_diagnostic(diagnostic)
            if diagnostic is not None and outcome in OUTCOMES_WITH_DIAGNOSTIC
            else None
        ),
    )
    text = content or empty_reply_text(outcome)
    created_at = int(now.timestamp() * 1000)
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
