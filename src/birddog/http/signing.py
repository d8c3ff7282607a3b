"""Standard Webhooks v1 signatures: what every BirdDog post carries.

A signature is ``v1,<base64 HMAC-SHA256 of "<msg id>.<unix seconds>.<body>">``, keyed with
the base64-decoded part of a ``whsec_<base64>`` secret, exactly as
https://www.standardwebhooks.com specifies, so any Standard Webhooks (or Svix) library
can verify a BirdDog post.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Sequence

from birddog.core.errors import InvalidSecret

SECRET_PREFIX = "whsec_"  # noqa: S105 -- a prefix, not a secret
"""Every signing secret starts with this."""

SECRET_BYTES = 32
"""A generated secret holds this many random bytes."""

VERSION = "v1"
"""The signature scheme: HMAC-SHA256."""

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"


def generate_secret() -> str:
    """A new random signing secret.

    Returns:
        ``whsec_`` followed by the base64 of 32 bytes from :mod:`secrets`.
    """
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def secret_key(secret: str) -> bytes:
    """The HMAC key inside a signing secret.

    Like the reference libraries, the ``whsec_`` prefix is optional and missing base64
    padding is tolerated.

    Args:
        secret: ``whsec_<base64>``.

    Returns:
        The decoded key bytes.

    Raises:
        InvalidSecret: the secret is not base64 or decodes to nothing. The message never
            repeats the secret.
    """
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidSecret("signing secret must be whsec_ followed by base64") from None
    if not key:
        raise InvalidSecret("signing secret must not be empty")
    return key


def sign(secret: str, *, msg_id: str, timestamp: int, body: bytes) -> str:
    """Sign one message.

    Args:
        secret: the signing secret, ``whsec_<base64>``.
        msg_id: the ``webhook-id`` (for replies, the reply key).
        timestamp: the ``webhook-timestamp``, in Unix seconds.
        body: the exact bytes sent as the request body.

    Returns:
        ``v1,<base64 signature>``.

    Raises:
        InvalidSecret: the secret cannot be decoded.
    """
    digest = _digest(secret_key(secret), msg_id, timestamp, body)
    return f"{VERSION},{base64.b64encode(digest).decode()}"


def headers(
    secret: str | Sequence[str], *, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers for one message.

    Args:
        secret: the signing secret, ``whsec_<base64>``; several during a rotation's
            overlap, each adding one ``v1,`` signature (space-separated, as Standard
            Webhooks allows), so a recipient holding either secret accepts the post.
        msg_id: the ``webhook-id``; stable across retries of the same message.
        timestamp: the send time, in Unix seconds.
        body: the exact bytes sent as the request body.

    Returns:
        ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``.

    Raises:
        InvalidSecret: the secret cannot be decoded.
    """
    secrets_ = [secret] if isinstance(secret, str) else secret
    signatures = " ".join(
        sign(item, msg_id=msg_id, timestamp=timestamp, body=body) for item in secrets_
    )
    return {ID_HEADER: msg_id, TIMESTAMP_HEADER: str(timestamp), SIGNATURE_HEADER: signatures}


class Signer:
    """Signs messages with one or more secrets whose keys are decoded once, up front.

    The transport keeps one per route (per set of secrets), so a post costs the HMAC and
    nothing else: no base64 decoding of the secret per post.

    Args:
        secrets: the signing secrets, ``whsec_<base64>``; several during a rotation's
            overlap (each adds one ``v1,`` signature).

    Raises:
        InvalidSecret: a secret cannot be decoded. The message never repeats it.
    """

    __slots__ = ("_keys",)

    def __init__(self, secrets: Sequence[str]) -> None:
        self._keys = [hmac.new(secret_key(item), digestmod=hashlib.sha256) for item in secrets]

    def __repr__(self) -> str:
        return f"Signer(keys={len(self._keys)})"

    def headers(self, *, msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The three Standard Webhooks headers for one message (see :func:`headers`)."""
        signed = f"{msg_id}.{timestamp}.".encode() + body
        signatures = []
        for prepared in self._keys:
            mac = prepared.copy()
            mac.update(signed)
            signatures.append(f"{VERSION},{base64.b64encode(mac.digest()).decode()}")
        return {
            ID_HEADER: msg_id,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: " ".join(signatures),
        }


def verify(keys: list[bytes], *, msg_id: str, timestamp: int, body: bytes, signatures: str) -> bool:
    """Whether any ``v1`` signature in a ``webhook-signature`` header matches any key.

    Every comparison is constant-time; signatures of other versions, and texts other than
    a digest's canonical base64, are ignored.

    Args:
        keys: the accepted HMAC keys (more than one while a secret is being rotated).
        msg_id: the ``webhook-id`` header.
        timestamp: the ``webhook-timestamp`` header, parsed.
        body: the request body bytes.
        signatures: the ``webhook-signature`` header: space-separated ``v1,<base64>``.

    Returns:
        True when at least one signature matches.
    """
    offered = []
    for item in signatures.split():
        version, _, encoded = item.partition(",")
        if version != VERSION:
            continue
        try:
            decoded = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        # Only the canonical text of a digest: base64 leaves spare bits in its last
        # character, so other texts decode to the same bytes (the reference
        # implementations compare the texts, which refuses them).
        if base64.b64encode(decoded) == encoded.encode():
            offered.append(decoded)
    matched = False
    for key in keys:
        expected = _digest(key, msg_id, timestamp, body)
        for candidate in offered:
            # No early exit: the time taken does not depend on which signature matched.
            matched |= hmac.compare_digest(expected, candidate)
    return matched


def _digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> bytes:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).digest()
