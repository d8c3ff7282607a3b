"""A2A: BirdDog agents answer the Agent2Agent protocol, and remote A2A agents answer mail.

- :mod:`birddog.a2a.tasks` maps ask jobs to A2A tasks (ids, states, messages).
- :mod:`birddog.a2a.push` makes push configs reply addresses, and :class:`OutboxPushSender`
  the SDK's durable push sender for A2A servers of their own.
- :mod:`birddog.a2a.remote` is `worker --a2a`: a remote A2A agent answering mail.
- :mod:`birddog.a2a.server` is BirdDog behind ``a2a-sdk``'s request handler interface;
  :mod:`birddog.a2a.configs` keeps its push configs.
- :mod:`birddog.a2a.app` puts every agent with a route on the SDK's server (``birddog
  a2a``), behind :mod:`birddog.a2a.gate` (the URL form, the body cap, the token, the rate).

The SDK is imported only by these modules, so ``import birddog`` stays light; it comes
with the ``a2a`` extra (``pip install 'birddog[a2a]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from birddog.a2a.push import OutboxPushSender

__all__ = ["OutboxPushSender"]


def __getattr__(name: str) -> Any:
    """``birddog.a2a.OutboxPushSender``, imported (with the SDK) when first asked for."""
    if name == "OutboxPushSender":
        from birddog.a2a.push import OutboxPushSender  # noqa: PLC0415 - the SDK, lazily

        return OutboxPushSender
    raise AttributeError(name)
