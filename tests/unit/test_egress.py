"""The egress policy: refused addresses in every spelling, modes, CIDR lists, URL checks."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from birddog.core.egress import (
    EgressPolicy,
    check_route_url,
    host_refusal,
    redact_url,
    redact_urls_in,
)
from birddog.core.errors import InvalidInput
from birddog.settings import Settings

INTERNAL = EgressPolicy()
PUBLIC = EgressPolicy.parse("public")


def spellings(address: ipaddress.IPv4Address) -> list[str]:
    """Ways libc, URLs and resolvers let one write an IPv4 address."""
    number = int(address)
    octets = address.packed
    return [
        str(address),
        str(number),
        hex(number),
        ".".join(f"0{b:o}" for b in octets),
        ".".join(hex(b) for b in octets),
        f"{octets[0]}.{number & 0xFFFFFF}",
        f"{octets[0]}.{octets[1]}.{number & 0xFFFF}",
        f"::ffff:{address}",
        f"::ffff:{number >> 16:x}:{number & 0xFFFF:x}",
        f"64:ff9b::{address}",
        f"2002:{number >> 16:x}:{number & 0xFFFF:x}::1",
    ]


@pytest.mark.parametrize(
    "host",
    [
        *spellings(ipaddress.IPv4Address("169.254.169.254")),
        "fe80::1",
        "fe80::1%eth0",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
        "metadata.google.internal",
        "METADATA.GOOGLE.INTERNAL.",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "255.255.255.255",
    ],
)
def test_metadata_link_local_and_non_unicast_are_refused_in_every_mode(host: str) -> None:
    """Metadata, link-local and non-unicast destinations are refused whatever the mode."""
    assert host_refusal(host, INTERNAL) is not None
    assert host_refusal(host, PUBLIC) is not None


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "::1", "10.1.2.3", "192.168.0.10", "fd12::1", "localhost", "a.localhost"]
)
def test_loopback_and_private_are_allowed_by_default_and_refused_in_public_mode(host: str) -> None:
    """Agent meshes are usually internal: allowed by default, refused with public egress."""
    assert host_refusal(host, INTERNAL) is None
    assert host_refusal(host, PUBLIC) is not None


@pytest.mark.parametrize("host", ["0x7f000001", "2130706433", "127.1", "0177.0.0.1", "127.0.0.01"])
def test_odd_spellings_of_an_allowed_address_are_refused(host: str) -> None:
    """An address spelled other than dotted decimal is refused even where it would be allowed."""
    reason = host_refusal(host, INTERNAL)
    assert reason is not None
    assert "127.0.0.1" in reason


def test_names_are_left_to_the_connect_time_check() -> None:
    """Ordinary names pass the route check; their addresses are checked when connecting."""
    assert host_refusal("inbox.example.com", PUBLIC) is None
    assert host_refusal("cafe", PUBLIC) is None


def test_the_most_specific_list_entry_wins() -> None:
    """Allow and deny entries override the defaults; the longest prefix decides, deny on a tie."""
    policy = EgressPolicy.parse("public", allow="10.1.2.3/32,169.254.169.254", deny="10.0.0.0/8")
    assert policy.refusal(ipaddress.ip_address("10.1.2.3")) is None
    assert "BIRDDOG_EGRESS_DENY" in (policy.refusal(ipaddress.ip_address("10.1.2.4")) or "")
    assert policy.refusal(ipaddress.ip_address("169.254.169.254")) is None
    assert policy.refusal(ipaddress.ip_address("169.254.169.253")) is not None
    tie = EgressPolicy.parse("internal", allow="10.0.0.0/8", deny="10.0.0.0/8")
    assert tie.refusal(ipaddress.ip_address("10.0.0.1")) is not None


def test_a_deny_entry_covers_the_ipv4_mapped_spelling() -> None:
    """An IPv4 deny entry refuses the same address written as IPv4-mapped IPv6."""
    policy = EgressPolicy.parse("internal", deny="10.0.0.0/8")
    assert policy.refusal(ipaddress.ip_address("::ffff:10.0.0.9")) is not None


@pytest.mark.parametrize(
    ("mode", "allow", "deny", "field"),
    [
        ("open", "", "", "BIRDDOG_EGRESS"),
        ("internal", "10.0.0.0/8,not-a-cidr", "", "BIRDDOG_EGRESS_ALLOW"),
        ("internal", "", "10.0.0.0/33", "BIRDDOG_EGRESS_DENY"),
    ],
)
def test_bad_policy_text_names_the_setting(mode: str, allow: str, deny: str, field: str) -> None:
    """A mode or CIDR that does not parse is refused naming its setting."""
    with pytest.raises(InvalidInput) as caught:
        EgressPolicy.parse(mode, allow, deny)
    assert caught.value.field == field


def test_settings_refuse_a_bad_cidr_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad BIRDDOG_EGRESS_DENY fails the settings; the message names the setting, not the value."""
    monkeypatch.setenv("BIRDDOG_EGRESS_DENY", "10.0.0.0/8,secretish-entry")
    with pytest.raises(ValidationError) as caught:
        Settings()
    message = caught.value.errors()[0]["msg"]
    assert "BIRDDOG_EGRESS_DENY" in message
    assert "secretish-entry" not in message


def test_settings_build_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """BIRDDOG_EGRESS, _ALLOW and _DENY become the policy the routes and transport use."""
    monkeypatch.setenv("BIRDDOG_EGRESS", "public")
    monkeypatch.setenv("BIRDDOG_EGRESS_ALLOW", "10.9.0.0/16")
    policy = Settings().egress_policy()
    assert policy.mode == "public"
    assert policy.allow == (ipaddress.ip_network("10.9.0.0/16"),)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("https://user:pw@inbox.example/hook", "credentials"),
        ("https://token@inbox.example/hook", "credentials"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://0xa9fea9fe/", "metadata"),
        ("http://0x7f000001:9464/", "dotted decimal"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("ftp://inbox.example/", "http or https"),
        ("http://inbox.example:99999/", "not a valid URL"),
        ("http://inbox.example/a b", "whitespace"),
        ("http://inbox.example/\x1b[2J", "control"),
        ("", "1 to 2048"),
    ],
)
def test_route_urls_are_checked(url: str, words: str) -> None:
    """Credentials, refused hosts, other schemes and malformed URLs are refused naming url."""
    with pytest.raises(InvalidInput, match=words) as caught:
        check_route_url(url, INTERNAL)
    assert caught.value.field == "url"


def test_a_loopback_route_depends_on_the_mode() -> None:
    """http://[::1]:5432/ is a valid internal route and refused with public egress."""
    assert check_route_url("http://[::1]:5432/", INTERNAL) == "http://[::1]:5432/"
    with pytest.raises(InvalidInput, match="not a public address"):
        check_route_url("http://[::1]:5432/", PUBLIC)


def test_redaction_keeps_where_and_drops_what_authenticates() -> None:
    """A shown URL keeps scheme, host, port and path; user info, query and fragment go."""
    assert (
        redact_url("https://u:pw@h.example:8443/hook?sig=x&code=1#t")
        == "https://[redacted]@h.example:8443/hook?[redacted]#[redacted]"
    )
    assert redact_url("https://h.example/hook") == "https://h.example/hook"
    assert (
        redact_urls_in("GET http://h/x?token=abc, then https://y/ok.")
        == "GET http://h/x?[redacted], then https://y/ok."
    )


_QUERY_VALUE = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=6, max_size=30)


@given(
    st.from_regex(
        r"https?://[a-z]{1,8}(\.[a-z]{2,5})?(:[0-9]{2,5})?(/[a-z0-9]{0,6}){0,3}", fullmatch=True
    ),
    _QUERY_VALUE,
    _QUERY_VALUE,
)
def test_no_query_value_or_password_survives_redaction(
    base: str, value: str, password: str
) -> None:
    """Whatever the URL, its query values and password never appear once redacted."""
    scheme, rest = base.split("://", 1)
    url = f"{scheme}://user:{password}@{rest}?a={value}"
    shown = redact_url(url)
    assert value not in shown.replace(rest, "")
    assert password not in shown.replace(rest, "")
    assert redact_urls_in(f"error: {url} failed").endswith(" failed")


@given(st.ip_addresses(v=4))
def test_every_ipv4_spelling_gets_the_same_verdict(address: ipaddress.IPv4Address) -> None:
    """However an IPv4 address is spelled, a refused address stays refused."""
    for policy in (INTERNAL, PUBLIC):
        if policy.refusal(address) is not None:
            for spelling in spellings(address):
                assert host_refusal(spelling, policy) is not None, spelling


@given(st.ip_addresses(network="169.254.0.0/16") | st.ip_addresses(network="fe80::/10"))
def test_link_local_is_refused_even_in_internal_mode(address: ipaddress._BaseAddress) -> None:
    """Every link-local address is refused by the default policy."""
    assert INTERNAL.refusal(address) is not None  # type: ignore[arg-type]


def test_the_proxy_setting_must_be_an_http_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """BIRDDOG_HTTP_PROXY takes an http(s) URL with a host; anything else names the setting."""
    monkeypatch.setenv("BIRDDOG_HTTP_PROXY", "socks5://proxy.internal:1080")
    with pytest.raises(ValidationError, match="BIRDDOG_HTTP_PROXY"):
        Settings()
    monkeypatch.setenv("BIRDDOG_HTTP_PROXY", "http://proxy.internal:3128")
    assert Settings().http_proxy == "http://proxy.internal:3128"
