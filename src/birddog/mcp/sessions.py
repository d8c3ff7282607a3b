"""MCP HTTP sessions: a quota per caller, a short idle timeout, and resumable SSE streams.

The SDK's session manager caps the sessions of the whole server (10,000 by default) and
keeps an idle session for 30 minutes, so one token could open enough sessions to make
every other agent's ``initialize`` fail. :class:`CallerSessions` keeps the SDK's
manager and adds what a server of many agents needs:

- **A quota per caller** (the agent session its token names): at most
  ``per_caller`` open sessions. A new session past the quota ends the caller's session
  idle the longest (no request in flight, no open stream), exactly as the idle timeout
  would; when every one of them is busy, the new one is refused with 429 and a line
  that says why. One token therefore holds at most ``per_caller`` sessions, far below
  the SDK's global cap, so it can never make another caller's ``initialize`` fail.
- **A short idle timeout** (``idle_s``, default five minutes) ends sessions nobody uses.
- **Resumable streams**: each session gets its own bounded :class:`SessionEvents`, so
  the SDK sends every SSE stream a priming event with an id and a ``retry`` field, and
  a client that lost a stream reconnects with ``Last-Event-ID`` and gets what it missed.
  The store is per session (the SDK names streams by request id, which repeat across
  sessions), so a replay never crosses into another session.

The manager is the SDK's own ``StreamableHTTPSessionManager`` with its admission step
(``_admit_session``) and its discard step (``_discard_session``) extended; the protocol
is the SDK's throughout.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final
from uuid import uuid4

import structlog
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse

from birddog.mcp.texts import plural

if TYPE_CHECKING:
    from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
    from mcp.server.streamable_http import StreamableHTTPServerTransport
    from mcp_types import JSONRPCMessage
    from starlette.types import ASGIApp, Receive, Scope, Send

log = structlog.get_logger("birddog.mcp")

DEFAULT_SESSIONS_PER_CALLER: Final = 16
"""Open MCP HTTP sessions one caller (one agent session's token) may hold."""

DEFAULT_SESSION_IDLE_S: Final = 300.0
"""An MCP HTTP session with no request in flight for this long is ended."""

RETRY_MS: Final = 2000
"""The ``retry`` field of every SSE stream's priming event: reconnect after two seconds."""

EVENTS_PER_SESSION: Final = 256
"""The most SSE events one session keeps for a client that reconnects."""

EVENT_BYTES_PER_SESSION: Final = 1_048_576
"""The most bytes of JSON those events take (the oldest go first)."""


@dataclass
class SessionEvents(EventStore):
    """One session's SSE events, kept for a client that reconnects; bounded, oldest out first.

    Attributes:
        most: the most events kept.
        most_bytes: the most bytes of JSON kept.
    """

    most: int = EVENTS_PER_SESSION
    most_bytes: int = EVENT_BYTES_PER_SESSION
    _events: deque[tuple[str, str, JSONRPCMessage | None, int]] = field(default_factory=deque)
    _bytes: int = 0
    _next: int = 0
    _prefix: str = field(default_factory=lambda: uuid4().hex[:12])

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        """Keep one event of stream ``stream_id`` (None: the stream's priming event)."""
        self._next += 1
        event_id = f"{self._prefix}-{self._next}"
        size = 0 if message is None else len(message.model_dump_json(by_alias=True))
        self._events.append((event_id, stream_id, message, size))
        self._bytes += size
        while self._events and (len(self._events) > self.most or self._bytes > self.most_bytes):
            self._bytes -= self._events.popleft()[3]
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        """Send the events of ``last_event_id``'s stream that came after it; its stream id.

        None when the event is not (or no longer) kept: nothing is replayed.
        """
        kept = list(self._events)
        at = next((i for i, event in enumerate(kept) if event[0] == last_event_id), None)
        if at is None:
            return None
        stream_id = kept[at][1]
        for event_id, stream, message, _size in kept[at + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


class CallerSessions(StreamableHTTPSessionManager):
    """The SDK's session manager with a quota per caller and its own event store per session.

    Args:
        app: the MCP server.
        per_caller: open sessions one caller may hold.
        idle_s: a session idle this long is ended.
        **options: the SDK manager's other options (security settings, body limit...).
    """

    def __init__(self, app: Any, *, per_caller: int, idle_s: float, **options: Any) -> None:
        super().__init__(app, session_idle_timeout=idle_s, retry_interval=RETRY_MS, **options)
        self.per_caller = per_caller
        self._by_caller: dict[str, dict[str, StreamableHTTPServerTransport]] = {}

    def sessions_of(self, caller: str) -> int:
        """How many sessions ``caller`` holds open."""
        return len(self._by_caller.get(caller, {}))

    def full(self, caller: str) -> bool:
        """True when ``caller`` holds its quota and every one of those sessions is busy."""
        held = self._by_caller.get(caller, {})
        return len(held) >= self.per_caller and _idlest(held) is None

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        caller = _caller_of(requestor)
        held = self._by_caller.setdefault(caller, {})
        if len(held) >= self.per_caller:
            idlest = _idlest(held)
            if idlest is None:
                log.warning("mcp_session_refused", caller=caller, open=len(held))
                return None
            _end(held.pop(idlest))
            log.info("mcp_session_evicted", caller=caller, open=len(held))
        # Each session its own event store (the SDK hands its one store to each new
        # transport here): a replay never reaches another session's events.
        self.event_store = SessionEvents()
        transport = super()._admit_session(requestor)
        self.event_store = None
        if transport is not None and transport.mcp_session_id is not None:
            held[transport.mcp_session_id] = transport
        return transport

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        for caller, held in list(self._by_caller.items()):
            if held.pop(session_id, None) is not None and not held:
                del self._by_caller[caller]
        await super()._discard_session(session_id, transport)


def _caller_of(requestor: AuthorizationContext | None) -> str:
    return "" if requestor is None else requestor["client_id"]


def _idlest(held: dict[str, StreamableHTTPServerTransport]) -> str | None:
    """The session idle the longest (its idle deadline the earliest); None if all are busy."""
    idle = [
        (scope.deadline, session_id)
        for session_id, transport in held.items()
        if (scope := transport.idle_scope) is not None and math.isfinite(scope.deadline)
    ]
    return min(idle)[1] if idle else None


def _end(transport: StreamableHTTPServerTransport) -> None:
    """End a session now, the way its idle timeout would (the SDK then discards it)."""
    if transport.idle_scope is not None:
        transport.idle_scope.cancel()


class SessionQuota:
    """ASGI middleware: a new session past a caller's quota, all of them busy, is a 429.

    The SDK's own Host and Origin check (DNS rebinding protection) answers first, as it
    would for any request: a request from another origin never learns of the quota.

    Args:
        app: the MCP endpoint.
        sessions: the session manager (who holds what, its security settings).
        caller_of: the caller a request's scope names (None: unknown, passed on).
    """

    def __init__(self, app: ASGIApp, sessions: CallerSessions, caller_of: Any) -> None:
        self.app = app
        self.sessions = sessions
        self.caller_of = caller_of
        self.security = TransportSecurityMiddleware(sessions.security_settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse a new session the quota has no room for; pass everything else on."""
        if scope["type"] == "http" and scope["method"] == "POST" and not _has_session(scope):
            refused = await self.security.validate_request(Request(scope, receive), is_post=True)
            if refused is not None:
                await refused(scope, receive, send)
                return
            caller = self.caller_of(scope)
            if caller is not None and self.sessions.full(caller):
                most = self.sessions.per_caller
                message = (
                    f"too many open MCP sessions for {caller}: {most} "
                    f"{plural(most, 'session', 'sessions')} open and all busy "
                    "(BIRDDOG_MCP_SESSIONS_PER_TOKEN); end one (DELETE) or wait for it"
                )
                body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}
                await JSONResponse(body, status_code=429)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _has_session(scope: Scope) -> bool:
    return any(name == b"mcp-session-id" for name, _value in scope["headers"])
