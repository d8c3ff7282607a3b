"""Secrets at rest: AES-GCM sealing with key ids, context binding, rotation of keys."""

from __future__ import annotations

import base64
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from birddog.core.errors import InvalidSetting, SecretUnreadable
from birddog.http import signing
from birddog.sealing import SEALED_PREFIX, SecretBox, generate_key, route_context

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OLD, NEW = generate_key(), generate_key()


def box(key: str | None, previous: str = "") -> SecretBox:
    return SecretBox.from_settings(key, previous)


def test_a_sealed_secret_opens_and_shows_nothing_of_itself() -> None:
    """A sealed secret names its format and key id, hides the secret and opens back."""
    sealer = box(NEW)
    sealed = sealer.seal(SECRET, context=route_context("alice"))
    assert sealed.startswith(f"{SEALED_PREFIX}{sealer.key_id}:")
    assert SECRET.removeprefix("whsec_") not in sealed
    assert sealer.open(sealed, context=route_context("alice")) == SECRET
    assert sealer.seal(SECRET, context="x") != sealer.seal(SECRET, context="x")  # fresh nonce


def test_a_sealed_secret_does_not_open_in_another_place() -> None:
    """A sealed value copied to another route's row does not open there."""
    sealer = box(NEW)
    sealed = sealer.seal(SECRET, context=route_context("alice"))
    with pytest.raises(SecretUnreadable, match="copied from another place"):
        sealer.open(sealed, context=route_context("mallory"))


def test_a_damaged_sealed_secret_is_refused() -> None:
    """A flipped byte in a sealed value fails the authentication tag."""
    sealer = box(NEW)
    sealed = sealer.seal(SECRET, context="c")
    head, _, body = sealed.rpartition(":")
    raw = bytearray(base64.urlsafe_b64decode(body))
    raw[-1] ^= 1
    with pytest.raises(SecretUnreadable):
        sealer.open(f"{head}:{base64.urlsafe_b64encode(bytes(raw)).decode()}", context="c")


def test_without_the_key_the_error_names_the_key_id_only() -> None:
    """Opening without the right key says which key id is needed, and nothing secret."""
    sealed = box(OLD).seal(SECRET, context="c")
    old_key_id = box(OLD).key_id
    assert old_key_id is not None
    for reader in (box(None), box(NEW)):
        with pytest.raises(SecretUnreadable) as caught:
            reader.open(sealed, context="c")
        assert old_key_id in str(caught.value)
        assert OLD not in str(caught.value)


def test_previous_keys_open_what_they_sealed() -> None:
    """During a key rotation the previous key still opens; new seals use the new key."""
    rotating = box(NEW, previous=f"{generate_key()},{OLD}")
    assert rotating.open(box(OLD).seal(SECRET, context="c"), context="c") == SECRET
    assert rotating.is_current(rotating.seal(SECRET, context="c"))
    assert not rotating.is_current(box(OLD).seal(SECRET, context="c"))
    assert not rotating.is_current(SECRET)


def test_without_a_key_secrets_stay_plain_and_plain_always_opens() -> None:
    """No key: secrets are stored as given; a plain stored secret opens under any box."""
    plain = box(None)
    assert plain.key_id is None
    assert plain.seal(SECRET, context="c") == SECRET
    assert plain.is_current(SECRET)
    assert box(NEW).open(SECRET, context="c") == SECRET


@pytest.mark.parametrize(
    ("key", "previous", "setting"),
    [
        ("not base64 at all!", "", "BIRDDOG_SECRET_KEY"),
        (base64.b64encode(b"short").decode(), "", "BIRDDOG_SECRET_KEY"),
        (NEW, "c2hvcnQ=", "BIRDDOG_SECRET_KEY_PREVIOUS"),
    ],
    # Named, not shown: NEW is drawn afresh in each process (and xdist workers must agree).
    ids=["not-base64", "too-short", "previous-too-short"],
)
def test_a_bad_key_names_the_setting_not_the_value(key: str, previous: str, setting: str) -> None:
    """A key that is not 32 bytes of base64 is refused naming its setting, never echoing it."""
    with pytest.raises(InvalidSetting) as caught:
        box(key, previous)
    assert caught.value.field == setting
    assert key not in str(caught.value)


def test_keys_read_in_either_base64_alphabet() -> None:
    """A key written in the URL-safe alphabet is the same key."""
    raw = base64.b64decode(NEW)
    urlsafe = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    assert box(urlsafe).key_id == box(NEW).key_id


@given(st.text(min_size=1), st.text(max_size=40))
def test_any_secret_round_trips_and_never_shows(secret: str, context: str) -> None:
    """Whatever the secret and its place, it opens back and the sealed form does not hold it."""
    sealer = box(NEW)
    sealed = sealer.seal(secret, context=context)
    assert sealer.open(sealed, context=context) == secret
    if len(secret) >= 4:
        assert secret not in sealed.removeprefix(SEALED_PREFIX)


def test_two_secrets_sign_twice_and_either_verifies() -> None:
    """During an overlap a post carries two v1 signatures; either secret verifies it."""
    new = signing.generate_secret()
    now = int(time.time())
    headers = signing.headers([new, SECRET], msg_id="msg-1", timestamp=now, body=b"{}")
    assert [s.split(",")[0] for s in headers["webhook-signature"].split(" ")] == ["v1", "v1"]
    for secret in (new, SECRET):
        # The reference Standard Webhooks library, holding only one of the two secrets.
        Webhook(secret).verify(b"{}", headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(signing.generate_secret()).verify(b"{}", headers)
