"""Dead-letter alerts: signed JSON POSTs to an operator's alert URL, coalesced per recipient.

Dead letters of one recipient within ``BIRDDOG_ALERT_COALESCE_S`` (default 5 s) go out as
one alert with their count and up to 100 keys, so 20,000 dead letters make a handful of
POSTs, not 20,000 (the error-level ``reply_dead`` log event and ``NOTIFY birddog_dead``
stay one per row). An alert never carries mail content. It is best effort on top of the
log and the NOTIFY: failing to alert is logged as ``alert_failed`` and never raises into
the drain.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
import yarl

from birddog.core.delivery import OutboxRow, UndecodableRow
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import InvalidInput
from birddog.http import signing
from birddog.http.client import SessionOwner
from birddog.http.transport import DEFAULT_USER_AGENT
from birddog.ports import Clock
from birddog.runtime import stop_task

ALERT_TYPE = "birddog.dead_letters"

ALERT_KEYS_MAX = 100
"""An alert names at most this many of its dead letters' keys (it counts them all)."""

UNKNOWN_AGENT = "(unknown)"
"""The recipient of a buried row whose agent id could not be read."""

log = structlog.get_logger("birddog.alerts")


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class DeadLetterGroup:
    """The dead letters of one recipient within one coalescing window.

    Attributes:
        agent_id: the recipient agent id.
        first_dead_at: when the first of them died.
        last_dead_at: when the last of them died.
        count: how many died.
        keys: the first :data:`ALERT_KEYS_MAX` of their keys, in order of death.
        reasons: how many died of each dead reason.
        last_error: the last error of the latest one.
    """

    agent_id: str
    first_dead_at: datetime
    last_dead_at: datetime
    count: int = 0
    keys: list[str] = field(default_factory=list)
    reasons: Counter[str] = field(default_factory=Counter)
    last_error: str | None = None

    @classmethod
    def of(cls, rows: list[OutboxRow | UndecodableRow], *, dead_at: datetime) -> DeadLetterGroup:
        """A group of ``rows`` (of one recipient) that died at ``dead_at``."""
        group = cls(agent_id=agent_of(rows[0]), first_dead_at=dead_at, last_dead_at=dead_at)
        for row in rows:
            group.add(row, dead_at=dead_at)
        return group

    def add(self, row: OutboxRow | UndecodableRow, *, dead_at: datetime) -> None:
        """Count one more dead letter."""
        self.count += 1
        if len(self.keys) < ALERT_KEYS_MAX:
            self.keys.append(row.key)
        reason = row.dead_reason
        self.reasons[reason.value if reason is not None else "unknown"] += 1
        self.last_error = row.last_error
        self.last_dead_at = dead_at


def agent_of(row: OutboxRow | UndecodableRow) -> str:
    """The recipient agent id of a dead row (:data:`UNKNOWN_AGENT` if unreadable)."""
    if isinstance(row, OutboxRow):
        return row.recipient.agent_id
    return row.agent_id or UNKNOWN_AGENT


def alert_payload(group: DeadLetterGroup) -> dict[str, Any]:
    """The alert body for a recipient's dead letters: what died, why, when; never content.

    Args:
        group: the dead letters.

    Returns:
        ``{"type": "birddog.dead_letters", "recipient": {"agentId"}, "count", "keys",
        "deadReasons", "lastError", "firstDeadAt", "lastDeadAt"}``: ``keys`` holds at most
        100, ``deadReasons`` counts them by reason, the times are ISO 8601 UTC.
    """
    return {
        "type": ALERT_TYPE,
        "recipient": {"agentId": group.agent_id},
        "count": group.count,
        "keys": list(group.keys),
        "deadReasons": dict(sorted(group.reasons.items())),
        "lastError": group.last_error,
        "firstDeadAt": _iso(group.first_dead_at),
        "lastDeadAt": _iso(group.last_dead_at),
    }


def alert_id(group: DeadLetterGroup) -> str:
    """The alert's ``webhook-id``: unique per recipient and window, safe as a header."""
    digest = hashlib.sha256(group.agent_id.encode("utf-8", "replace")).hexdigest()[:16]
    return f"alert:{digest}:{int(group.first_dead_at.timestamp() * 1000)}"


class AlertPoster(SessionOwner):
    """Posts one signed alert for a group of dead letters to one alert URL.

    The body is :func:`alert_payload`; when a secret is given the post carries Standard
    Webhooks headers (``webhook-id`` = :func:`alert_id`). Any 2xx counts as received.
    Nothing here raises into the caller: failures are logged as ``alert_failed`` (with
    the recipient, the count and a bounded reason, never the URL or the secret).

    Args:
        url: the alert URL, ``http`` or ``https``.
        secret: the signing secret (``whsec_<base64>``), or None to post unsigned.
        timeout_s: the whole alert post must finish in this.
        user_agent: the ``user-agent`` header.
        clock: the time source for ``deadAt`` and the timestamp.

    Raises:
        InvalidInput: the URL is not http(s) with a host.
        InvalidSecret: the secret is not ``whsec_<base64>``.
    """

    def __init__(
        self,
        url: str,
        secret: str | None,
        *,
        timeout_s: float = 10.0,
        user_agent: str = DEFAULT_USER_AGENT,
        clock: Clock,
    ) -> None:
        try:
            parsed = yarl.URL(url)
        except (TypeError, ValueError):
            raise InvalidInput("alert URL is not a valid URL", field="url") from None
        if parsed.scheme not in {"http", "https"} or not parsed.host:
            raise InvalidInput("alert URL must be http or https with a host", field="url")
        if secret is not None:
            signing.secret_key(secret)
        self._url = parsed
        self._secret = secret
        self.timeout_s = timeout_s
        self.user_agent = user_agent
        self.clock = clock
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        # The URL may embed a token (chat webhooks do); show only where it goes.
        return f"AlertPoster(host={self._url.host!r}, signed={self._secret is not None})"

    async def alert(self, group: DeadLetterGroup) -> bool:
        """Post the alert for a group of dead letters; never raises (except cancellation).

        Args:
            group: the dead letters of one recipient.

        Returns:
            Whether the alert URL answered 2xx.
        """
        try:
            body = json.dumps(alert_payload(group), separators=(",", ":")).encode()
            headers = {"content-type": "application/json", "user-agent": self.user_agent}
            if self._secret is not None:
                headers |= signing.headers(
                    self._secret,
                    msg_id=alert_id(group),
                    timestamp=int(self._now().timestamp()),
                    body=body,
                )
            async with asyncio.timeout(self.timeout_s):
                status = await self._send(body, headers)
        except TimeoutError:
            reason = f"no answer within {self.timeout_s:g} s"
        except aiohttp.InvalidURL:
            reason = "invalid alert URL"  # its text would repeat the URL
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        else:
            if 200 <= status < 300:
                log.info("alert_sent", agent_id=group.agent_id, count=group.count, status=status)
                return True
            reason = f"HTTP {status}"
        log.error(
            "alert_failed",
            agent_id=group.agent_id,
            count=group.count,
            first_key=group.keys[0] if group.keys else None,
            alert_host=self._url.host,
            reason=bounded_diagnostic(reason),
        )
        return False

    async def _send(self, body: bytes, headers: dict[str, str]) -> int:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        async with self._session.post(
            self._url, data=body, headers=headers, allow_redirects=False
        ) as resp:
            # The answer's body is not needed; cap what is read so a big one costs nothing.
            await resp.content.read(4096)
            return resp.status

    def _now(self) -> datetime:
        return self.clock.now()


ALERT_RETRY_CAP_S = 60.0
"""The longest wait before a failed alert post is tried again."""


class AlertCoalescer:
    """Gathers dead letters per recipient for ``window_s``, then posts each group once.

    :meth:`dead_letter` is synchronous and cheap (the drain calls it per dead row); the
    first dead letter of a recipient opens its group and the group is posted
    ``window_s`` later with everything that died meanwhile. :meth:`close` posts what is
    still open at once (shutdown) and closes the poster.

    A post that fails (``alert_failed`` in the log) is counted through ``on_failure`` and
    tried again after 1 s, 2 s, 4 s, ... (at most ``retries`` times, each wait at most
    :data:`ALERT_RETRY_CAP_S`); :meth:`close` stops the retries at its deadline.

    Args:
        poster: posts each group.
        window_s: how long a recipient's group gathers dead letters.
        clock: the time of death.
        retries: how many times a failed post is tried again.
        on_failure: told ``"alerts"`` after each failed post (a metrics counter).
    """

    def __init__(
        self,
        poster: AlertPoster,
        *,
        window_s: float = 5.0,
        clock: Clock,
        retries: int = 5,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.poster = poster
        self.window_s = window_s
        self.clock = clock
        self.retries = retries
        self.on_failure = on_failure
        self._open: dict[str, DeadLetterGroup] = {}
        self._timers: set[asyncio.Task[None]] = set()
        self._posting: set[asyncio.Task[bool]] = set()

    def dead_letter(self, row: OutboxRow | UndecodableRow) -> None:
        """Add a dead letter to its recipient's open group (opening one if needed)."""
        now = self.clock.now()
        agent = agent_of(row)
        group = self._open.get(agent)
        if group is None:
            group = DeadLetterGroup(agent_id=agent, first_dead_at=now, last_dead_at=now)
            self._open[agent] = group
            timer = asyncio.create_task(self._post_later(agent))
            self._timers.add(timer)
            timer.add_done_callback(self._timers.discard)
        group.add(row, dead_at=now)

    async def _post_later(self, agent: str) -> None:
        await asyncio.sleep(self.window_s)
        self._post(agent)

    def _post(self, agent: str) -> None:
        group = self._open.pop(agent, None)
        if group is None:
            return
        posting = asyncio.create_task(self._deliver(group))
        self._posting.add(posting)
        posting.add_done_callback(self._posting.discard)

    async def _deliver(self, group: DeadLetterGroup) -> bool:
        for attempt in range(self.retries + 1):
            if await self.poster.alert(group):
                return True
            if self.on_failure is not None:
                self.on_failure("alerts")
            if attempt < self.retries:
                await asyncio.sleep(min(ALERT_RETRY_CAP_S, 2.0**attempt))
        return False

    async def close(self, *, timeout_s: float | None = None) -> None:
        """Post every open group now, wait for the posts (up to ``timeout_s``), close."""
        for timer in list(self._timers):
            timer.cancel()
        for agent in list(self._open):
            self._post(agent)
        if self._posting:
            await asyncio.wait(set(self._posting), timeout=timeout_s)
        for posting in list(self._posting):
            await stop_task(posting)
        await self.poster.close()
