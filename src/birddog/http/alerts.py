"""Dead-letter alerts: a signed JSON POST to an operator's alert URL, never the mail content.

An alert is best effort on top of the error-level log event and ``NOTIFY birddog_dead``:
failing to alert is logged as ``alert_failed`` and never raises into the drain.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
import yarl

from birddog.clock import SystemClock
from birddog.core.delivery import OutboxRow
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.errors import InvalidInput
from birddog.http import signing
from birddog.http.client import SessionOwner
from birddog.http.transport import DEFAULT_USER_AGENT
from birddog.ports import Clock

ALERT_TYPE = "birddog.dead_letter"

log = structlog.get_logger("birddog.alerts")


def alert_payload(row: OutboxRow, *, dead_at: datetime) -> dict[str, Any]:
    """The alert body for a dead letter: what died, why, and when; never its content.

    Args:
        row: the dead row.
        dead_at: when it died.

    Returns:
        ``{"type": "birddog.dead_letter", "key", "inReplyTo", "recipient", "deadReason",
        "lastError", "attempts", "deadAt"}``, with ``deadAt`` as ISO 8601 UTC.
    """
    return {
        "type": ALERT_TYPE,
        "key": row.key,
        "inReplyTo": row.reply.in_reply_to,
        "recipient": row.recipient.model_dump(mode="json"),
        "deadReason": row.dead_reason.value if row.dead_reason is not None else None,
        "lastError": row.last_error,
        "attempts": row.attempts,
        "deadAt": dead_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
    }


class AlertPoster(SessionOwner):
    """Posts a signed alert for each dead letter to one alert URL.

    The body is :func:`alert_payload`; when a secret is given the post carries Standard
    Webhooks headers (``webhook-id`` = ``alert:<reply key>:<deadAt ms>``). Any 2xx counts
    as received. Nothing here raises into the caller: failures are logged as
    ``alert_failed`` (with the key and a bounded reason, never the URL or the secret).

    Args:
        url: the alert URL, ``http`` or ``https``.
        secret: the signing secret (``whsec_<base64>``), or None to post unsigned.
        timeout_s: the whole alert post must finish in this.
        user_agent: the ``user-agent`` header.
        clock: the time source for ``deadAt`` and the timestamp (default:
            :class:`birddog.clock.SystemClock`).

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
        clock: Clock | None = None,
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
        self.clock: Clock = clock or SystemClock()
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        # The URL may embed a token (chat webhooks do); show only where it goes.
        return f"AlertPoster(host={self._url.host!r}, signed={self._secret is not None})"

    async def alert(self, row: OutboxRow, *, dead_at: datetime | None = None) -> bool:
        """Post the alert for one dead letter; never raises (except cancellation).

        Args:
            row: the dead row.
            dead_at: when it died (default: now).

        Returns:
            Whether the alert URL answered 2xx.
        """
        try:
            now = self._now()
            when = dead_at or now
            body = json.dumps(alert_payload(row, dead_at=when), separators=(",", ":")).encode()
            headers = {"content-type": "application/json", "user-agent": self.user_agent}
            if self._secret is not None:
                msg_id = f"alert:{row.key}:{int(when.timestamp() * 1000)}"
                headers |= signing.headers(
                    self._secret, msg_id=msg_id, timestamp=int(now.timestamp()), body=body
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
                log.info("alert_sent", key=row.key, status=status)
                return True
            reason = f"HTTP {status}"
        log.error(
            "alert_failed",
            key=row.key,
            dead_reason=row.dead_reason.value if row.dead_reason is not None else None,
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
