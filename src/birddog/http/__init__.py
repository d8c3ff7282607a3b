"""The HTTP adapter: signed delivery of replies, dead-letter alerts and a static route book.

- :class:`HttpTransport` posts each reply to its recipient's inbox (the transport port).
- :func:`classify` is the pure reading of one HTTP answer.
- :mod:`birddog.http.signing` signs and verifies Standard Webhooks v1 signatures.
- :class:`AlertPoster` posts a signed alert for each dead letter.
- :class:`StaticRoutes` is a dict-backed route book for tests and small setups.

The recipient's side lives in :mod:`birddog.inbox`.
"""

from birddog.http.alerts import ALERT_TYPE, AlertPoster, alert_payload
from birddog.http.answers import classify
from birddog.http.routes import StaticRoutes
from birddog.http.signing import generate_secret, sign
from birddog.http.transport import DEFAULT_USER_AGENT, HttpTransport

__all__ = [
    "ALERT_TYPE",
    "DEFAULT_USER_AGENT",
    "AlertPoster",
    "HttpTransport",
    "StaticRoutes",
    "alert_payload",
    "classify",
    "generate_secret",
    "sign",
]
