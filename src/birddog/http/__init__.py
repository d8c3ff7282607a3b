"""The HTTP adapter: signed delivery of replies, dead-letter alerts and a static route book.

- :class:`HttpTransport` posts each reply to its recipient's inbox (the transport port).
- :func:`classify` is the pure reading of one HTTP answer.
- :mod:`birddog.http.signing` signs and verifies Standard Webhooks v1 signatures.
- :class:`AlertCoalescer` gathers dead letters per recipient; :class:`AlertPoster` posts
  each group as one signed alert.
- :class:`StaticRoutes` is a dict-backed route book for tests and small setups.
- :class:`Inbox` and :func:`aiohttp_handler` are the recipient's side
  (:mod:`birddog.http.inbox`): verify, parse, check and deduplicate delivered replies.
"""

from birddog.http.alerts import (
    ALERT_TYPE,
    AlertCoalescer,
    AlertPoster,
    DeadLetterGroup,
    alert_payload,
)
from birddog.http.answers import classify
from birddog.http.inbox import Inbox, aiohttp_handler
from birddog.http.routes import StaticRoutes
from birddog.http.signing import generate_secret, sign
from birddog.http.transport import DEFAULT_USER_AGENT, HttpTransport

__all__ = [
    "ALERT_TYPE",
    "DEFAULT_USER_AGENT",
    "AlertCoalescer",
    "AlertPoster",
    "DeadLetterGroup",
    "HttpTransport",
    "Inbox",
    "StaticRoutes",
    "aiohttp_handler",
    "alert_payload",
    "classify",
    "generate_secret",
    "sign",
]
