"""Who may use the console: the start-up token, sessions, CSRF tokens and same-origin checks.

The console prints a URL with a random token when it starts (as Jupyter does). Opening
it, or typing the token into the sign-in form, starts a session: an ``HttpOnly``,
``SameSite=Strict`` cookie holding a random session id that only this process knows.
Every page needs a session, since pages show keys, errors and mail previews.

Each session has its CSRF token, an HMAC of the session id under a key that never
leaves the process; every form carries it and every action checks it in constant time.
An action also needs the request's ``Origin`` (or, without one, ``Sec-Fetch-Site``) to be
the console's own, and the ``Host`` of every request must be a loopback name, so a web
page elsewhere can neither post to the console nor read it through DNS rebinding.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})
"""Host names a request may carry: the console listens on 127.0.0.1 only."""

MAX_SESSIONS = 256
"""Sessions kept at once; signing in beyond this forgets the oldest."""


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe), for the start-up URL or a session."""
    return secrets.token_urlsafe(32)


def same_token(given: str | None, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time.

    Args:
        given: what the request carried (None when absent).
        expected: the secret.

    Returns:
        True only for an exact match.
    """
    if given is None:
        return False
    return hmac.compare_digest(given.encode(), expected.encode())


def host_is_loopback(host: str | None) -> bool:
    """Whether a ``Host`` header names this machine's loopback (any port).

    Args:
        host: the header value, ``name[:port]``.

    Returns:
        True for ``127.0.0.1``, ``localhost`` or ``[::1]``, with or without a port.
    """
    if not host:
        return False
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name.lower() in LOOPBACK_HOSTS


def same_origin(headers: Mapping[str, str], host: str) -> bool:
    """Whether a request that changes something comes from the console's own pages.

    Browsers send ``Origin`` with every form post: it must be ``http://<host>``. Under
    the console's ``Referrer-Policy: no-referrer`` a browser sends ``Origin: null``
    instead, and then ``Sec-Fetch-Site`` (which no page can set) must say
    ``same-origin``. A client that sends neither header is not a browser page; it still
    needs the session cookie and the CSRF token.

    Args:
        headers: the request headers.
        host: the request's ``Host``.

    Returns:
        False when the request comes, or may come, from another site.
    """
    origin = headers.get("Origin")
    fetch_site = headers.get("Sec-Fetch-Site")
    if origin is not None and origin != "null":
        parts = urlsplit(origin)
        return parts.scheme == "http" and parts.netloc == host and not parts.path
    if fetch_site is not None:
        return fetch_site == "same-origin"
    return origin is None


def safe_next(path: str | None, default: str = "/") -> str:
    """A path to send the browser to after signing in or acting: only this site's paths.

    Args:
        path: the requested path and query (``/pending?status=held``).
        default: used when ``path`` is absent or points elsewhere.

    Returns:
        ``path`` when it is a local path, else ``default``.
    """
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return default
    parts = urlsplit(path)
    if parts.scheme or parts.netloc or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return default
    return path


@dataclass
class Sessions:
    """The console's sessions, the start-up token, and the key CSRF tokens are made with.

    Args:
        token: the start-up token (printed once); a new one is drawn when not given.

    Attributes:
        token: the start-up token.
    """

    token: str = field(default_factory=new_token)
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    _live: OrderedDict[str, str | None] = field(default_factory=OrderedDict, repr=False)

    def __repr__(self) -> str:
        return f"Sessions(live={len(self._live)})"

    def sign_in(self, token: str | None) -> str | None:
        """Start a session if ``token`` is the start-up token.

        Args:
            token: what the person gave.

        Returns:
            The new session id (the cookie's value), or None for a wrong token.
        """
        if not same_token(token, self.token):
            return None
        session = new_token()
        self._live[session] = None
        while len(self._live) > MAX_SESSIONS:
            self._live.popitem(last=False)
        return session

    def is_live(self, session: str | None) -> bool:
        """Whether ``session`` is a session this process started."""
        return session is not None and session in self._live

    def csrf(self, session: str) -> str:
        """The CSRF token of a session (an HMAC of its id; the same for its whole life)."""
        return hmac.new(self._key, session.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: str | None, given: str | None) -> bool:
        """Whether a form's CSRF token belongs to this live session (constant time)."""
        if not self.is_live(session) or session is None:
            return False
        return same_token(given, self.csrf(session))

    def flash(self, session: str, message: str) -> None:
        """Keep one message for the session's next page (what the last action did)."""
        if session in self._live:
            self._live[session] = message

    def take_flash(self, session: str) -> str | None:
        """The message kept for this session, once."""
        message = self._live.get(session)
        if message is not None:
            self._live[session] = None
        return message
