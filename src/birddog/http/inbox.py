"""The recipient's side: verify, parse, check and deduplicate the replies BirdDog delivers.

A Python host that receives replies builds one :class:`Inbox` with the route's signing
secret and calls :meth:`Inbox.receive` on each POST, or mounts :func:`aiohttp_handler`::

    inbox = Inbox(secret)

    async def on_reply(reply: Reply) -> None:
        inbox.check_against(reply, sent_mail[reply.in_reply_to])
        await store(reply)                 # make it durable before acknowledging

    app.router.add_post("/birddog/inbox", aiohttp_handler(inbox, on_reply))

``examples/receive_replies.py`` is a complete, runnable host; ``birddog listen AGENT``
needs no code at all.

Delivery is at least once, so the same reply can arrive again (same ``webhook-id``, the
reply key). Deduplication here is in memory and bounded; a host that must never act twice
also keeps the reply key unique in its own storage.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import pydantic_core
import structlog
from aiohttp import web

from birddog.clock import SystemClock
from birddog.core.batch import BATCH_ID_PREFIX, batch_id
from birddog.core.errors import (
    InboxRefused,
    InvalidInput,
    InvalidSignature,
    MalformedReply,
    ReplyMismatch,
    StaleTimestamp,
)
from birddog.core.mail import Mail, Reply, reply_from_wire, reply_key
from birddog.http import signing
from birddog.http.answers import header
from birddog.ports import Clock

__all__ = [
    "Inbox",
    "InboxRefused",
    "InvalidSignature",
    "MalformedReply",
    "Received",
    "ReplyMismatch",
    "StaleTimestamp",
    "aiohttp_handler",
]

log = structlog.get_logger("birddog.inbox")


@dataclass(frozen=True, slots=True)
class Received:
    """A verified reply, and whether this inbox has already taken it.

    Attributes:
        reply: the parsed, verified reply.
        duplicate: True when :meth:`Inbox.remember` was already called for its
            ``webhook-id``: the sender is retrying something this host already took, so
            answer ``{"accepted": true}`` again without acting on it twice.
    """

    reply: Reply
    duplicate: bool

    @property
    def webhook_id(self) -> str:
        """The ``webhook-id`` of the delivery: always the reply key."""
        return self.reply.key


class Inbox:
    """Verifies BirdDog deliveries for one signing secret and remembers the ones taken.

    :meth:`receive` checks and parses, but does not mark the reply as taken: call
    :meth:`remember` once the host has stored or acted on it. A reply that fails to be
    handled is then not mistaken for a duplicate when the sender retries it.

    Args:
        secret: the route's signing secret, ``whsec_<base64>``; a sequence of secrets is
            accepted while rotating (any of them verifies).
        tolerance_s: how far the signed timestamp may be from now, either way.
        dedupe_size: how many taken ``webhook-id`` values are remembered (least recently
            seen forgotten first).
        clock: the time source (default: :class:`birddog.clock.SystemClock`).

    Raises:
        InvalidSecret: a secret is not ``whsec_<base64>``.
        ValueError: no secret, a negative tolerance or a dedupe size below 1.
    """

    def __init__(
        self,
        secret: str | Sequence[str],
        *,
        tolerance_s: int = 300,
        dedupe_size: int = 10000,
        clock: Clock | None = None,
    ) -> None:
        secrets = [secret] if isinstance(secret, str) else list(secret)
        if not secrets:
            raise ValueError("an inbox needs at least one secret")
        if tolerance_s < 0:
            raise ValueError("tolerance_s must not be negative")
        if dedupe_size < 1:
            raise ValueError("dedupe_size must be at least 1")
        self._keys = [signing.secret_key(item) for item in secrets]
        self.tolerance_s = tolerance_s
        self.dedupe_size = dedupe_size
        self.clock: Clock = clock or SystemClock()
        self._taken: OrderedDict[str, None] = OrderedDict()

    def __repr__(self) -> str:
        return f"Inbox(secrets={len(self._keys)}, tolerance_s={self.tolerance_s})"

    def receive(self, headers: Mapping[str, str], body: bytes) -> Received:
        """Verify one delivery and parse its reply.

        The headers and the timestamp tolerance are checked first (:meth:`check_headers`,
        which needs no body), then the signature (constant-time, any ``v1`` signature of
        the space-separated list), then the body.

        Args:
            headers: the request headers; names are matched case-insensitively.
            body: the exact request body bytes.

        Returns:
            The reply and whether it is a duplicate of one already remembered.

        Raises:
            InvalidSignature: a Standard Webhooks header is missing or malformed, or no
                signature matches the secret (forged, tampered, or another secret).
            StaleTimestamp: the timestamp is outside ``tolerance_s`` (a replay, or a
                skewed clock).
            MalformedReply: the body is not a BirdDog reply, or its key is not the
                ``webhook-id``.
        """
        msg_id = self._verified(headers, body)
        try:
            # The TypeScript shape (no inReplyTo) and unknown fields are read, not refused.
            reply = reply_from_wire(pydantic_core.from_json(body))
        except (InvalidInput, ValueError) as exc:
            raise MalformedReply(f"body is not a BirdDog reply: {exc}") from exc
        if reply.key != msg_id:
            raise MalformedReply("webhook-id is not the reply key")
        return Received(reply=reply, duplicate=self.seen(msg_id))

    def receive_batch(
        self, headers: Mapping[str, str], body: bytes
    ) -> list[Received | MalformedReply]:
        """Verify one batched delivery and parse each of its replies.

        A batch is ``{"replies": [...]}`` under one signature, its ``webhook-id`` being
        ``batch:`` and the hash of its sorted keys (:func:`birddog.core.batch.batch_id`).

        Args:
            headers: the request headers; names are matched case-insensitively.
            body: the exact request body bytes.

        Returns:
            One entry per reply, in order: the reply and whether it is a duplicate, or why
            that one reply is malformed (the others stand).

        Raises:
            InvalidSignature: as for :meth:`receive`.
            StaleTimestamp: as for :meth:`receive`.
            MalformedReply: the body is not a batch, or its keys do not make its
                ``webhook-id``.
        """
        msg_id = self._verified(headers, body)
        try:
            data = pydantic_core.from_json(body)
        except ValueError as exc:
            raise MalformedReply(f"body is not JSON: {exc}") from exc
        entries = data.get("replies") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise MalformedReply('body is not a batch: {"replies": [...]}')
        keys = [entry.get("key") if isinstance(entry, dict) else None for entry in entries]
        if not all(isinstance(key, str) for key in keys):
            raise MalformedReply("a reply of the batch has no key")
        if batch_id([str(key) for key in keys]) != msg_id:
            raise MalformedReply("webhook-id is not the batch id of the replies' keys")
        received: list[Received | MalformedReply] = []
        for entry in entries:
            try:
                reply = reply_from_wire(entry)
            except InvalidInput as exc:
                received.append(MalformedReply(f"reply {entry['key']!r} is malformed: {exc}"))
                continue
            received.append(Received(reply=reply, duplicate=self.seen(reply.key)))
        return received

    def _verified(self, headers: Mapping[str, str], body: bytes) -> str:
        """The ``webhook-id`` of a delivery whose headers, timestamp and signature pass."""
        msg_id, timestamp, signatures = self.check_headers(headers)
        if not signing.verify(
            self._keys, msg_id=msg_id, timestamp=timestamp, body=body, signatures=signatures
        ):
            raise InvalidSignature("no webhook-signature matches this inbox's secret")
        return msg_id

    def check_headers(self, headers: Mapping[str, str]) -> tuple[str, int, str]:
        """Check what can be checked before the body is read: the headers and the time.

        A delivery without the three Standard Webhooks headers, or with a timestamp
        outside the tolerance, is refused here, so nobody can make a host read (and hold)
        a large body without at least a fresh timestamp; :meth:`receive` then verifies
        the signature over the body.

        Args:
            headers: the request headers; names are matched case-insensitively.

        Returns:
            The ``webhook-id``, the timestamp in Unix seconds and the signatures.

        Raises:
            InvalidSignature: a header is missing or malformed.
            StaleTimestamp: the timestamp is outside ``tolerance_s``.
        """
        msg_id = header(headers, signing.ID_HEADER)
        stamp = header(headers, signing.TIMESTAMP_HEADER)
        signatures = header(headers, signing.SIGNATURE_HEADER)
        if not msg_id or not stamp or not signatures:
            raise InvalidSignature("missing webhook-id, webhook-timestamp or webhook-signature")
        if not msg_id.isascii() and not _encodable(msg_id):
            # aiohttp decodes invalid UTF-8 header bytes to lone surrogates; no sender
            # could have signed such an id, and hashing it would raise UnicodeEncodeError.
            raise InvalidSignature("webhook-id is not valid UTF-8 text")
        stamp = stamp.strip()
        # Unix seconds have 10 digits until 2286; a longer value is not a timestamp.
        if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12:
            raise InvalidSignature("webhook-timestamp is not Unix seconds")
        timestamp = int(stamp)
        skew = self._now().timestamp() - timestamp
        if abs(skew) > self.tolerance_s:
            direction = "old" if skew > 0 else "far in the future"
            raise StaleTimestamp(
                f"webhook-timestamp is {abs(skew):.0f} s {direction}; "
                f"tolerance is {self.tolerance_s} s"
            )
        return msg_id, timestamp, signatures

    def seen(self, webhook_id: str) -> bool:
        """Whether a delivery with this ``webhook-id`` was already taken (remembered).

        Args:
            webhook_id: the ``webhook-id`` (the reply key).

        Returns:
            True when :meth:`remember` was called for it and it is still remembered.
        """
        if webhook_id in self._taken:
            self._taken.move_to_end(webhook_id)
            return True
        return False

    def remember(self, webhook_id: str) -> None:
        """Mark a delivery as taken, so a retry of it is reported as a duplicate.

        Call it after the host has stored or acted on the reply; the oldest entries are
        forgotten beyond ``dedupe_size``.

        Args:
            webhook_id: the ``webhook-id`` (the reply key).
        """
        self._taken[webhook_id] = None
        self._taken.move_to_end(webhook_id)
        while len(self._taken) > self.dedupe_size:
            self._taken.popitem(last=False)

    def check_against(self, reply: Reply, mail: Mail) -> None:
        """Check that a reply answers a mail this host sent.

        Only then are the reply's facts to be trusted: it names the mail, its key is one of
        the mail's reply keys, it is addressed to that ``replyTo`` entry, and it comes from
        the agent the mail was sent to.

        Args:
            reply: the received reply.
            mail: the mail it claims to answer (look it up by ``reply.in_reply_to``).

        Raises:
            ReplyMismatch: the first field that does not match, named in ``field``.
        """
        if reply.in_reply_to != mail.key:
            raise ReplyMismatch("reply answers another mail", field="inReplyTo")
        prefix = reply_key(mail.key, 0).removesuffix("0")
        index_text = reply.key.removeprefix(prefix)
        if index_text == reply.key or not (index_text.isascii() and index_text.isdigit()):
            raise ReplyMismatch(f"reply key is not {prefix}<index>", field="key")
        index = int(index_text)
        if reply_key(mail.key, index) != reply.key or index >= len(mail.reply_to):
            raise ReplyMismatch("reply key names no replyTo entry of the mail", field="key")
        if mail.reply_to[index] != reply.to:
            raise ReplyMismatch(f"reply is not addressed to replyTo[{index}]", field="to")
        if reply.from_ != mail.to:
            raise ReplyMismatch("reply does not come from the mail's recipient", field="from")

    def _now(self) -> datetime:
        return self.clock.now()


ReplyHandler = Callable[[Reply], Awaitable[None]]
"""What the host does with a verified, new reply; it returns once the reply is safe."""


DEFAULT_MAX_BODY_BYTES = 1024 * 1024
"""The handler reads request bodies up to this (1 MiB). A host that takes replies near
BirdDog's 1 MiB content limit raises it: JSON escaping and the envelope add to the content
(up to six bytes a character for control characters)."""


def aiohttp_handler(
    inbox: Inbox,
    on_reply: ReplyHandler,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    batches: bool = False,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp request handler that receives BirdDog replies.

    Answers:

    - ``200 {"accepted": true}`` once ``on_reply`` returned (then the reply is remembered);
    - ``200 {"accepted": true, "duplicate": true}`` for a reply already taken, without
      calling ``on_reply`` again; a concurrent copy of a reply still being handled waits
      for that first call and answers after it;
    - ``401`` for missing signature headers or a stale timestamp, before the body is
      read, and for a signature that does not match;
    - ``413`` for a body above ``max_body_bytes`` (at most that much is ever read);
    - ``400`` for a malformed reply, or when ``on_reply`` raises :class:`InboxRefused`
      (for example :class:`ReplyMismatch` from :meth:`Inbox.check_against`);
    - ``500`` when ``on_reply`` raises anything else, so the sender retries later.

    Every refusal has ``{"accepted": false, "error": "<reason>"}`` as its body.

    With ``batches=True`` (for a route added with ``--batch N``), a delivery whose
    ``webhook-id`` starts with ``batch:`` is a batch (:meth:`Inbox.receive_batch`):
    ``on_reply`` is called for each new reply in turn, and the answer is
    ``200 {"accepted": [<the keys taken>]}``, duplicates included; a reply that is
    malformed, or whose ``on_reply`` raised, is left out, so BirdDog retries that one
    alone. Single replies are still answered as above.

    The handler reads the body itself, bounded by ``max_body_bytes`` and only once the
    headers and the timestamp passed, so the application's ``client_max_size`` does not
    apply to it.

    Args:
        inbox: verifies and deduplicates.
        on_reply: handles one new reply; it should return only once the reply is stored.
        max_body_bytes: the largest request body read (default 1 MiB; raise it to take
            replies whose content is close to 1 MiB, or batches of many replies).
        batches: also take batched deliveries.

    Returns:
        The handler, for ``app.router.add_post(path, handler)``.
    """
    in_flight: dict[str, asyncio.Event] = {}

    async def handle(request: web.Request) -> web.Response:
        try:
            inbox.check_headers(request.headers)
        except (InvalidSignature, StaleTimestamp) as exc:
            log.warning("inbox_refused", reason=type(exc).__name__)
            return _refusal(401, exc)
        body = await _read_bounded(request, max_body_bytes)
        if body is None:
            return _refusal(413, f"body larger than {max_body_bytes} bytes")
        if batches and (header(request.headers, signing.ID_HEADER) or "").startswith(
            BATCH_ID_PREFIX
        ):
            return await take_batch(request.headers, body)
        try:
            received = inbox.receive(request.headers, body)
        except (InvalidSignature, StaleTimestamp) as exc:
            log.warning("inbox_refused", reason=type(exc).__name__)
            return _refusal(401, exc)
        except InboxRefused as exc:
            log.warning("inbox_refused", reason=type(exc).__name__)
            return _refusal(400, exc)
        taken = await take(received.reply)
        if isinstance(taken, web.Response):
            return taken
        return web.json_response(
            {"accepted": True, "duplicate": True} if taken else {"accepted": True}
        )

    async def take(reply: Reply) -> bool | web.Response:
        """Hand one reply to ``on_reply`` once: True for a duplicate, False when taken now."""
        key = reply.key
        while not inbox.seen(key) and key in in_flight:
            await in_flight[key].wait()
        if inbox.seen(key):
            return True
        done = in_flight[key] = asyncio.Event()
        try:
            await on_reply(reply)
        except InboxRefused as exc:
            log.warning("inbox_refused", key=key, reason=type(exc).__name__)
            return _refusal(400, exc)
        except Exception as exc:
            # The type only: a host's exception text may quote the reply's content.
            log.error("inbox_handler_failed", key=key, error=type(exc).__name__)  # noqa: TRY400
            return _refusal(500, "the reply could not be handled; retry later")
        else:
            # Before waking any concurrent copy, so it sees the reply as taken.
            inbox.remember(key)
        finally:
            del in_flight[key]
            done.set()
        return False

    async def take_batch(headers: Mapping[str, str], body: bytes) -> web.Response:
        try:
            entries = inbox.receive_batch(headers, body)
        except InboxRefused as exc:
            log.warning("inbox_refused", reason=type(exc).__name__)
            unsigned = isinstance(exc, InvalidSignature | StaleTimestamp)
            return _refusal(401 if unsigned else 400, exc)
        accepted: list[str] = []
        for entry in entries:
            if isinstance(entry, MalformedReply):
                log.warning("inbox_refused", reason=type(entry).__name__)
            elif not isinstance(await take(entry.reply), web.Response):
                accepted.append(entry.reply.key)
        return web.json_response({"accepted": accepted})

    return handle


async def _read_bounded(request: web.Request, limit: int) -> bytes | None:
    """The request body, or None when it is larger than ``limit``."""
    if request.content_length is not None and request.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(limit + 1 - size):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return None
    return b"".join(chunks)


def _refusal(status: int, error: Exception | str) -> web.Response:
    return web.json_response({"accepted": False, "error": str(error)}, status=status)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
