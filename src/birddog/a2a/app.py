"""The ``birddog a2a`` application: each agent's card and the SDK's routes behind the gate.

:func:`agent_card` is the Agent Card of one agent; :func:`a2a_app` mounts, for every agent
with a route, the card and ``a2a-sdk``'s JSON-RPC and HTTP+JSON routes (A2A 1.0, and 0.3
through the SDK's compatibility layer) at ``/a2a/AGENT/``, over
:class:`~birddog.a2a.server.MailRoomRequestHandler`, behind :class:`~birddog.a2a.gate.Gate`.
"""

from __future__ import annotations

import json

import structlog
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import (
    AGENT_CARD_WELL_KNOWN_PATH,
    PROTOCOL_VERSION_0_3,
    PROTOCOL_VERSION_CURRENT,
    TransportProtocol,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from birddog.a2a.gate import (
    CALLER_SCOPE_KEY,
    DEFAULT_MAX_BODY_BYTES,
    URL_FORM,
    ASGIApp,
    Gate,
    TokenRate,
)
from birddog.a2a.server import AGENT_STATE_KEY, A2AServices, MailRoomRequestHandler
from birddog.core.errors import StoreUnavailable
from birddog.core.push import is_push_agent
from birddog.core.text import printable

log = structlog.get_logger("birddog.a2a")

__all__ = ["a2a_app", "agent_card"]


def agent_card(agent_id: str, base_url: str, *, version: str) -> pb.AgentCard:
    """The Agent Card of one agent served at ``base_url`` (``.../a2a/AGENT/``).

    Args:
        agent_id: the agent.
        base_url: its base URL, for both bindings.
        version: BirdDog's version (the card's ``version``).

    Returns:
        The card: JSON-RPC and HTTP+JSON at ``base_url``, bearer tokens, text in and out,
        no streaming.
    """
    name = printable(agent_id)
    return pb.AgentCard(
        name=name,
        description=(
            f"The BirdDog agent {name}: each message is durable mail to one of its sessions "
            "(the contextId), answered when its work settles."
        ),
        # A2A 1.0 first (the version spoken), then 0.3 at the same URL for the clients
        # still on it (the SDK's compatibility layer; the card then carries their url).
        supported_interfaces=[
            pb.AgentInterface(url=base_url, protocol_binding=binding, protocol_version=version)
            for version in (PROTOCOL_VERSION_CURRENT, PROTOCOL_VERSION_0_3)
            for binding in (TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value)
        ],
        version=version,
        capabilities=pb.AgentCapabilities(streaming=False, push_notifications=True),
        security_schemes={
            "bearer": pb.SecurityScheme(
                http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="A per-agent token from `birddog agent add` or "
                    "`birddog agent token`.",
                )
            )
        },
        security_requirements=[pb.SecurityRequirement(schemes={"bearer": pb.StringList()})],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            pb.AgentSkill(
                id="mail",
                name="Durable mail",
                description=f"Whatever {name} does, asked by mail and answered once settled.",
                tags=["birddog", "durable"],
            )
        ],
    )


class _Context(DefaultServerCallContextBuilder):
    """The SDK's call context, with the caller and the addressed agent in its state."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[CALLER_SCOPE_KEY] = request.scope.get(CALLER_SCOPE_KEY)
        context.state[AGENT_STATE_KEY] = request.path_params.get("agent")
        # The SDK reads the headers (A2A-Version); the bearer token stays out of its state.
        headers = context.state.get("headers")
        if isinstance(headers, dict):
            headers.pop("authorization", None)
        return context


def a2a_app(
    services: A2AServices,
    *,
    public_url: str,
    version: str,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    rate: TokenRate | None = None,
) -> ASGIApp:
    """The Starlette application serving every agent with a route under ``/a2a/AGENT/``.

    A2A 1.0 is spoken, and 0.3 too through ``a2a-sdk``'s compatibility layer (its JSON-RPC
    methods on the same endpoint, its REST routes under ``/v1/``).

    Args:
        services: the adapters the requests call.
        public_url: where callers reach this server (``http://127.0.0.1:9468``), for the
            cards' URLs.
        version: BirdDog's version, for the cards.
        max_body_bytes: the largest request body read (413 past it, before parsing).
        rate: each token's request bucket (default: :class:`~birddog.a2a.gate.TokenRate`).

    Returns:
        The ASGI application behind its :class:`~birddog.a2a.gate.Gate`.
    """
    handler = MailRoomRequestHandler(services)
    context = _Context()

    async def card(request: Request) -> Response:
        agent_id = request.path_params["agent"]
        try:
            known = not is_push_agent(agent_id) and await services.routes.known(agent_id)
        except StoreUnavailable as exc:
            log.warning("a2a_database_unavailable", error=type(exc).__name__)
            return JSONResponse({"error": "database unavailable"}, status_code=503)
        if not known:
            return JSONResponse({"error": f"no such agent: {URL_FORM}"}, status_code=404)
        base = f"{public_url.rstrip('/')}/a2a/{agent_id}/"
        body = json.dumps(agent_card_to_dict(agent_card(agent_id, base, version=version)))
        return Response(body, media_type="application/json")

    per_agent: list[BaseRoute] = [
        Route(AGENT_CARD_WELL_KNOWN_PATH, card, methods=["GET"]),
        *create_jsonrpc_routes(handler, "/", context_builder=context, enable_v0_3_compat=True),
        *create_rest_routes(handler, context_builder=context, enable_v0_3_compat=True),
    ]
    app = Starlette(routes=[Mount("/a2a/{agent}", routes=per_agent)])
    return Gate(app, services.tokens, max_body_bytes=max_body_bytes, rate=rate)
