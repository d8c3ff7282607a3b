"""Agent jobs: agent_job builds the Watchdog job, decode_agent_job reads it back."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from birddog import (
    AgentAddress,
    AgentJobPayload,
    AgentWork,
    InvalidInput,
    InvalidJobPayload,
    Job,
    JobState,
    Mail,
    Recovery,
    agent_job,
    decode_agent_job,
)

ALICE = AgentAddress(agent_id="alice", session_id="s-alice")
BOB = AgentAddress(agent_id="bob", session_id="s-bob")
CAROL = AgentAddress(agent_id="carol", session_id="s-carol")


def make_mail(to: AgentAddress = BOB) -> Mail:
    return Mail(
        key="mail-1", to=to, from_=ALICE, reply_to=[ALICE, CAROL], content="hi", created_at=1
    )


def make_work(**changes: object) -> AgentWork:
    fields: dict[str, object] = {"job_id": "job-1", "session_id": "s-bob", "command_fact_id": "c-1"}
    fields.update(changes)
    return AgentWork.model_validate(fields)


def test_agent_job_is_queued_on_the_session_in_the_default_lane() -> None:
    """The job's queue is the session id, its lane default, its priority 0, state queued."""
    job = agent_job(make_work(), make_mail())
    assert (job.job_id, job.queue, job.lane, job.priority) == ("job-1", "s-bob", "default", 0)
    assert job.state is JobState.QUEUED
    assert job.outcome is None


def test_payload_carries_session_command_and_mail_in_camel_case() -> None:
    """The payload holds sessionId, commandFactId and the mail's JSON form."""
    mail = make_mail()
    job = agent_job(make_work(), mail)
    assert job.payload == {
        "sessionId": "s-bob",
        "commandFactId": "c-1",
        "mail": json.loads(mail.model_dump_json()),
    }


def test_payload_without_mail_has_no_mail_key() -> None:
    """Work without mail carries no mail in its payload."""
    job = agent_job(make_work())
    assert "mail" not in job.payload
    assert decode_agent_job(job).mail is None


def test_recovery_passes_through_only_when_given() -> None:
    """work.recovery passes straight to the job; without it the job has none."""
    assert agent_job(make_work()).recovery is None
    job = agent_job(make_work(recovery=Recovery(max_recoveries=2)))
    assert job.recovery == Recovery(max_recoveries=2)
    assert json.loads(job.model_dump_json())["recovery"] == {"maxRecoveries": 2}


def test_mail_must_be_addressed_to_the_works_session() -> None:
    """Mail to another session is refused, naming mail.to.sessionId."""
    with pytest.raises(InvalidInput) as caught:
        agent_job(make_work(), make_mail(to=CAROL))
    assert caught.value.field == "mail.to.sessionId"


def test_round_trip_through_json() -> None:
    """A job survives JSON and decodes to the same session, command and mail."""
    mail = make_mail()
    job = agent_job(make_work(), mail)
    again = Job.model_validate_json(job.model_dump_json())
    assert decode_agent_job(again) == AgentJobPayload(
        session_id="s-bob", command_fact_id="c-1", mail=mail
    )
    assert decode_agent_job(json.loads(job.model_dump_json())).mail == mail


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "sessionId"),
        ({"sessionId": "s-bob"}, "commandFactId"),
        ({"sessionId": "s-bob", "commandFactId": "c", "mail": "x"}, "mail"),
        ({"sessionId": "s-bob", "commandFactId": "c", "other": 1}, "other"),
        ({"sessionId": "s-other", "commandFactId": "c"}, "sessionId"),
    ],
)
def test_malformed_payload_raises_a_clear_error(payload: dict[str, object], field: str) -> None:
    """A payload that is not ours raises InvalidJobPayload naming the field."""
    job = Job(job_id="j", queue="s-bob", payload=payload)
    with pytest.raises(InvalidJobPayload) as caught:
        decode_agent_job(job)
    assert caught.value.field == field
    assert "not a BirdDog agent job" in str(caught.value) or field in str(caught.value)


def test_payload_mail_for_another_session_is_refused() -> None:
    """A payload whose mail is for another session than the job's is refused."""
    mail = make_mail(to=CAROL)
    job = Job(
        job_id="j",
        queue="s-bob",
        payload={"sessionId": "s-bob", "commandFactId": "c", "mail": mail.model_dump(mode="json")},
    )
    with pytest.raises(InvalidJobPayload) as caught:
        decode_agent_job(job)
    assert caught.value.field == "mail.to.sessionId"


def test_bad_work_is_refused_naming_the_field() -> None:
    """Work with an empty job id or a negative recovery budget is refused."""
    with pytest.raises(InvalidInput) as empty:
        make_work(job_id="")
    assert empty.value.field == "jobId"
    with pytest.raises(InvalidInput) as negative:
        make_work(recovery={"maxRecoveries": -1})
    assert negative.value.field == "recovery.maxRecoveries"


def test_agent_job_takes_priority_not_before_and_expiry_beside_the_seed_default() -> None:
    """The timing options land on the job; without them it is the seed's job, with no new keys."""
    plain = agent_job(make_work(), make_mail())
    assert plain.priority == 0
    assert set(plain.model_dump(mode="json", exclude_none=True)) == {
        "jobId", "queue", "lane", "priority", "state", "payload"
    }  # fmt: skip
    start = datetime(2026, 12, 2, 9, tzinfo=UTC)
    timed = agent_job(make_work(), make_mail(), priority=5, not_before=start, expires_in_s=30)
    assert (timed.priority, timed.not_before, timed.expires_in_s) == (5, start, 30.0)
    assert timed.payload == plain.payload
    for bad in ({"expires_in_s": 0}, {"not_before": datetime(2026, 12, 2)}, {"priority": 40000}):
        with pytest.raises(InvalidInput):
            agent_job(make_work(), make_mail(), **bad)
