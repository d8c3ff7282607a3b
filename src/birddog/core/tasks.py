"""A sent mail's job as its sender sees it: where the work stands and how it ended.

Protocol adapters that show work as tasks (the A2A endpoint) read jobs as
:class:`SentJob` and never their rows. :func:`bounced` tells a job BirdDog cancelled
because no worker took it in time (the bus's bounce) from one a person cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from birddog.core.jobs import JobState
from birddog.core.lifecycle import BOUNCE_PREFIX
from birddog.core.mail import Mail, Outcome

__all__ = ["SentJob", "bounced", "is_bounce", "spooled_job"]


@dataclass(frozen=True, slots=True)
class SentJob:
    """A job carrying a mail, as its sender may read it.

    Attributes:
        job_id: the job.
        queue: the job's queue (the addressed session).
        state: queued, running or settled.
        outcome: how it settled (None until then).
        result: the settlement's content (None until settled, or none was stored).
        diagnostic: the bounded diagnostic of the settlement, if any.
        mail: the mail the job carries (None: the stored payload is not a mail).
        created_at: when it was enqueued.
        updated_at: when its row last changed.
    """

    job_id: str
    queue: str
    state: JobState
    outcome: Outcome | None
    result: str | None
    diagnostic: str | None
    mail: Mail | None
    created_at: datetime
    updated_at: datetime


def spooled_job(job_id: str, mail: Mail) -> SentJob:
    """The job of a mail still in the local spool, as its sender sees it: queued.

    Args:
        job_id: the job the mail will be enqueued as.
        mail: the spooled mail.

    Returns:
        A queued job, created when the mail was.
    """
    at = datetime.fromtimestamp(mail.created_at / 1000, tz=UTC)
    return SentJob(
        job_id=job_id,
        queue=mail.to.session_id,
        state=JobState.QUEUED,
        outcome=None,
        result=None,
        diagnostic=None,
        mail=mail,
        created_at=at,
        updated_at=at,
    )


def bounced(job: SentJob) -> bool:
    """True for a job BirdDog cancelled because no worker claimed it in time.

    Args:
        job: the job.

    Returns:
        Whether it settled ``cancelled`` with the queued-too-long result.
    """
    return is_bounce(job.outcome, job.result)


def is_bounce(outcome: Outcome | None, result: str | None) -> bool:
    """True for a ``cancelled`` settlement whose result is the queued-too-long one.

    Args:
        outcome: how the job settled.
        result: its content (a reply's content is the same text).
    """
    return outcome is Outcome.CANCELLED and (result or "").startswith(BOUNCE_PREFIX)
