"""``birddog mcp --http``: the tools over streamable HTTP, a way in that clients discover.

The application is built from the SDK's own parts (its streamable HTTP session manager,
bearer authentication and DNS rebinding protection), arranged for BirdDog:

- ``/mcp``: the MCP endpoint; every request carries a bearer token naming an agent
  session (``birddog agent add``/``agent token``, or the one token of ``--as``). A
  request without a known token is answered 401 whose ``WWW-Authenticate: Bearer``
  names ``resource_metadata`` (``/.well-known/oauth-protected-resource/mcp``).
- ``/.well-known/oauth-protected-resource`` (and its path-suffixed form for ``/mcp``):
  RFC 9728 protected resource metadata. BirdDog has no authorization server (tokens come
  from the operator's ``birddog agent token``), so it names none and says so in
  ``resource_documentation``, a plain-text page at ``/.well-known/birddog-token``.
- Sessions: a quota per caller, a short idle timeout and resumable SSE streams
  (:mod:`birddog.mcp.sessions`).
- ``insecure_as``: the loopback-only test mode. Every request is that one agent session,
  with no token checked, for tools that cannot send a header (the MCP conformance
  suite). Refused on any address but a loopback one, and announced loudly at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import structlog
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    RequireAuthMiddleware,
)
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import cors_middleware
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from birddog.core.ask import address_text
from birddog.core.errors import InvalidSetting, StoreUnavailable
from birddog.core.mail import AgentAddress
from birddog.mcp.server import build_server, token_identity
from birddog.mcp.sessions import (
    DEFAULT_SESSION_IDLE_S,
    DEFAULT_SESSIONS_PER_CALLER,
    CallerSessions,
    SessionQuota,
)
from birddog.mcp.tools import AgentTools
from birddog.ports import TokenBook

log = structlog.get_logger("birddog.mcp")

MCP_PATH: Final = "/mcp"
METADATA_PATH: Final = "/.well-known/oauth-protected-resource"
TOKEN_HELP_PATH: Final = "/.well-known/birddog-token"  # noqa: S105 - a path, not a secret

TEST_MODE_TOKEN: Final = "insecure-test-mode"  # noqa: S105 - stands for no token
"""What stands for a token in the test mode (no token is checked there)."""


def token_help(url: str) -> str:
    """The plain-text page that says how to get a token for the server at ``url``."""
    return (
        f"BirdDog MCP server: {url}{MCP_PATH}\n"
        "\n"
        "There is no OAuth authorization server. A token comes from the operator of this\n"
        "BirdDog, who runs\n"
        "\n"
        "    birddog agent add AGENT:SESSION      (a new agent: a token, printed once)\n"
        "    birddog agent token AGENT:SESSION    (another token for that agent session)\n"
        "\n"
        "and hands it to the agent. Send it on every request:\n"
        "\n"
        "    Authorization: Bearer <token>\n"
        "\n"
        "A server started as `birddog mcp --as AGENT:SESSION --http` takes the one token\n"
        "in BIRDDOG_MCP_TOKEN (or --token), or the one it printed at start.\n"
    )


def resource_metadata(url: str) -> dict[str, Any]:
    """RFC 9728 protected resource metadata of the MCP endpoint of the server at ``url``.

    No ``authorization_servers``: BirdDog issues its tokens from the command line, and
    ``resource_documentation`` (and ``resource_name``) say so.
    """
    return {
        "resource": f"{url}{MCP_PATH}",
        "bearer_methods_supported": ["header"],
        "resource_name": "BirdDog MCP server (no authorization server: get a token with "
        "`birddog agent token AGENT:SESSION` and send it as Authorization: Bearer)",
        "resource_documentation": f"{url}{TOKEN_HELP_PATH}",
    }


class BearerTokens:
    """The SDK's token verifier over BirdDog's token book: a token names an agent session.

    Args:
        tokens: who each token is (``birddog agent add``'s tokens, or one fixed token).
    """

    def __init__(self, tokens: TokenBook) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access the token gives: acting as its agent session, nothing else."""
        try:
            caller = await self.tokens.authenticate(token)
        except StoreUnavailable as exc:
            log.warning("mcp_token_check_failed", error=type(exc).__name__)
            return None
        if caller is None:
            return None
        return AccessToken(token=token, client_id=address_text(caller), scopes=[])


class OneToken:
    """A token book of one token for one identity (``birddog mcp --as X --http``).

    Args:
        token: the token.
        caller: who it names.
    """

    def __init__(self, token: str, caller: AgentAddress) -> None:
        self.token = token
        self.caller = caller

    async def authenticate(self, token: str) -> AgentAddress | None:
        """``caller`` for the one token, None for anything else (compared in constant time)."""
        return self.caller if hmac.compare_digest(token.encode(), self.token.encode()) else None


class _EveryRequestAs(AuthenticationBackend):
    """The test mode's authentication: every request is ``caller``, no token checked."""

    def __init__(self, caller: AgentAddress) -> None:
        self.access = AccessToken(token=TEST_MODE_TOKEN, client_id=address_text(caller), scopes=[])

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, AuthenticatedUser]:
        del conn
        return AuthCredentials([]), AuthenticatedUser(self.access)


def check_test_mode(host: str) -> None:
    """Refuse the test mode on any address but a loopback one.

    Raises:
        InvalidSetting: ``host`` is not a loopback address.
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InvalidSetting(
            f"--insecure-test-mode serves without tokens, so only on a loopback address; "
            f"not on {host}",
            field="--insecure-test-mode",
        )


def _caller_in(scope: Scope) -> str | None:
    user = scope.get("user")
    return user.access_token.client_id if isinstance(user, AuthenticatedUser) else None


def _security(host: str) -> TransportSecuritySettings:
    """The SDK's DNS rebinding protection: Host and Origin must be this machine's loopback."""
    del host
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


@contextlib.asynccontextmanager
async def http_app(
    agent_tools: AgentTools,
    tokens: TokenBook | None,
    *,
    port: int,
    host: str = "127.0.0.1",
    channel: bool = False,
    insecure_as: AgentAddress | None = None,
    sessions_per_caller: int = DEFAULT_SESSIONS_PER_CALLER,
    session_idle_s: float = DEFAULT_SESSION_IDLE_S,
) -> AsyncIterator[Starlette]:
    """The streamable HTTP application: ``/mcp``, its metadata and its token help.

    Args:
        agent_tools: what the tools do.
        tokens: who each bearer token is (None only with ``insecure_as``).
        port: the port the server listens on (its URLs, the allowed Host and Origin).
        host: the address it listens on (loopback only in the test mode).
        channel: declare ``claude/channel`` and push replies and tasks.
        insecure_as: the test mode's one identity: no token checked.
        sessions_per_caller: open sessions one caller may hold.
        session_idle_s: a session idle this long is ended.

    Yields:
        The Starlette application (its lifespan runs the session manager).

    Raises:
        InvalidSetting: the test mode on an address that is not a loopback one.
    """
    if insecure_as is not None:
        check_test_mode(host)
    url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
    server = build_server(agent_tools, token_identity, channel=channel, live_callers=True)
    sessions = CallerSessions(
        server,
        per_caller=sessions_per_caller,
        idle_s=session_idle_s,
        security_settings=_security(host),
    )
    endpoint = SessionQuota(StreamableHTTPASGIApp(sessions), sessions, _caller_in)
    metadata_url = AnyHttpUrl(f"{url}{METADATA_PATH}{MCP_PATH}")
    if insecure_as is not None:
        backend: AuthenticationBackend = _EveryRequestAs(insecure_as)
    elif tokens is not None:
        backend = BearerAuthBackend(BearerTokens(tokens))
    else:
        raise InvalidSetting("over HTTP, tokens or the test mode", field="--http")
    metadata = resource_metadata(url)

    async def described(request: Request) -> Response:
        del request
        return JSONResponse(metadata, headers={"Cache-Control": "public, max-age=3600"})

    async def helped(request: Request) -> Response:
        del request
        return PlainTextResponse(token_help(url))

    app = Starlette(
        routes=[
            Route(MCP_PATH, endpoint=RequireAuthMiddleware(endpoint, [], metadata_url)),
            # Browser-based clients (the Inspector) read the metadata across origins.
            Route(
                METADATA_PATH,
                endpoint=cors_middleware(described, ["GET", "OPTIONS"]),
                methods=["GET", "OPTIONS"],
            ),
            Route(
                f"{METADATA_PATH}{MCP_PATH}",
                endpoint=cors_middleware(described, ["GET", "OPTIONS"]),
                methods=["GET", "OPTIONS"],
            ),
            Route(TOKEN_HELP_PATH, endpoint=helped, methods=["GET"]),
        ],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=backend),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lambda _app: sessions.run(),
    )
    yield app


async def serve_http(
    agent_tools: AgentTools,
    tokens: TokenBook | None,
    *,
    port: int,
    channel: bool = False,
    insecure_as: AgentAddress | None = None,
    sessions_per_caller: int = DEFAULT_SESSIONS_PER_CALLER,
    session_idle_s: float = DEFAULT_SESSION_IDLE_S,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve the tools over streamable HTTP on 127.0.0.1 until ``stop`` is set.

    Args:
        agent_tools: what the tools do.
        tokens: who each bearer token is (None only with ``insecure_as``).
        port: the port (0 picks a free one).
        channel: declare ``claude/channel`` and push replies and tasks.
        insecure_as: the test mode's one identity (no token checked; loopback only).
        sessions_per_caller: open sessions one caller may hold.
        session_idle_s: a session idle this long is ended.
        ready: told the URL of the MCP endpoint once the server listens.
        stop: set to stop serving.
    """
    from birddog.http.server import listening_socket, serve_asgi  # noqa: PLC0415 - HTTP only

    host = "127.0.0.1"
    if insecure_as is not None:
        check_test_mode(host)
    # Bound first: the app allows its own Host and Origin, so it needs the port.
    sock = listening_socket(host, port)
    bound = sock.getsockname()[1]
    async with http_app(
        agent_tools,
        tokens,
        port=bound,
        host=host,
        channel=channel,
        insecure_as=insecure_as,
        sessions_per_caller=sessions_per_caller,
        session_idle_s=session_idle_s,
    ) as app:
        await serve_asgi(
            app,
            sock,
            ready=None if ready is None else (lambda url: ready(f"{url}{MCP_PATH}")),
            stop=stop,
        )
