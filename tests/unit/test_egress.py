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
        *embeddings(address),
    ]


def embeddings(address: ipaddress.IPv4Address) -> list[str]:
    """IPv6 addresses that carry an IPv4 one: NAT64 (every RFC 6052 layout), SIIT, Teredo..."""
    n = int(address)
    hi, lo = n >> 16, n & 0xFFFF
    teredo = (0x2001 << 112) | (0x41_36_E3_78 << 64) | (0x8000 << 48) | (0x63BF << 32)
    return [
        f"64:ff9b::{hi:x}:{lo:x}",  # the well-known prefix, hex
        f"64:ff9b:1::{hi:x}:{lo:x}",  # RFC 8215 local use, a /96 prefix
        f"64:ff9b:1:ab:cd::{hi:x}:{lo:x}",  # another /96 cut of the same /48
        str(ipaddress.IPv6Address((0x64FF9B0001 << 80) | (n >> 16) << 64 | (n & 0xFFFF) << 40)),
        str(ipaddress.IPv6Address((0x64FF9B0001 << 80) | (n >> 24) << 64 | (n & 0xFFFFFF) << 32)),
        str(ipaddress.IPv6Address((0x64FF9B0001 << 80) | n << 24)),  # a /64 prefix
        f"::ffff:0:{hi:x}:{lo:x}",  # SIIT, IPv4-translated
        f"::ffff:0:{address}",
        # IPv4-compatible; :: and ::1 are IPv6's own unspecified and loopback addresses,
        # not spellings of 0.0.0.0 and 0.0.0.1
        *([f"::{address}"] if n > 1 else []),
        str(ipaddress.IPv6Address(teredo | (~n & 0xFFFFFFFF))),  # Teredo: the client, inverted
        f"2001:db8::5efe:{hi:x}:{lo:x}",  # ISATAP
        f"2001:db8::200:5efe:{address}",
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


@pytest.mark.parametrize("host", embeddings(ipaddress.IPv4Address("169.254.169.254")))
def test_every_ipv6_spelling_of_the_metadata_address_is_refused_naming_it(host: str) -> None:
    """NAT64 (both prefixes, every layout), SIIT, 6to4, Teredo, ISATAP: unwrapped, then refused."""
    for policy in (INTERNAL, PUBLIC):
        reason = host_refusal(host, policy)
        assert reason is not None, host
        assert "carries 169.254.169.254 is a link-local or cloud metadata address" in reason
    with pytest.raises(InvalidInput, match="egress policy"):
        check_route_url(f"http://[{host}]/latest/meta-data/", INTERNAL)


@pytest.mark.parametrize("host", embeddings(ipaddress.IPv4Address("8.8.8.8"))[:6])
def test_a_nat64_address_of_a_public_host_is_allowed_in_every_layout(host: str) -> None:
    """Unwrapping refuses nothing it should not: 8.8.8.8 through NAT64 passes public egress."""
    assert host_refusal(host, PUBLIC) is None, host


def test_an_allow_entry_for_a_nat64_prefix_does_not_open_the_metadata_address() -> None:
    """The IPv4 address inside is judged first: allowing 64:ff9b::/96 opens no metadata."""
    policy = EgressPolicy.parse("public", allow="64:ff9b::/96,64:ff9b:1::/48")
    assert policy.refusal(ipaddress.ip_address("64:ff9b::808:808")) is None
    for host in ("64:ff9b::a9fe:a9fe", "64:ff9b:1::a9fe:a9fe"):
        assert "metadata" in (policy.refusal(ipaddress.ip_address(host)) or "")
    deny = EgressPolicy.parse("internal", deny="10.0.0.0/8")
    assert deny.refusal(ipaddress.ip_address("64:ff9b:1::a00:1")) is not None


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("http://169\u3002254\u3002169\u3002254/", "169.254.169.254"),
        ("http://169\uff0e254\uff0e169\uff0e254/", "169.254.169.254"),
        ("http://\uff11\uff16\uff19.254.169.254/", "169.254.169.254"),
        ("http://inbox\u3002example\u3002com/hook", "inbox.example.com"),
        ("http://inbox.example.com./hook", "inbox.example.com"),
        ("http://\uff49\uff4e\uff42\uff4f\uff58.example.com/hook", "inbox.example.com"),
        ("http://\u2460\u2461\u2462.example/hook", "123.example"),
    ],
)
def test_a_host_that_idna_normalisation_changes_is_refused_naming_what_it_becomes(
    url: str, named: str
) -> None:
    """Ideographic or fullwidth dots and digits, trailing dots: refused, the normal form named."""
    with pytest.raises(InvalidInput) as caught:
        check_route_url(url, INTERNAL)
    assert caught.value.field == "url"
    assert named in str(caught.value)


def test_a_host_normalisation_leaves_alone_is_accepted() -> None:
    """An IDN already in normal form (or punycode) is a route like any other."""
    for url in ("http://b\u00fccher.example/hook", "http://xn--bcher-kva.example/hook"):
        assert check_route_url(url, PUBLIC) == url
