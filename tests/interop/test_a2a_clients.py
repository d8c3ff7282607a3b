"""``birddog a2a`` as the JavaScript A2A SDK sees it: card, sends, cancel, a verified push.

One Node process runs ``a2a_tour.mjs`` (``@a2a-js/sdk`` 1.3 and ``standardwebhooks``,
pinned by ``package-lock.json`` here) against ``birddog a2a`` over a database whose agents
are command workers (``upper`` answers at once, ``slow`` sleeps first) and whose drain
daemon posts the pushes. The assertions read what the SDK returned. Skipped, with the
reason, where ``node`` or the installed ``node_modules`` (``make interop-deps``) are absent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Daemon, cli, token_of
from tests.support.mcp import agents_room
from tests.support.node import NODE, run_tour
from tests.support.waiting import eventually

HERE = Path(__file__).parent
SDK = HERE / "node_modules" / "@a2a-js" / "sdk" / "package.json"
SLOW_S = 30.0
SIGNING_SECRET = "whsec_" + "aW50ZXJvcC1wdXNoLXNpZ25pbmctc2VjcmV0LTMyYnl0ZXM="
# The receiver is the Node process on 127.0.0.1: the operator's setting opens that.
PUSH_ENV = {"BIRDDOG_PUSH_EGRESS": "internal"}

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not on PATH (the interop tests need Node)"),
    pytest.mark.skipif(
        not SDK.is_file(), reason="tests/interop/node_modules is absent: run make interop-deps"
    ),
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
async def room(database_factory: Any) -> AsyncIterator[str]:
    """A database with a drain daemon (pushes to loopback allowed) and the command agents."""
    async with agents_room(database_factory, slow_s=SLOW_S, lease_s=60.0, **PUSH_ENV) as dsn:
        yield dsn


async def a2a_url(server: Daemon) -> str:
    """The base URL ``birddog a2a`` announced (``http://127.0.0.1:PORT``)."""
    line = await eventually(
        lambda: next(
            (
                json.loads(line)["text"]
                for line in server.log().splitlines()
                if "BirdDog A2A server" in line
            ),
            None,
        ),
        "the A2A server's URL",
        within_s=60,
    )
    url = str(line).split(": ", 1)[1].split(" ", 1)[0]
    return url.removesuffix("/a2a/AGENT/")


async def tour(config: dict[str, Any]) -> dict[str, Any]:
    """Run ``a2a_tour.mjs`` with ``config``; its steps."""
    return await run_tour(HERE / "a2a_tour.mjs", config)


async def test_the_js_sdk_resolves_sends_cancels_and_verifies_a_push(room: str) -> None:
    """@a2a-js/sdk 1.3: card (and the slashless URL told its form), sends, CANCELED < 1 s, push."""
    added = await cli(room, "agent", "add", "asker:s-asker")
    assert added.returncode == 0, added.stderr
    server = Daemon(room, "--port", "0", command="a2a", **PUSH_ENV)
    try:
        url = await a2a_url(server)
        steps = await tour(
            {
                "url": url,
                "token": token_of(added.stdout),
                "agent": "upper",
                "context": "s-upper",
                "slowAgent": "slow",
                "slowContext": "s-slow",
                "signingSecret": SIGNING_SECRET,
            }
        )
    finally:
        code, log = server.terminate()
    assert code == 0, log
    base = f"{url}/a2a/upper/"

    assert steps["card"]["name"] == "upper"
    assert steps["card"]["interfaces"][:2] == [
        ["JSONRPC", "1.0", base],
        ["HTTP+JSON", "1.0", base],
    ]
    slashless = steps["card_without_slash"]
    assert slashless["thrown"] is not None  # the SDK cannot resolve it, and is told why:
    for status, error in ((slashless["cardStatus"], slashless["cardError"]),
                          (slashless["baseStatus"], slashless["baseError"])):  # fmt: skip
        assert status == 404
        assert "/a2a/AGENT/ (with the trailing /)" in error

    for binding in ("JSONRPC", "HTTP+JSON"):
        sent = steps[f"blocking_{binding}"]
        assert sent["state"] == "TASK_STATE_COMPLETED", sent
        assert sent["artifact"] == f"BLOCKING OVER {binding}"
    assert steps["non_blocking"]["first"]["state"] in {
        "TASK_STATE_SUBMITTED",
        "TASK_STATE_WORKING",
    }
    assert steps["non_blocking"]["last"]["artifact"] == "NOT BLOCKING"

    cancel = steps["cancel"]
    assert cancel["state"] == "TASK_STATE_CANCELED", cancel
    assert cancel["tookMs"] < 1000, cancel

    push = steps["push"]
    assert push["contentType"] == "application/a2a+json"
    assert push["webhookId"] == f"outbox:{push['taskId']}:reply:1"
    assert push["tokenHeader"] is None  # the signing secret never travels
    verified = push["verified"]
    assert "error" not in verified, verified
    update = verified["statusUpdate"]
    assert update["taskId"] == push["taskId"]
    assert update["status"]["state"] == "TASK_STATE_COMPLETED"
    assert update["status"]["message"]["parts"][0]["text"] == "PUSH ME"
