"""The settle function agrees with the Python rules: the same jobs, the same rows, byte for byte.

Each case settles one job through PostgreSQL (``birddog.settle``, ``birddog.reap``,
``birddog.cancel``, as :class:`PostgresJobs` calls them) and works out, from the same stored
facts, what the pure core says: :func:`birddog.core.lifecycle.decide_job` for the decision and
:func:`birddog.core.fanout.replies_for` for the replies. The decision, the settled job's
columns and every reply row (its reply as stored JSON) must be equal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest

from birddog import (
    AgentAddress,
    AgentWork,
    InvalidInput,
    Job,
    Mail,
    Outcome,
    StaleClaim,
    agent_job,
)
from birddog.core.delivery import new_row
from birddog.core.errors import UnreadableRow
from birddog.core.fanout import replies_for
from birddog.core.lifecycle import (
    CancelRequested,
    Decision,
    HandlerTimedOut,
    JobEvent,
    Keep,
    LeaseExpired,
    QueuedTooLong,
    Refuse,
    Requeue,
    Settle,
    SettleRequested,
    WorkerStopped,
    decide_job,
)
from birddog.postgres.job_rows import claim_token, facts_from_row, settled_job
from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.testing import FrozenClock
from tests.support import ALICE, BOB, CAROL, T0, enqueue, make_job

LIMIT = 100
"""The content limit the cases settle under (small, so limits are cheap to reach)."""

GENEROUS = 10_000
"""The limit a cancellation is recorded under when a case needs it cut later."""

PEM = (
    "tls -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo\n"
    "-----END RSA PRIVATE KEY----- loaded"
)
"""A diagnostic the masker changes again on a second pass (replies carry it masked twice)."""

UNICODE_ASKER = AgentAddress(agent_id="ålice-🦆", session_id="s-ü")


def agent_job_for(
    job_id: str,
    *,
    reply_to: Sequence[AgentAddress] = (ALICE, CAROL),
    key: str | None = None,
    max_recoveries: int | None = None,
) -> Job:
    """An agent job for bob's session asking for ``reply_to``."""
    job = make_job(job_id, reply_to=reply_to, max_recoveries=max_recoveries)
    if key is None:
        return job
    mail = Mail(key=key, to=BOB, from_=ALICE, reply_to=list(reply_to), content="q", created_at=7)
    return agent_job(AgentWork(job_id=job_id, session_id="s-bob", command_fact_id="c"), mail)


def raw_job(job_id: str, payload: dict[str, Any]) -> Job:
    """A Watchdog job on bob's queue with any payload."""
    return Job(job_id=job_id, queue="s-bob", payload=payload)


MAIL_JSON = {
    "key": "raw-mail",
    "to": {"kind": "agent", "agentId": "bob", "sessionId": "s-bob"},
    "from": {"kind": "agent", "agentId": "alice", "sessionId": "s-alice"},
    "replyTo": [{"agentId": "alice", "sessionId": "s-alice"}],
    "content": "q",
    "createdAt": 3,
}


@dataclass(frozen=True)
class Case:
    """One settlement: the job, what happens to it, and how.

    Attributes:
        job: the job enqueued.
        event: what happens (a claim event, a reaper's, an operator's cancellation).
        cancellation: content recorded as the job's cancellation first (None: none).
        flow: ``claimed`` (settled by its claim), ``stale`` (another claim's token),
            ``replay`` (settled twice), ``queued`` (never claimed).
        age_s: how long after enqueueing the event happens.
        owed: how many replies the Python rules owe (a check that the case tests rows).
    """

    job: Job
    event: JobEvent
    cancellation: str | None = None
    flow: str = "claimed"
    age_s: float = 5.0
    owed: int = 2


CASES: dict[str, Case] = {
    "completed": Case(agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "the answer")),
    "empty content: the outcome's text": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "")
    ),
    "completed: no diagnostic in replies": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "ok", "a note")
    ),
    "failed, the diagnostic masked": Case(
        agent_job_for("j"),
        SettleRequested(Outcome.FAILED, "", "boom: api_key=sk-abcdef0123456789 Bearer xyz"),
    ),
    "failed, a diagnostic masked twice": Case(
        agent_job_for("j"), SettleRequested(Outcome.FAILED, "partial", PEM)
    ),
    "outcome_unknown reported": Case(
        agent_job_for("j"), SettleRequested(Outcome.OUTCOME_UNKNOWN, "", "lost track")
    ),
    "unstorable: NUL": Case(agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "a\x00b")),
    "unstorable: lone surrogate": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "a\ud800b")
    ),
    "unstorable: above the limit": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "é" * (LIMIT // 2) + "x")
    ),
    "at the limit: stored": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "é" * (LIMIT // 2))
    ),
    "unstorable: not text": Case(agent_job_for("j"), SettleRequested(Outcome.COMPLETED, 42)),
    "interrupted by a stop": Case(agent_job_for("j"), WorkerStopped()),
    "handler timed out": Case(agent_job_for("j"), HandlerTimedOut(90)),
    "a stop with budget left: requeued": Case(
        agent_job_for("j", max_recoveries=2), WorkerStopped("shutting down"), owed=0
    ),
    "cancelled with content": Case(
        agent_job_for("j"),
        SettleRequested(Outcome.COMPLETED, "done anyway"),
        cancellation="the operator stopped it",
    ),
    "cancelled without content": Case(
        agent_job_for("j"), SettleRequested(Outcome.FAILED, "", "why"), cancellation=""
    ),
    "cancelled, cut to the limit": Case(
        agent_job_for("j"),
        SettleRequested(Outcome.COMPLETED, "x", "token=abcdef0123456789abcdef"),
        cancellation="stop é " * 40,
    ),
    "cancelled, cut, no diagnostic": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "x"), cancellation="ü" * 300
    ),
    "cancelled over a stop": Case(agent_job_for("j"), WorkerStopped(), cancellation="halt"),
    "no mail: no replies": Case(
        make_job("j", with_mail=False), SettleRequested(Outcome.COMPLETED, "x"), owed=0
    ),
    "empty replyTo: no replies": Case(
        agent_job_for("j", reply_to=()), SettleRequested(Outcome.COMPLETED, "x"), owed=0
    ),
    "three replies, one address twice, unicode ids": Case(
        agent_job_for("j", reply_to=(UNICODE_ASKER, CAROL, UNICODE_ASKER), key="ключ-1"),
        SettleRequested(Outcome.FAILED, "ß", "it broke"),
        owed=3,
    ),
    "not an agent job: no replies": Case(
        raw_job("j", {"anything": [1, 2]}), SettleRequested(Outcome.COMPLETED, "x"), owed=0
    ),
    "mail for another session: no replies": Case(
        raw_job(
            "j",
            {
                "sessionId": "s-bob",
                "commandFactId": "c",
                "mail": {**MAIL_JSON, "to": {"agentId": "bob", "sessionId": "s-other"}},
            },
        ),
        SettleRequested(Outcome.COMPLETED, "x"),
        owed=0,
    ),
    "an unknown field in the mail: no replies": Case(
        raw_job("j", {"sessionId": "s-bob", "commandFactId": "c", "mail": {**MAIL_JSON, "x": 1}}),
        SettleRequested(Outcome.COMPLETED, "x"),
        owed=0,
    ),
    "a control character in an id: no replies": Case(
        raw_job(
            "j",
            {
                "sessionId": "s-bob",
                "commandFactId": "c",
                "mail": {**MAIL_JSON, "replyTo": [{"agentId": "al\u202eice", "sessionId": "s"}]},
            },
        ),
        SettleRequested(Outcome.COMPLETED, "x"),
        owed=0,
    ),
    "a fractional createdAt: no replies": Case(
        raw_job(
            "j",
            {"sessionId": "s-bob", "commandFactId": "c", "mail": {**MAIL_JSON, "createdAt": 1.5}},
        ),
        SettleRequested(Outcome.COMPLETED, "x"),
        owed=0,
    ),
    "Python field names in the payload": Case(
        raw_job(
            "j",
            {
                "session_id": "s-bob",
                "command_fact_id": "c",
                "mail": {
                    "key": "py-mail",
                    "to": {"agent_id": "bob", "session_id": "s-bob"},
                    "from_": {"agent_id": "alice", "session_id": "s-alice"},
                    "reply_to": [{"agent_id": "alice", "session_id": "s-alice"}],
                    "content": "q",
                    "created_at": 3,
                },
            },
        ),
        SettleRequested(Outcome.COMPLETED, "x"),
        owed=1,
    ),
    "a replay is kept": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "once"), flow="replay", owed=0
    ),
    "a stale claim is refused": Case(
        agent_job_for("j"), SettleRequested(Outcome.COMPLETED, "x"), flow="stale", owed=0
    ),
    "lease expired: outcome_unknown": Case(agent_job_for("j"), LeaseExpired(), age_s=61),
    "lease expired with budget: requeued": Case(
        agent_job_for("j", max_recoveries=1), LeaseExpired(), age_s=61, owed=0
    ),
    "lease expired, cancellation cut": Case(
        agent_job_for("j"), LeaseExpired(), cancellation="stop " * 30, age_s=61
    ),
    "queued too long: bounced": Case(
        agent_job_for("j"), QueuedTooLong(), flow="queued", age_s=86_401
    ),
    "operator cancels a queued job": Case(
        agent_job_for("j"), CancelRequested("no longer needed"), flow="queued"
    ),
    "operator cancels a queued job, no content": Case(
        agent_job_for("j"), CancelRequested(""), flow="queued"
    ),
}

REPLY_COLUMNS = (
    "key, recipient_agent_id, recipient_session_id, in_reply_to, command_id, outcome, "
    "reply::text AS reply, state, attempts, deferrals, due_at, created_at, last_error, "
    "dead_reason, traceparent"
)


async def stored_job(pool: Pool, job_id: str) -> Any:
    """A job's row as the job store reads it (JSON as text)."""
    return await pool.fetchrow(
        "SELECT job_id, queue, lane, priority, state, payload::text AS payload, "
        "recovery::text AS recovery, outcome, claim_token, lease_expires_at, recovery_count, "
        "cancel_requested_at, cancel_content, created_at, result_content, diagnostic "
        "FROM birddog.jobs WHERE job_id = $1",
        job_id,
    )


async def expected_rows(pool: Pool, row: Any, decision: Decision, clock: FrozenClock) -> list[Any]:
    """The reply rows the Python rules owe for ``decision``, as the database stores them."""
    if not isinstance(decision, Settle):
        return []
    try:
        replies = replies_for(
            settled_job(row, decision.outcome),
            content=decision.content,
            diagnostic=decision.diagnostic,
            now=clock.now(),
            max_content_bytes=LIMIT,
        )
    except (InvalidInput, UnreadableRow):
        replies = []
    rows = []
    for reply in replies:
        out = new_row(reply, now=clock.now())
        rows.append(
            await pool.fetchrow(
                "SELECT $1::text AS key, $2::text AS recipient_agent_id, "
                "$3::text AS recipient_session_id, $4::text AS in_reply_to, "
                "$5::text AS command_id, $6::text AS outcome, $7::text::jsonb::text AS reply, "
                "'pending'::text AS state, 0 AS attempts, 0 AS deferrals, "
                "$8::timestamptz AS due_at, $8::timestamptz AS created_at, "
                "NULL::text AS last_error, NULL::text AS dead_reason, NULL::text AS traceparent",
                out.key,
                out.parcel.agent_id,
                out.parcel.session_id,
                reply.in_reply_to,
                out.parcel.command_id,
                out.parcel.outcome.value,
                out.parcel.body.decode(),
                out.due_at,
            )
        )
    return rows


def comparable(decision: Decision) -> Decision:
    """A decision without what the store does not report (whether a cancellation is recorded)."""
    return (
        replace(decision, records_cancellation=False) if isinstance(decision, Settle) else decision
    )


@pytest.mark.parametrize("name", list(CASES))
async def test_the_function_settles_as_the_python_rules_do(pg_pool: Pool, name: str) -> None:
    """The decision, the settled job and every reply row are what decide_job and replies_for say."""
    case = CASES[name]
    clock = FrozenClock(T0 + timedelta(microseconds=123_456))
    # No kill grace: the cases' leases ended a second ago, and decide_job knows no grace.
    store = PostgresJobs(
        pg_pool, clock=clock, max_content_bytes=LIMIT, max_queued_s=86_400, kill_grace_s=0
    )
    token = await _prepare(pg_pool, case, clock, store)
    before = await stored_job(pg_pool, "j")
    expected = decide_job(
        facts_from_row(before, token=claim_token(token) if token else None),
        case.event,
        now=clock.now(),
        limits=store.limits,
    )
    got = await _carry_out(store, case, token, expected)
    assert comparable(got) == comparable(expected)
    _check_job(before, await stored_job(pg_pool, "j"), expected)
    rows = list(await pg_pool.fetch(f"SELECT {REPLY_COLUMNS} FROM birddog.outbox ORDER BY key"))  # noqa: S608 - constant columns
    want = await expected_rows(pg_pool, before, expected, clock)
    assert len(want) == case.owed
    assert [dict(row) for row in rows] == [dict(row) for row in want]


async def _prepare(
    pg_pool: Pool, case: Case, clock: FrozenClock, store: PostgresJobs
) -> str | None:
    """Enqueue, claim and cancel as the case says; the claim token the event presents."""
    generous = PostgresJobs(pg_pool, clock=clock, max_content_bytes=GENEROUS)
    await enqueue(pg_pool, case.job, created_at=clock.now())
    token: str | None = None
    if case.flow != "queued":
        claimed = await generous.claim(lease_s=60)
        assert claimed is not None
        token = claimed.claim_token
    if case.cancellation is not None:
        await generous.cancel(job_id="j", content=case.cancellation)
    clock.advance(case.age_s)
    if case.flow == "replay":
        assert token is not None
        await store.finish(job_id="j", claim_token=token, event=case.event)  # type: ignore[arg-type]
        await pg_pool.execute("DELETE FROM birddog.outbox")
    if case.flow == "stale":
        token = "00000000-0000-4000-8000-000000000000"
    return token


async def _carry_out(
    store: PostgresJobs, case: Case, token: str | None, expected: Decision
) -> Decision:
    """What the store decided for the case's event (as far as it reports it)."""
    if isinstance(case.event, LeaseExpired):
        return _reaped(await store.recover_expired(), expected)
    if isinstance(case.event, QueuedTooLong):
        return _reaped(await store.cancel_queued_too_long(), expected)
    if isinstance(case.event, CancelRequested):
        assert await store.cancel(job_id="j", content=case.event.content) is Outcome.CANCELLED
        return expected
    assert token is not None
    event = case.event
    assert isinstance(event, SettleRequested | WorkerStopped | HandlerTimedOut)
    if isinstance(expected, Refuse):
        with pytest.raises(StaleClaim, match=re.escape(expected.reason)):
            await store.finish(job_id="j", claim_token=token, event=event)
        return expected
    return (await store.finish(job_id="j", claim_token=token, event=event)).decision


def _check_job(before: Any, after: Any, expected: Decision) -> None:
    """The job's columns after the event are what the decision stores."""
    if isinstance(expected, Settle):
        assert (after["state"], after["outcome"]) == ("settled", expected.outcome.value)
        assert (after["result_content"], after["diagnostic"]) == (
            expected.content,
            expected.diagnostic,
        )
        if expected.records_cancellation:
            assert after["cancel_content"] == expected.content
    elif isinstance(expected, Requeue):
        assert (after["state"], after["recovery_count"]) == ("queued", before["recovery_count"] + 1)
        assert after["diagnostic"] == (expected.diagnostic or before["diagnostic"])
    else:
        assert (after["state"], after["outcome"]) == (before["state"], before["outcome"])


def _reaped(handled: list[tuple[str, str]], expected: Decision) -> Decision:
    """The reaper's report checked against the decision; the decision it carried out."""
    if isinstance(expected, Keep):
        assert handled == []
    elif isinstance(expected, Requeue):
        assert handled == [("j", "requeued")]
    else:
        assert isinstance(expected, Settle)
        assert handled == [("j", expected.outcome.value)]
    return expected
