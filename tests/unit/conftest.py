"""Helpers for the unit tests: settled jobs with mail, and a mail room on fakes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    Job,
    JobState,
    Mail,
    MailRoom,
    Outcome,
    RetrySchedule,
    agent_job,
)
from birddog.testing import FrozenClock, InMemoryOutbox, ManualWake, RecordingTransport

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
CAROL = AgentAddress(agent_id="carol", session_id="s-carol")


def settled_job(
    *,
    key: str = "mail-1",
    reply_to: Sequence[AgentAddress] = (ALICE, CAROL),
    outcome: Outcome = Outcome.COMPLETED,
    with_mail: bool = True,
) -> Job:
    """A settled agent job for bob's session whose mail asks for replies to ``reply_to``."""
    mail = Mail(
        key=key, to=BOB, from_=ALICE, reply_to=list(reply_to), content="please", created_at=1
    )
    job = agent_job(
        AgentWork(job_id=f"job-{key}", session_id="s-bob", command_fact_id=f"cmd-{key}"),
        mail if with_mail else None,
    )
    return job.model_copy(update={"state": JobState.SETTLED, "outcome": outcome})


class Room:
    """A mail room wired to inspectable fakes."""

    def __init__(self, schedule: RetrySchedule | None = None, page_size: int = 64) -> None:
        self.outbox = InMemoryOutbox()
        self.transport = RecordingTransport(True)
        self.wake = ManualWake()
        self.clock = FrozenClock()
        self.room = MailRoom(
            outbox=self.outbox,
            transport=self.transport,
            wake=self.wake,
            clock=self.clock,
            schedule=schedule,
            page_size=page_size,
            post_timeout_s=1.0,
            rng=lambda: 0.5,
        )


@pytest.fixture
def room() -> Room:
    """A fresh mail room on fakes, with a frozen clock and neutral jitter."""
    return Room()
