"""The egress policy at connect time: a resolver and a socket guard for the aiohttp client.

A route's host is checked when the route is written (``birddog.core.egress``), but a name
can resolve elsewhere later (DNS rebinding). So the transport's connector checks again,
on the addresses it is about to use:

- :class:`EgressResolver` wraps the real resolver and drops every answer the policy
  refuses; a name that resolves only to refused addresses fails with
  :class:`EgressRefused`. aiohttp caches the filtered answer, never the raw one.
- :func:`guarded_socket_factory` checks the address of every socket the connector opens
  (IP literals in URLs never reach a resolver), so nothing connects around the policy.

Both run once per new connection, never per post: a pooled connection is reused as is.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable

import aiohttp
from aiohappyeyeballs import AddrInfoType
from aiohttp.abc import AbstractResolver, ResolveResult

from birddog.core.egress import EgressPolicy

SocketFactory = Callable[[AddrInfoType], socket.socket]


class EgressRefused(OSError):
    """The egress policy refuses every address of this destination.

    Attributes:
        reason: why, naming the address (never a URL).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"egress refused: {reason}")


class EgressResolver(AbstractResolver):
    """A resolver that keeps only the answers the egress policy allows.

    Args:
        policy: the egress policy.
        resolver: the resolver asked first (default: aiohttp's default resolver, made on
            first use); tests give one that answers what they need.
    """

    def __init__(self, policy: EgressPolicy, resolver: AbstractResolver | None = None) -> None:
        self.policy = policy
        self._resolver = resolver

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Resolve a name and drop the addresses the policy refuses.

        Raises:
            EgressRefused: every address was refused.
            OSError: the lookup itself failed.
        """
        if self._resolver is None:
            self._resolver = aiohttp.DefaultResolver()
        answers = await self._resolver.resolve(host, port, family)
        allowed: list[ResolveResult] = []
        reasons: list[str] = []
        for answer in answers:
            reason = address_refusal(self.policy, answer["host"])
            if reason is None:
                allowed.append(answer)
            else:
                reasons.append(reason)
        if not allowed and reasons:
            raise EgressRefused(reasons[0])
        return allowed

    async def close(self) -> None:
        """Close the resolver asked first."""
        if self._resolver is not None:
            await self._resolver.close()


def guarded_socket_factory(policy: EgressPolicy) -> SocketFactory:
    """A socket factory for ``aiohttp.TCPConnector`` that refuses what the policy refuses.

    Args:
        policy: the egress policy.

    Returns:
        A factory that raises :class:`EgressRefused` for a refused address and otherwise
        makes the socket the connector would have made.
    """

    def factory(addr_info: AddrInfoType) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        reason = address_refusal(policy, str(sockaddr[0]))
        if reason is not None:
            raise EgressRefused(reason)
        return socket.socket(family=family, type=type_, proto=proto)

    return factory


def egress_connector(
    policy: EgressPolicy, *, limit: int, resolver: AbstractResolver | None = None
) -> aiohttp.TCPConnector:
    """A connector that connects only where the egress policy allows.

    Args:
        policy: the egress policy.
        limit: the most connections open at once.
        resolver: the resolver asked before the policy filters (default: aiohttp's).

    Returns:
        The connector.
    """
    return aiohttp.TCPConnector(
        limit=limit,
        resolver=EgressResolver(policy, resolver),
        socket_factory=guarded_socket_factory(policy),
    )


def address_refusal(policy: EgressPolicy, host: str) -> str | None:
    """Why the policy refuses an address given as text, or None.

    Args:
        policy: the egress policy.
        host: an IPv4 or IPv6 address (a zone such as ``%eth0`` is allowed).

    Returns:
        The policy's reason; text that is not an address is refused too.
    """
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return "the resolver answered something that is not an address"
    return policy.refusal(address)


def egress_refusal(exc: BaseException) -> EgressRefused | None:
    """The egress refusal behind a client error, if that is what it was.

    aiohttp wraps errors from the resolver and the socket factory in its own connector
    errors; this finds the refusal in the chain.

    Args:
        exc: the error a request raised.

    Returns:
        The refusal, or None when the error was something else.
    """
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, EgressRefused):
            return seen
        os_error = getattr(seen, "os_error", None)
        if isinstance(os_error, EgressRefused):
            return os_error
        seen = seen.__cause__ or seen.__context__
    return None
