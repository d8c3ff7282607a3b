"""Standard Webhooks v1 signing, checked against the reference ``standardwebhooks`` package."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from birddog.core.errors import InvalidInput, InvalidSecret
from birddog.http import signing

BODY = b'{"key":"outbox:mail-1:reply:0","content":"hello \xc3\xa9"}'


def test_headers_verify_with_the_reference_library() -> None:
    """Headers from ``signing.headers`` pass ``standardwebhooks.Webhook.verify``."""
    secret = signing.generate_secret()
    headers = signing.headers(
        secret, msg_id="outbox:mail-1:reply:0", timestamp=int(time.time()), body=BODY
    )
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert Webhook(secret).verify(BODY, headers) == {
        "key": "outbox:mail-1:reply:0",
        "content": "hello é",
    }


def test_reference_library_rejects_a_tampered_body() -> None:
    """The reference verifier refuses our signature over a body changed by one byte."""
    secret = signing.generate_secret()
    headers = signing.headers(secret, msg_id="m", timestamp=int(time.time()), body=BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace(b"hello", b"hellO"), headers)


def test_signature_matches_the_published_example() -> None:
    """The example of the Standard Webhooks / Svix documentation signs to its published value."""
    signature = signing.sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        msg_id="msg_p5jXN8AQM9LWM0D4loKWxJek",
        timestamp=1614265330,
        body=b'{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_generated_secrets_are_32_random_bytes_with_the_prefix() -> None:
    """``generate_secret`` gives ``whsec_`` plus base64 of 32 bytes, different every time."""
    first, second = signing.generate_secret(), signing.generate_secret()
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"))) == 32
    assert first != second
    Webhook(first)  # the reference library accepts it


@pytest.mark.parametrize(
    "secret",
    [
        pytest.param("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", id="prefixed"),
        pytest.param("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", id="bare"),
        pytest.param("whsec_dGVzdA", id="unpadded"),
    ],
)
def test_secret_forms_accepted_like_the_reference(secret: str) -> None:
    """A secret with or without the prefix, padded or not, signs as the reference does."""
    ours = signing.sign(secret, msg_id="m", timestamp=1614265330, body=BODY)
    theirs = Webhook(secret).sign("m", datetime.fromtimestamp(1614265330, UTC), BODY.decode())
    assert ours == theirs


@pytest.mark.parametrize(
    "secret",
    [
        pytest.param("whsec_", id="empty"),
        pytest.param("whsec_SeCrEtVaLuE not base64!", id="not-base64"),
        pytest.param("whsec_SeCrEtVaLuExy", id="truncated"),
    ],
)
def test_bad_secrets_are_refused_without_echoing_them(secret: str) -> None:
    """A secret that is not base64 raises InvalidSecret, an InvalidInput, never quoting it."""
    with pytest.raises(InvalidSecret) as caught:
        signing.sign(secret, msg_id="m", timestamp=1, body=b"")
    assert isinstance(caught.value, InvalidInput)
    assert "SeCrEtVaLuE" not in str(caught.value)


def test_verify_accepts_any_v1_signature_of_the_list() -> None:
    """``verify`` finds a matching v1 signature among others, ignoring other versions."""
    secret = signing.generate_secret()
    good = signing.sign(secret, msg_id="m", timestamp=10, body=BODY)
    other = signing.sign(signing.generate_secret(), msg_id="m", timestamp=10, body=BODY)
    header = f"v1a,abc {other} v1,@@@ {good}"
    key = signing.secret_key(secret)
    assert signing.verify([key], msg_id="m", timestamp=10, body=BODY, signatures=header)
    assert not signing.verify([key], msg_id="m", timestamp=10, body=BODY, signatures=other)
    assert not signing.verify([key], msg_id="m", timestamp=11, body=BODY, signatures=good)
    assert not signing.verify([key], msg_id="n", timestamp=10, body=BODY, signatures=good)


def test_a_prepared_signer_signs_as_the_reference_library_verifies() -> None:
    """A Signer (keys decoded once) gives headers the reference verifier accepts, per secret."""
    old, new = signing.generate_secret(), signing.generate_secret()
    signer = signing.Signer([new, old])
    now = int(time.time())
    headers = signer.headers(msg_id="outbox:mail-1:reply:0", timestamp=now, body=BODY)
    assert headers == signing.headers(
        [new, old], msg_id="outbox:mail-1:reply:0", timestamp=now, body=BODY
    )
    for secret in (old, new):
        assert Webhook(secret).verify(BODY, headers)["key"] == "outbox:mail-1:reply:0"
    again = signer.headers(msg_id="m", timestamp=now, body=b"{}")
    assert Webhook(new).verify(b"{}", again) == {}


def test_a_signer_refuses_an_undecodable_secret_without_echoing_it() -> None:
    """A Signer over a secret that is not base64 raises InvalidSecret naming no secret."""
    with pytest.raises(InvalidSecret) as caught:
        signing.Signer(["whsec_not*base64"])
    assert "not*base64" not in str(caught.value)
