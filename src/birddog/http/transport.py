"""The HTTP transport: signed POSTs to each recipient's inbox over a pooled aiohttp session.

aiohttp, already a dependency, because it keeps its pool under concurrency where httpx's
degrades (encode/httpx#3215): the measurement against httpx (``bench/http_clients.py``)
is in docs/performance.md, "The HTTP client".
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver

from birddog import tracing
from birddog.core.batch import batch_body, batch_id, spread
from birddog.core.delivery import DeadReason, Deferred, DeliveryResult, Failed, Parcel, Rejected
from birddog.core.diagnostic import bounded_diagnostic
from birddog.core.egress import EgressPolicy, redact_urls_in
from birddog.core.errors import InvalidInput, InvalidSecret, SecretUnreadable
from birddog.core.mail import Reply
from birddog.core.push import PUSH_CONTENT_TYPE, push_headers, push_signing_secret
from birddog.http import signing
from birddog.http.answers import MIN_DEFERRAL_S, classify, classify_batch
from birddog.http.client import SessionOwner
from birddog.http.egress import egress_connector, egress_refusal
from birddog.ports import Clock, Route, RouteBook

HELD_RECHECK_S = 60.0
"""A reply to a held recipient that slipped through the claim is deferred this long."""

SIGNERS_KEPT = 4096
"""Signers (decoded keys) kept per set of route secrets, and parsed route URLs, before
each cache starts again."""

ALLOWED_SCHEMES = frozenset({"http", "https"})

_RAW_BODY_MAX = 1024 * 1024


def _version() -> str:
    try:
        return importlib.metadata.version("birddog")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0"


DEFAULT_USER_AGENT = f"birddog/{_version()}"


class HttpTransport(SessionOwner):
    """Posts each reply, signed, to its recipient's inbox URL and classifies the answer.

    Implements the :class:`~birddog.ports.Transport` port. The route for
    ``reply.to.agent_id`` names the URL and the signing secret: no route is a dead letter
    (``unknown_recipient``) at once, never a made-up delivery; a held route defers. Every
    post carries the Standard Webhooks headers with ``webhook-id`` = the reply key, so the
    id is stable across retries and doubles as the recipient's idempotency key.

    A post that gets no answer within ``timeout_s`` (or the route's own post timeout,
    :attr:`Route.policy <birddog.ports.Route.policy>`) is cancelled and its connection
    closed (never left running) and counts as a failure. Redirects are not followed.
    Inside a traced post (:mod:`birddog.tracing`) the POST carries the post span's
    ``traceparent`` header, so the recipient's own spans join the sender's trace.
    Every new connection passes the egress policy after DNS resolution
    (:mod:`birddog.http.egress`); a destination it refuses is a dead letter
    (``egress_refused``), as is a route URL that carries credentials. With a ``proxy``,
    every post goes through it and the proxy, which resolves the names, enforces egress.
    Use it as an async context manager, or call :meth:`close` when done; the pooled
    session is created on the first post.

    Args:
        routes: where each agent's replies go.
        timeout_s: the whole post (connect, send, answer, body) must finish in this.
        max_body_bytes: response bodies are read up to this; a larger 2xx is a failure.
        max_deferral_s: the longest a ``Retry-After`` may defer a reply.
        user_agent: the ``user-agent`` header.
        clock: the time source for ``webhook-timestamp`` and deferrals.
        connector_limit: the most connections open at once, over all recipients.
        egress: where posts may connect (default: the internal-mode policy).
        push_egress: where A2A pushes (routes of kind ``a2a``) may connect, on a session of
            their own (default: ``egress`` in public mode).
        proxy: an HTTP proxy URL every post goes through (``BIRDDOG_HTTP_PROXY``).
        resolver: the DNS resolver the egress policy filters (default: aiohttp's).
        max_timeout_s: the longest a route's own post timeout may make a post (the
            daemon's lease: a post must end before its claim); None: no cap.
        push_body: turns a stored reply into the body of an A2A push (routes of kind
            ``a2a``; :func:`birddog.a2a.push.push_body`); None: such replies are
            unsendable.
    """

    def __init__(
        self,
        routes: RouteBook,
        *,
        timeout_s: float = 30.0,
        max_body_bytes: int = 65536,
        max_deferral_s: float = 3600.0,
        user_agent: str = DEFAULT_USER_AGENT,
        clock: Clock,
        connector_limit: int = 100,
        egress: EgressPolicy | None = None,
        push_egress: EgressPolicy | None = None,
        proxy: str | None = None,
        resolver: AbstractResolver | None = None,
        max_timeout_s: float | None = None,
        push_body: Callable[[bytes], bytes] | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if max_body_bytes < 0:
            raise ValueError("max_body_bytes must not be negative")
        if connector_limit < 1:
            raise ValueError("connector_limit must be at least 1")
        self.routes = routes
        self.timeout_s = timeout_s
        self.max_timeout_s = max_timeout_s
        self.max_body_bytes = max_body_bytes
        self.max_deferral_s = max_deferral_s
        self.user_agent = user_agent
        self.clock = clock
        self.connector_limit = connector_limit
        self.egress = egress if egress is not None else EgressPolicy()
        self.push_egress = push_egress if push_egress is not None else self.egress.for_pushes()
        self.proxy = proxy
        self.resolver = resolver
        self.push_body = push_body
        self._session: aiohttp.ClientSession | None = None
        self._push_session: aiohttp.ClientSession | None = None
        self._signers: dict[tuple[str, ...], signing.Signer] = {}
        # Each route's URL, parsed and checked once (yarl parsing was a tenth of a post).
        self._urls: dict[tuple[str, str, str | None], yarl.URL | Rejected] = {}

    async def post(self, reply: Reply) -> DeliveryResult:
        """Post one reply to its recipient and classify the answer.

        Args:
            reply: the reply to deliver.

        Returns:
            Accepted on an explicit ``{"accepted": true}``; Deferred for a held recipient
            or a 429/503 with ``Retry-After``; Rejected for an unknown recipient, a URL
            that is not http(s), or 410 Gone; Failed for everything else, with a bounded,
            redacted reason.
        """
        [result] = await self.post_parcels([Parcel.of(reply)])
        return result

    async def post_parcels(self, parcels: Sequence[Parcel]) -> list[DeliveryResult]:
        """Post stored replies to their recipient as they are, and classify the answer.

        The parcels' JSON bodies are sent unchanged (the drain's fast path: no model is
        built and dumped again). One parcel is one post, exactly as :meth:`post`.

        Args:
            parcels: replies to one recipient (the first one's agent id names it).

        Returns:
            One result per parcel, in order (see :meth:`post`).
        """
        if not parcels:
            return []
        agent_id = parcels[0].agent_id
        route_or_result = await self._route(agent_id)
        if not isinstance(route_or_result, tuple):
            return [route_or_result] * len(parcels)
        route, url = route_or_result
        if route.kind == "a2a":
            return [await self._push(route, url, parcel) for parcel in parcels]
        now = self._now()
        try:
            signer = self._signer(route, now)
        except InvalidSecret:
            # An operator can fix the route, so this is a strike rather than a death.
            failed = Failed(bounded_diagnostic(f"route secret for agent {agent_id} is invalid"))
            return [failed] * len(parcels)
        batched = route.batch_size > 1 or len(parcels) > 1
        keys = [parcel.key for parcel in parcels]
        if batched:
            body = batch_body([parcel.body for parcel in parcels])
            msg_id = batch_id(keys)
        else:
            body, msg_id = parcels[0].body, keys[0]
        headers = signer.headers(msg_id=msg_id, timestamp=int(now.timestamp()), body=body)
        headers["content-type"] = "application/json"
        headers["user-agent"] = self.user_agent
        if (traceparent := tracing.outgoing()) is not None:
            headers[tracing.TRACEPARENT] = traceparent
        # A batch's acknowledgement may list every key: it may be that much larger.
        limit = self.max_body_bytes + (sum(len(key) + 8 for key in keys) if batched else 0)
        answer = await self._exchange(
            agent_id, url, body, headers, limit=limit, timeout_s=self._timeout_s(route)
        )
        if not isinstance(answer, tuple):
            return spread(answer, len(parcels))
        status, answer_headers, answer_body = answer
        if batched:
            results = classify_batch(
                status,
                answer_headers,
                answer_body,
                keys,
                now=self._now(),
                max_deferral_s=self.max_deferral_s,
                min_deferral_s=MIN_DEFERRAL_S,
            )
        else:
            results = [self._classified(status, answer_headers, answer_body)]
        # The status travels with each result, into the rows' attempt logs.
        return [replace(result, status=status) for result in results]

    def _classified(
        self,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        *,
        acknowledged_by_status: bool = False,
    ) -> DeliveryResult:
        """One post's answer classified (:func:`~birddog.http.answers.classify`), now."""
        return classify(
            status,
            headers,
            body,
            now=self._now(),
            max_deferral_s=self.max_deferral_s,
            min_deferral_s=MIN_DEFERRAL_S,
            acknowledged_by_status=acknowledged_by_status,
        )

    async def _push(self, route: Route, url: yarl.URL, parcel: Parcel) -> DeliveryResult:
        """Post one reply to an A2A push config: as a StreamResponse, any 2xx accepting.

        The body is ``application/a2a+json``. The reply key goes as ``webhook-id`` (the
        receiver's idempotency key: delivery is at least once) with ``webhook-timestamp``;
        a config whose token is a Standard Webhooks secret (``whsec_...``) gets
        ``webhook-signature`` made with it (the token itself is then never sent), any
        other token travels in ``X-A2A-Notification-Token``; ``Authorization`` as
        configured. The connection passes the push egress policy, not the routes'.
        """
        if self.push_body is None:
            return Rejected(
                "an A2A push needs the a2a extra (pip install 'birddog[a2a]')",
                dead_reason=DeadReason.UNSENDABLE,
            )
        try:
            body = self.push_body(parcel.body)
            headers = push_headers(route.secret or "")
            key = push_signing_secret(route.secret or "")
            timestamp = int(self._now().timestamp())
            if key is not None:
                headers.update(
                    signing.headers(key, msg_id=parcel.key, timestamp=timestamp, body=body)
                )
        except (InvalidInput, InvalidSecret, ValueError) as exc:
            return Rejected(bounded_diagnostic(str(exc)), dead_reason=DeadReason.UNSENDABLE)
        headers["content-type"] = PUSH_CONTENT_TYPE
        headers["user-agent"] = self.user_agent
        headers[signing.ID_HEADER] = parcel.key
        headers[signing.TIMESTAMP_HEADER] = str(timestamp)
        if (traceparent := tracing.outgoing()) is not None:
            headers[tracing.TRACEPARENT] = traceparent
        answer = await self._exchange(
            route.agent_id,
            url,
            body,
            headers,
            limit=self.max_body_bytes,
            timeout_s=self._timeout_s(route),
            push=True,
        )
        if not isinstance(answer, tuple):
            return answer
        status, answer_headers, answer_body = answer
        result = self._classified(status, answer_headers, answer_body, acknowledged_by_status=True)
        return replace(result, status=status)

    async def _route(self, agent_id: str) -> tuple[Route, yarl.URL] | DeliveryResult:
        """The recipient's route and inbox URL, or what a post to it comes to without one."""
        try:
            route = await self.routes.route(agent_id)
        except SecretUnreadable as exc:
            # BIRDDOG_SECRET_KEY is missing or wrong: the operator can fix it, so a strike.
            return Failed(bounded_diagnostic(f"route secret for agent {agent_id}: {exc}"))
        if route is None:
            return Rejected(
                bounded_diagnostic(f"no route for agent {agent_id}"),
                dead_reason=DeadReason.UNKNOWN_RECIPIENT,
            )
        if not route.enabled:
            # The claim already skips held recipients; this guards the race with a hold.
            return Deferred(
                until=self._now() + timedelta(seconds=HELD_RECHECK_S), reason="recipient held"
            )
        url = self._url(route)
        if isinstance(url, Rejected):
            return url
        if route.secret is None:
            return Failed(bounded_diagnostic(f"route for agent {agent_id} has no secret"))
        return route, url

    def _url(self, route: Route) -> yarl.URL | Rejected:
        """The route's inbox URL (or why it has none), parsed once per URL."""
        key = (route.agent_id, route.kind, route.url)
        url = self._urls.get(key)
        if url is None:
            url = _inbox_url(route)
            if len(self._urls) >= SIGNERS_KEPT:
                self._urls.clear()  # routes that changed must not pile up in memory
            self._urls[key] = url
        return url

    def _signer(self, route: Route, now: datetime) -> signing.Signer:
        """The signer for the route's secrets at ``now``, their keys decoded once."""
        secrets = tuple(route.signing_secrets(now))
        signer = self._signers.get(secrets)
        if signer is None:
            signer = signing.Signer(secrets)
            if len(self._signers) >= SIGNERS_KEPT:
                # Rotated-out secrets must not pile up in memory.
                self._signers.clear()
            self._signers[secrets] = signer
        return signer

    def _timeout_s(self, route: Route) -> float:
        """The post timeout for ``route``: its own, else the default; never past the cap."""
        timeout_s = route.policy.post_timeout(self.timeout_s)
        return timeout_s if self.max_timeout_s is None else min(timeout_s, self.max_timeout_s)

    async def _exchange(
        self,
        agent_id: str,
        url: yarl.URL,
        body: bytes,
        headers: Mapping[str, str],
        *,
        limit: int,
        timeout_s: float,
        push: bool = False,
    ) -> tuple[int, Mapping[str, str], bytes] | DeliveryResult:
        """Send one signed body: the answer's status, headers and body, or the failure."""
        try:
            async with asyncio.timeout(timeout_s):
                status, answer_headers, answer, complete = await self._send(
                    url, body, headers, limit=limit, push=push
                )
        except TimeoutError:
            return Failed(f"no answer within {timeout_s:g} s; request cancelled")
        except aiohttp.InvalidURL:
            return Rejected(f"route URL for agent {agent_id} is not a valid URL")
        except (aiohttp.ClientError, OSError) as exc:
            refused = egress_refusal(exc)
            if refused is not None:
                return Rejected(
                    bounded_diagnostic(f"egress refused for agent {agent_id}: {refused.reason}"),
                    dead_reason=DeadReason.EGRESS_REFUSED,
                )
            return Failed(_connection_reason(exc))
        if not complete and 200 <= status < 300:
            return Failed(
                f"HTTP {status} answer body larger than {limit} bytes; "
                "an acknowledgement must be small",
                status=status,
            )
        return status, answer_headers, answer

    async def _send(
        self,
        url: yarl.URL,
        body: bytes,
        headers: Mapping[str, str],
        *,
        limit: int,
        push: bool = False,
    ) -> tuple[int, Mapping[str, str], bytes, bool]:
        """POST and read at most ``limit`` bytes of the answer (a push on its own session).

        Returns:
            The status, the headers, the body read, and whether it was read completely.
        """
        session = self._push_client() if push else self._client()
        # aiohttp writes raw bytes in one go and warns above 1 MiB; a stream is written in
        # chunks, with the same Content-Length.
        data: bytes | io.BytesIO = body if len(body) <= _RAW_BODY_MAX else io.BytesIO(body)
        async with session.post(
            url, data=data, headers=headers, allow_redirects=False, proxy=self.proxy
        ) as resp:
            if resp.content_length is not None and resp.content_length > limit:
                chunks = [await resp.content.read(limit)]
                complete = False
            else:
                chunks, complete = await _read_bounded(resp.content, limit)
            if not complete:
                # Do not drain the rest: drop the connection instead of returning it.
                resp.close()
            return resp.status, resp.headers, b"".join(chunks)[:limit], complete

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = self._new_session(self.egress)
        return self._session

    def _push_client(self) -> aiohttp.ClientSession:
        """The session of A2A pushes: its connections pass the push egress policy."""
        if self._push_session is None or self._push_session.closed:
            self._push_session = self._new_session(self.push_egress)
        return self._push_session

    def _new_session(self, egress: EgressPolicy) -> aiohttp.ClientSession:
        connector = (
            aiohttp.TCPConnector(limit=self.connector_limit)
            if self.proxy is not None
            else egress_connector(egress, limit=self.connector_limit, resolver=self.resolver)
        )
        return aiohttp.ClientSession(
            connector=connector,
            # asyncio.timeout bounds the whole post; aiohttp's own default (5 min) is off.
            timeout=aiohttp.ClientTimeout(total=None),
            # Recipients must not be able to plant state that rides along to others.
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    async def close(self) -> None:
        """Close both sessions and their connections; a later post opens new ones."""
        push, self._push_session = self._push_session, None
        if push is not None:
            await push.close()
        await super().close()

    def _now(self) -> datetime:
        return self.clock.now()


async def _read_bounded(stream: aiohttp.StreamReader, limit: int) -> tuple[list[bytes], bool]:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await stream.read(limit + 1 - size)
        if not chunk:
            return chunks, True
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return chunks, False


def _inbox_url(route: Route) -> yarl.URL | Rejected:
    if route.kind == "mailbox" or route.url is None:
        # The engine delivers mailbox routes itself; a post to one has nowhere to go.
        return Rejected(f"route for agent {route.agent_id} is a mailbox, not an inbox URL")
    try:
        url = yarl.URL(route.url)
    except (TypeError, ValueError):
        return Rejected(f"route URL for agent {route.agent_id} is not a valid URL")
    if url.scheme not in ALLOWED_SCHEMES:
        return Rejected(
            bounded_diagnostic(
                f"route URL scheme {url.scheme or '(none)'!r} for agent {route.agent_id} "
                "is not http or https"
            )
        )
    if not url.host:
        return Rejected(f"route URL for agent {route.agent_id} has no host")
    if url.raw_user is not None or url.raw_password is not None:
        return Rejected(
            bounded_diagnostic(f"route URL for agent {route.agent_id} carries credentials"),
            dead_reason=DeadReason.EGRESS_REFUSED,
        )
    return url


def _connection_reason(exc: BaseException) -> str:
    """A short, safe reason for a connection-level failure (no URL, no secret)."""
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        kind = "TLS error"
    elif isinstance(exc, aiohttp.ClientConnectorDNSError):
        kind = "DNS error"
    elif isinstance(exc, aiohttp.ClientConnectorError):
        kind = "connection failed"
    elif isinstance(exc, aiohttp.ServerDisconnectedError):
        kind = "connection closed by the recipient"
    elif isinstance(exc, aiohttp.ClientPayloadError):
        kind = "answer cut off"
    else:
        kind = "connection error"
    detail = redact_urls_in(str(exc)) or type(exc).__name__
    return bounded_diagnostic(f"{kind}: {detail}")
