"""Kinds of mail: four names, a task by default, never inside the mail's JSON."""

from __future__ import annotations

import pytest
from pydantic import JsonValue

from birddog import AgentWork, InvalidInput, Mail, agent_job, decode_agent_job
from birddog.core.kinds import Kind, check_interactive, parse_kind

MAIL = {
    "key": "mail-1",
    "to": {"kind": "agent", "agentId": "worker", "sessionId": "s-b"},
    "from": {"kind": "agent", "agentId": "caller", "sessionId": "s-a"},
    "replyTo": [],
    "content": "done",
    "createdAt": 1767225600000,
}


def _job(kind: Kind | str | None) -> dict[str, JsonValue]:
    work = AgentWork(job_id="job-1", session_id="s-b", command_fact_id="c-1")
    return agent_job(work, Mail.model_validate(MAIL), kind=kind).payload


@pytest.mark.parametrize("name", ["task", "escalation", "report", "receipt"])
def test_each_of_the_four_kinds_parses(name: str) -> None:
    """Every kind's name parses to that kind; None is a task."""
    assert parse_kind(name).value == name
    assert parse_kind(None) is Kind.TASK


@pytest.mark.parametrize("value", ["question", "Task", "", 3])
def test_any_other_kind_is_a_one_line_error_naming_the_four(value: object) -> None:
    """A kind that is not one of the four is refused in one line that lists them."""
    with pytest.raises(InvalidInput) as raised:
        parse_kind(value)
    message = str(raised.value)
    assert "\n" not in message
    assert "task, escalation, report, receipt" in message
    assert raised.value.field == "kind"


def test_only_interactive_kinds_pass_the_ask_check() -> None:
    """Task and escalation may be asked; report and receipt are refused."""
    assert check_interactive(Kind.ESCALATION) is Kind.ESCALATION
    for kind in (Kind.REPORT, Kind.RECEIPT):
        with pytest.raises(InvalidInput, match="task or escalation"):
            check_interactive(kind)


def test_a_task_payload_carries_no_kind_and_other_kinds_sit_beside_the_mail() -> None:
    """A task's payload is the TypeScript shape; a report's names its kind beside the mail."""
    assert "kind" not in _job(None)
    assert "kind" not in _job("task")
    report = _job("report")
    assert report["kind"] == "report"
    assert report["mail"] == MAIL  # the mail's JSON is unchanged, byte for byte
    assert decode_agent_job({"jobId": "job-1", "queue": "s-b", "payload": report}).kind == (
        Kind.REPORT
    )


def test_agent_job_refuses_an_unknown_kind() -> None:
    """agent_job refuses a kind that is none of the four before a job exists."""
    with pytest.raises(InvalidInput, match="kind must be one of"):
        _job("urgent")
