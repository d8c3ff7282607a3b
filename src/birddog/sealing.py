"""Secrets at rest: route and alert signing secrets sealed with AES-GCM.

With ``BIRDDOG_SECRET_KEY`` set (the base64 of 32 random bytes; ``birddog secrets
keygen`` makes one), every signing secret BirdDog writes to the database is sealed::

    bdenc:v1:<key id>:<base64url(12-byte nonce, ciphertext, 16-byte tag)>

``v1`` is the format (AES-256-GCM); the key id is the first 8 hex digits of a SHA-256
of the key, so a stored secret names the key that opens it and keys can be rotated:
put the old key in ``BIRDDOG_SECRET_KEY_PREVIOUS``, the new one in
``BIRDDOG_SECRET_KEY``, run ``birddog secrets rekey``, then drop the old key. The
associated data binds each sealed secret to its place (the route's agent id), so a
sealed value copied to another route does not open.

Without a key, secrets are stored as given (plain ``whsec_...``) and a sealed value
cannot be read: the error says which key id it needs. A plain value is always read,
so turning encryption on is ``BIRDDOG_SECRET_KEY=... birddog secrets rekey``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from collections.abc import Iterable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from birddog.core.errors import InvalidSetting, SecretUnreadable

SEALED_PREFIX = "bdenc:v1:"
"""Every sealed secret starts with this."""

KEY_BYTES = 32
"""AES-256."""

_NONCE_BYTES = 12


def generate_key() -> str:
    """A new ``BIRDDOG_SECRET_KEY``: the base64 of 32 random bytes."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def route_context(agent_id: str) -> str:
    """The associated data that binds a sealed route secret to its route."""
    return f"birddog route {agent_id}"


ALERT_CONTEXT = "birddog alert"
"""The associated data of a sealed ``BIRDDOG_ALERT_SECRET``."""


class SecretBox:
    """Seals and opens stored secrets with the configured keys.

    Args:
        key: the current key (sealing and opening), or None to store secrets as given.
        previous: older keys, used only to open what they sealed.
    """

    def __init__(self, key: bytes | None = None, previous: Iterable[bytes] = ()) -> None:
        self._current = None if key is None else (_key_id(key), AESGCM(key))
        self._keys = {_key_id(k): AESGCM(k) for k in previous}
        if self._current is not None:
            self._keys[self._current[0]] = self._current[1]

    @classmethod
    def from_settings(cls, key: str | None, previous: str | None = None) -> SecretBox:
        """Build a box from ``BIRDDOG_SECRET_KEY`` and ``BIRDDOG_SECRET_KEY_PREVIOUS``.

        Args:
            key: the base64 key, or None/empty for none.
            previous: comma-separated base64 keys, or None/empty.

        Returns:
            The box.

        Raises:
            InvalidSetting: a key that is not the base64 of 32 bytes, naming the setting
                (never repeating the value).
        """
        current = _decode_key(key, "BIRDDOG_SECRET_KEY") if key else None
        older = [
            _decode_key(item.strip(), "BIRDDOG_SECRET_KEY_PREVIOUS")
            for item in (previous or "").split(",")
            if item.strip()
        ]
        return cls(current, older)

    @property
    def key_id(self) -> str | None:
        """The id of the current key, or None when secrets are stored as given."""
        return None if self._current is None else self._current[0]

    def seal(self, secret: str, *, context: str) -> str:
        """The form to store: sealed under the current key, or as given without one.

        Args:
            secret: the plain secret.
            context: where it is stored (:func:`route_context`, :data:`ALERT_CONTEXT`).

        Returns:
            ``bdenc:v1:...``, or the secret itself when no key is set.
        """
        if self._current is None:
            return secret
        key_id, aead = self._current
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sealed = aead.encrypt(nonce, secret.encode(), context.encode())
        return f"{SEALED_PREFIX}{key_id}:{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, stored: str, *, context: str) -> str:
        """The plain secret from its stored form.

        Args:
            stored: a sealed value, or a plain secret (returned as is).
            context: where it was stored; it must match the context it was sealed with.

        Returns:
            The plain secret.

        Raises:
            SecretUnreadable: no configured key has the sealed value's key id, or the
                value does not open with it (damaged, or moved from another place).
        """
        if not stored.startswith(SEALED_PREFIX):
            return stored
        key_id, _, encoded = stored.removeprefix(SEALED_PREFIX).partition(":")
        aead = self._keys.get(key_id)
        if aead is None:
            raise SecretUnreadable(
                f"a stored secret is sealed with key {key_id}, and neither "
                "BIRDDOG_SECRET_KEY nor BIRDDOG_SECRET_KEY_PREVIOUS holds that key"
            )
        try:
            raw = base64.urlsafe_b64decode(encoded.encode())
            opened = aead.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], context.encode())
            return opened.decode()
        except (InvalidTag, ValueError, binascii.Error, UnicodeDecodeError):
            raise SecretUnreadable(
                f"a stored secret sealed with key {key_id} does not open: it was damaged or "
                "copied from another place"
            ) from None

    def is_current(self, stored: str) -> bool:
        """Whether a stored value is already in the form :meth:`seal` would write now."""
        if self._current is None:
            return not stored.startswith(SEALED_PREFIX)
        return stored.startswith(f"{SEALED_PREFIX}{self._current[0]}:")


def _key_id(key: bytes) -> str:
    return hashlib.sha256(b"birddog secret key id\x00" + key).hexdigest()[:8]


def _decode_key(text: str, setting: str) -> bytes:
    standard = text.replace("-", "+").replace("_", "/")  # either base64 alphabet
    try:
        key = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise InvalidSetting(
            f"{setting} must be the base64 of 32 random bytes (birddog secrets keygen makes one)",
            field=setting,
        )
    return key
