"""Egress policy: which addresses BirdDog may post to, and how a destination is shown.

Whoever may write a route chooses where the daemon connects, from inside the operator's
network. The policy keeps that from reaching what it must not:

- link-local and cloud metadata addresses (``169.254.0.0/16``, ``fe80::/10``,
  ``fd00:ec2::254``, ``100.100.100.200``, ``168.63.129.16``) are always refused, as are
  addresses that are not unicast destinations (``0.0.0.0``, ``::``, multicast,
  broadcast), however they are spelled (hex, octal or decimal IPv4, or an IPv6 address
  that carries an IPv4 one: IPv4-mapped ``::ffff:0:0/96``, SIIT ``::ffff:0:0:0/96``,
  NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48`` in every RFC 6052 layout, 6to4
  ``2002::/16``, Teredo ``2001::/32`` (the client's inverted address), ISATAP and
  IPv4-compatible ``::/96``). Such an address is unwrapped to the IPv4 address it carries
  and the policy judges that one first, then the IPv6 address itself;
- loopback and private addresses are allowed in ``internal`` mode (the default: agent
  meshes are usually internal) and refused in ``public`` mode;
- CIDR allow and deny lists come first: the most specific entry that holds the address
  decides (deny on a tie), so an allow entry can open one metadata-range address and a
  deny entry can close a whole private range.

The policy is applied to a route's URL when the route is added or updated (its host, if
it is an address or a well-known name) and again to every address a name resolves to
when the daemon connects (``birddog.http.egress``), so a name cannot rebind past it. A
host that IDNA normalisation would change before the lookup (``169。254。169。254`` with
ideographic full stops, fullwidth digits, a trailing dot) is refused when the route is
written, naming the host it would become.

Pure: the standard library only.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import SplitResult, urlsplit, urlunsplit

from birddog.core.errors import InvalidInput
from birddog.core.text import first_control, printable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

EgressMode = Literal["internal", "public"]
"""``internal``: public, private and loopback addresses; ``public``: public ones only."""

URL_MAX_LENGTH = 2048
"""The longest inbox URL accepted."""

ALLOWED_SCHEMES = frozenset({"http", "https"})

REDACTED = "[redacted]"

ALWAYS_REFUSED: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in (
        "169.254.0.0/16",  # IPv4 link-local, home of 169.254.169.254 (AWS, GCP, Azure, ...)
        "fe80::/10",  # IPv6 link-local
        "fd00:ec2::254/128",  # AWS instance metadata over IPv6
        "100.100.100.200/32",  # Alibaba Cloud metadata
        "168.63.129.16/32",  # Azure platform (wire server)
    )
)
"""Link-local and cloud metadata networks: refused unless an allow entry names them."""

METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "metadata.azure"}
)
"""Host names that mean a metadata service; refused when a route names them."""

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
"""Host names that mean this machine (as do names under ``.localhost``)."""

_LOOPBACK = ipaddress.ip_address("127.0.0.1")
_BROADCAST = ipaddress.ip_address("255.255.255.255")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")  # 0.0.0.0 itself reaches this host on Linux
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: any prefix length >= 48
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")  # IPv4-translated (RFC 2765)
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_ISATAP_IDS = (0x00005EFE, 0x02005EFE)  # the interface id of an ISATAP address (RFC 5214)
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
"""Full stops UTS-46 reads as the label separator (ideographic, fullwidth, halfwidth)."""


PUSH_EGRESS_SETTING = "BIRDDOG_PUSH_EGRESS"
"""The setting that opens A2A push URLs to private and loopback addresses."""


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """Where BirdDog may connect to deliver replies.

    Attributes:
        mode: ``internal`` (default) or ``public`` (no loopback or private addresses).
        allow: networks always allowed, most specific entry first among the lists.
        deny: networks always refused.
        setting: the setting that names the mode, for the refusals' messages.
    """

    mode: EgressMode = "internal"
    allow: tuple[IPNetwork, ...] = ()
    deny: tuple[IPNetwork, ...] = ()
    setting: str = "BIRDDOG_EGRESS"

    @classmethod
    def parse(cls, mode: str = "internal", allow: str = "", deny: str = "") -> EgressPolicy:
        """Build a policy from the settings' text.

        Args:
            mode: ``internal`` or ``public`` (``BIRDDOG_EGRESS``).
            allow: comma-separated CIDRs or addresses (``BIRDDOG_EGRESS_ALLOW``).
            deny: comma-separated CIDRs or addresses (``BIRDDOG_EGRESS_DENY``).

        Returns:
            The policy.

        Raises:
            InvalidInput: a mode or list entry that does not parse, naming the setting.
        """
        if mode not in ("internal", "public"):
            raise InvalidInput("must be internal or public", field="BIRDDOG_EGRESS")
        return cls(
            mode="public" if mode == "public" else "internal",
            allow=_networks(allow, "BIRDDOG_EGRESS_ALLOW"),
            deny=_networks(deny, "BIRDDOG_EGRESS_DENY"),
        )

    def for_pushes(self) -> EgressPolicy:
        """The default policy of A2A push URLs: public only, this policy's lists."""
        return EgressPolicy(
            mode="public", allow=self.allow, deny=self.deny, setting=PUSH_EGRESS_SETTING
        )

    def refusal(self, address: IPAddress) -> str | None:
        """Why this address is refused, or None when BirdDog may connect to it.

        Args:
            address: a resolved or literal address.

        Returns:
            A short reason naming the address (never a URL), or None.
        """
        address = _unmapped(address)
        # What the address leads to is judged first: an allow entry for a NAT64 prefix
        # must not open the metadata address inside it.
        for inner in _embedded_ipv4(address):
            reason = self.refusal(inner)
            if reason is not None:
                return f"{address} carries {reason}"
        listed = self._listed(address)
        if listed is not None:
            return None if listed == "allow" else f"{address} is in BIRDDOG_EGRESS_DENY"
        if (
            address.is_unspecified
            or address.is_multicast
            or address == _BROADCAST
            or address in _THIS_NETWORK
        ):
            return f"{address} is not a unicast address"
        if any(address in network for network in ALWAYS_REFUSED):
            return f"{address} is a link-local or cloud metadata address"
        if self.mode == "public" and not address.is_global:
            return f"{address} is not a public address ({self.setting}=public)"
        return None

    def _listed(self, address: IPAddress) -> Literal["allow", "deny"] | None:
        allow = _longest_match(self.allow, address)
        deny = _longest_match(self.deny, address)
        if deny is not None and (allow is None or deny >= allow):
            return "deny"
        return "allow" if allow is not None else None


def host_refusal(host: str, policy: EgressPolicy) -> str | None:
    """Why a URL's host is refused before any lookup, or None.

    An address in any spelling (``0x7f000001``, ``0177.1``, ``2130706433``,
    ``[::ffff:169.254.169.254]``) is checked against the policy, and a spelling other than
    plain dotted decimal is refused in any case, since libraries disagree on what it
    means. ``localhost`` (and names under ``.localhost``) counts as ``127.0.0.1``;
    metadata service names are refused. Other names are checked after resolution, when
    the daemon connects.

    Args:
        host: the URL's host, without brackets.
        policy: the egress policy.

    Returns:
        A short reason, or None.
    """
    name = normalised_host(host)
    address = _literal_address(name)
    if address is not None:
        reason = policy.refusal(address)
        if reason is None and isinstance(address, ipaddress.IPv4Address) and name != str(address):
            reason = f"write the IPv4 address {address} as dotted decimal"
        return reason
    if name in METADATA_NAMES:
        return f"{name} is a cloud metadata host"
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return policy.refusal(_LOOPBACK)
    return None


def normalised_host(host: str) -> str:
    """A host as a resolver will be asked for it: NFKC, UTS-46 full stops, lower case.

    ``169。254。169。254`` (ideographic full stops) becomes ``169.254.169.254``, fullwidth
    digits become ASCII ones, ``Example.COM.`` becomes ``example.com``.

    Args:
        host: a URL's host, without brackets.

    Returns:
        The normalised host, without trailing dots.
    """
    return unicodedata.normalize("NFKC", host).translate(_DOTS).lower().rstrip(".")


def check_route_url(url: object, policy: EgressPolicy) -> str:
    """Check an inbox URL before it is stored in a route.

    Args:
        url: the URL as given.
        policy: the egress policy its host must pass.

    Returns:
        The URL unchanged.

    Raises:
        InvalidInput: (naming ``url``) not a string of at most 2048 characters, whitespace
            or control characters, not ``http``/``https`` with a host, a malformed port,
            credentials in the URL, or a host the egress policy refuses.
    """
    if not isinstance(url, str) or not url or len(url) > URL_MAX_LENGTH:
        raise InvalidInput(f"url must be a string of 1 to {URL_MAX_LENGTH} characters", field="url")
    if first_control(url) is not None or any(char.isspace() for char in url):
        raise InvalidInput("url must not contain whitespace or control characters", field="url")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # raises on a malformed port
    except ValueError:
        raise InvalidInput("url is not a valid URL", field="url") from None
    if parts.scheme not in ALLOWED_SCHEMES or not host:
        raise InvalidInput("url must be http or https with a host", field="url")
    if "@" in parts.netloc:
        raise InvalidInput(
            "url must not carry credentials (user:password@host); "
            "the route's secret authenticates each post",
            field="url",
        )
    reason = host_refusal(host, policy)
    if reason is not None:
        raise InvalidInput(f"url is refused by the egress policy: {reason}", field="url")
    normal = normalised_host(host)
    if normal != host.lower():
        # What is stored is what is shown and checked: one spelling, the one connected to.
        raise InvalidInput(
            f"url's host {printable(host)[:200]!r} is read as {printable(normal)[:200]!r} once "
            f"normalised (IDNA): write {printable(normal)[:200]!r}",
            field="url",
        )
    return url


def redact_url(url: str) -> str:
    """A URL safe to show: its user information, query and fragment are redacted.

    ``https://u:pw@h.example/hook?sig=x#t`` becomes
    ``https://[redacted]@h.example/hook?[redacted]#[redacted]``; a URL that does not
    parse is replaced whole.

    Args:
        url: the URL.

    Returns:
        The URL with scheme, host, port and path only, the rest redacted.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    return _redacted(parts)


def shown_url(url: str | None) -> str | None:
    """A route URL as a terminal, log or page may show it: redacted and printable.

    Args:
        url: the URL, or None (a mailbox route has none).

    Returns:
        :func:`redact_url` of it with control characters escaped, or None.
    """
    return None if url is None else printable(redact_url(url))


_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")


def redact_urls_in(text: str) -> str:
    """Redact every URL in a text (see :func:`redact_url`), such as a library's error.

    Args:
        text: the text.

    Returns:
        The text with each URL's user information, query and fragment redacted.
    """
    return _URL_IN_TEXT.sub(_redact_match, text)


def _redact_match(match: re.Match[str]) -> str:
    # Prose punctuation after a URL ("see http://h/x?a=b, then") is not part of it.
    found = match.group()
    url = found.rstrip(".,;:!?)]}")
    return redact_url(url) + found[len(url) :]


def _redacted(parts: SplitResult) -> str:
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = REDACTED if parts.query else ""
    fragment = REDACTED if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def _networks(text: str, setting: str) -> tuple[IPNetwork, ...]:
    networks = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise InvalidInput(
                "must be comma-separated CIDRs or addresses (e.g. 10.0.0.0/8,fd00::/8)",
                field=setting,
            ) from None
    return tuple(networks)


def _longest_match(networks: Iterable[IPNetwork], address: IPAddress) -> int | None:
    lengths = [
        net.prefixlen for net in networks if net.version == address.version and address in net
    ]
    return max(lengths, default=None)


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        address = address.ipv4_mapped or ipaddress.IPv6Address(int(address))  # drops a zone
    return address


def _embedded_ipv4(address: IPAddress) -> Iterator[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address leads to (see the module docstring for the kinds)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return
    number = int(address)
    low = ipaddress.IPv4Address(number & 0xFFFFFFFF)
    if address.sixtofour is not None:
        yield address.sixtofour
    if address.teredo is not None:
        yield address.teredo[1]  # the client, its bits inverted back
    if address in _NAT64 or address in _SIIT or (address in _IPV4_COMPATIBLE and number > 1):
        yield low
    if address in _NAT64_LOCAL:
        yield from _rfc6052(number)
    if (number >> 32) & 0xFFFFFFFF in _ISATAP_IDS:
        yield low


def _rfc6052(number: int) -> Iterator[ipaddress.IPv4Address]:
    """The IPv4 address in each RFC 6052 layout a NAT64 prefix of 48 bits or more allows.

    An operator may cut ``64:ff9b:1::/48`` into a prefix of 48, 56, 64 or 96 bits; each
    puts the IPv4 address elsewhere, around the zero "u" octet (bits 64-71) and before a
    zero suffix. Every layout the address fits is tried; an all-zero one is 0.0.0.0 only
    when no other layout finds an address.
    """
    candidates = []  # the layout with the longest zero suffix first: the likeliest
    if (number >> 56) & 0xFF == 0:
        if number & 0xFFFFFFFFFF == 0:  # /48: bits 48-63 and 72-87
            candidates.append(((number >> 64) & 0xFFFF) << 16 | (number >> 40) & 0xFFFF)
        if number & 0xFFFFFFFF == 0:  # /56: bits 56-63 and 72-95
            candidates.append(((number >> 64) & 0xFF) << 24 | (number >> 32) & 0xFFFFFF)
        if number & 0xFFFFFF == 0:  # /64: bits 72-103
            candidates.append((number >> 24) & 0xFFFFFFFF)
    candidates.append(number & 0xFFFFFFFF)  # /96: the last 32 bits
    found = [candidate for candidate in candidates if candidate] or [0]
    for candidate in found:
        yield ipaddress.IPv4Address(candidate)


def _literal_address(name: str) -> IPAddress | None:
    """The address a host spells, in any form libc's inet_aton or an IPv6 literal takes."""
    try:
        return ipaddress.ip_address(name.partition("%")[0])
    except ValueError:
        pass
    parts = name.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        value = _inet_aton_number(part)
        if value is None:
            return None
        values.append(value)
    # inet_aton: a.b.c.d; a.b.(16 bits); a.(24 bits); or one 32-bit number.
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(values))):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (24 - 8 * index)
    return ipaddress.IPv4Address(number)


_HEX = re.compile(r"0x[0-9a-f]*")
_OCTAL = re.compile(r"0[0-7]+")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


def _inet_aton_number(part: str) -> int | None:
    if _HEX.fullmatch(part):
        return int(part[2:] or "0", 16)
    if _OCTAL.fullmatch(part):
        return int(part, 8)
    if _DECIMAL.fullmatch(part):
        return int(part)
    return None
