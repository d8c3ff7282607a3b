"""The embedded server's one error."""

from __future__ import annotations

from birddog.core.errors import DatabaseRefused

__all__ = ["EmbeddedServerError"]


class EmbeddedServerError(DatabaseRefused):
    """The embedded server cannot start (safely) here; the message says why and what to do."""
