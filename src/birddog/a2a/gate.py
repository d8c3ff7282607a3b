"""What every request to ``birddog a2a`` passes before the SDK reads a byte of its body.

:class:`Gate` is the ASGI application in front of the SDK's routes. In order:

1. **The URL form.** Each agent lives at ``/a2a/AGENT/`` (the trailing ``/`` included);
   anything else (``/a2a/AGENT`` without it, or the card a client looks for beside it,
   ``/a2a/.well-known/agent-card.json``) is answered 404 with the form to use, never
   401: a client that resolved a base URL without its ``/`` learns what to fix.
2. **The card** at ``/a2a/AGENT/.well-known/agent-card.json`` is public.
3. **The body cap.** A ``Content-Length`` above the cap is 413 before anything is read;
   a body without one is read up to the cap and refused 413 past it. The SDK then gets
   the body from memory, at most the cap.
4. **The token.** A request without a valid bearer token is 401 (with
   ``WWW-Authenticate``).
5. **The caller's rate.** Each token has a bucket (:class:`TokenRate`): past its burst, a
   request is 429 with ``Retry-After``, before it makes the server do any work. Requests
   with a token that is not valid count against the token they present, so guessing
   costs the guesser too.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import structlog
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.responses import JSONResponse, Response

from birddog.core.errors import StoreUnavailable
from birddog.ports import TokenBook

log = structlog.get_logger("birddog.a2a")

__all__ = [
    "CALLER_SCOPE_KEY",
    "DEFAULT_BURST",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_RATE_PER_S",
    "URL_FORM",
    "Gate",
    "TokenRate",
]

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]

CALLER_SCOPE_KEY: Final = "birddog_caller"
"""Where the gate leaves the caller (an ``AgentAddress``) in the request's scope."""

DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024
"""The largest request body read: a message's text (1 MiB by default) with its JSON."""

DEFAULT_RATE_PER_S: Final = 20.0
DEFAULT_BURST: Final = 40
"""Each token may make 40 requests at once, then 20 a second."""

TOKENS_KEPT: Final = 10_000
"""Buckets kept (the least recently used go first: a full bucket is a forgotten one)."""

URL_FORM: Final = (
    "each agent is served at /a2a/AGENT/ (with the trailing /), its Agent Card at "
    "/a2a/AGENT/.well-known/agent-card.json"
)
"""What a request to any other path is told."""

_AGENT_PATH: Final = re.compile(r"^/a2a/([^/]+)(/.*)$", re.DOTALL)


class TokenRate:
    """A token bucket per bearer token: ``burst`` at once, then ``rate_per_s``.

    Args:
        rate_per_s: the requests a token may make per second, over time.
        burst: the requests it may make at once.
        clock: monotonic seconds (a test's own).
    """

    def __init__(
        self,
        rate_per_s: float = DEFAULT_RATE_PER_S,
        burst: int = DEFAULT_BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be positive and burst at least 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def wait_s(self, token: str) -> float:
        """Take one request from ``token``'s bucket; 0 when allowed, else seconds to wait."""
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        now = self.clock()
        level, at = self._buckets.pop(key, (float(self.burst), now))
        level = min(float(self.burst), level + (now - at) * self.rate_per_s)
        if level >= 1.0:
            level -= 1.0
            wait_s = 0.0
        else:
            wait_s = (1.0 - level) / self.rate_per_s
        self._buckets[key] = (level, now)
        while len(self._buckets) > TOKENS_KEPT:
            self._buckets.popitem(last=False)
        return wait_s


class Gate:
    """The URL form, the body cap, the bearer token and the caller's rate, before the SDK.

    Args:
        app: the application behind it (the SDK's routes).
        tokens: who each token is.
        max_body_bytes: the largest body read (413 past it).
        rate: each token's bucket.
    """

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenBook,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        rate: TokenRate | None = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.max_body_bytes = max_body_bytes
        self.rate = rate if rate is not None else TokenRate()

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        """Answer the request with its refusal, or pass it (its body read) to the app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal, receive = await self._refusal(scope, receive)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _refusal(
        self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]]
    ) -> tuple[Response | None, Callable[[], Awaitable[Any]]]:
        """Why the request goes no further (None: it may), and how its body is read."""
        matched = _AGENT_PATH.match(str(scope.get("path", "")))
        if matched is None or matched.group(1) == ".well-known":
            return _error(404, f"not found: {URL_FORM}"), receive
        if matched.group(2) == AGENT_CARD_WELL_KNOWN_PATH:
            return None, receive
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body_bytes:
            return self._too_large(), receive
        token = _bearer(headers.get(b"authorization", b""))
        if token is None:
            return _unauthorized(), receive
        wait_s = self.rate.wait_s(token)
        if wait_s > 0:
            log.warning("a2a_rate_limited", path=matched.group(2)[:64])
            retry = str(max(1, math.ceil(wait_s)))
            return _error(429, "too many requests for this token", {"Retry-After": retry}), receive
        try:
            caller = await self.tokens.authenticate(token)
        except StoreUnavailable as exc:
            log.warning("a2a_token_check_failed", error=type(exc).__name__)
            unavailable = "the mail room's database is unavailable; try again"
            return _error(503, unavailable, {"Retry-After": "5"}), receive
        if caller is None:
            return _unauthorized(), receive
        scope[CALLER_SCOPE_KEY] = caller
        body = await _body_within(receive, self.max_body_bytes)
        if body is None:
            return self._too_large(), receive
        return None, _replay(body, receive)

    def _too_large(self) -> Response:
        log.warning("a2a_body_too_large", limit=self.max_body_bytes)
        return _error(413, f"request body larger than {self.max_body_bytes} bytes")


def _bearer(header: bytes) -> str | None:
    scheme, _, token = header.decode("latin-1").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def _body_within(receive: Callable[[], Awaitable[Any]], limit: int) -> bytes | None:
    """The whole body, read up to ``limit`` bytes; None once it is longer."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away: the SDK sees an empty body and its own error
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
    """A ``receive`` that gives ``body`` once, then the client's own (its disconnect)."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _unauthorized() -> Response:
    return _error(
        401,
        "a valid bearer token is needed (birddog agent add / agent token)",
        {"WWW-Authenticate": 'Bearer realm="birddog"'},
    )


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
