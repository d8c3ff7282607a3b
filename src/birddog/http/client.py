"""What the transport and the alert poster share: one lazily opened aiohttp session."""

from __future__ import annotations

from types import TracebackType
from typing import Self

import aiohttp


class SessionOwner:
    """Owns an aiohttp session opened on first use; ``async with`` closes it.

    Subclasses open ``self._session`` when they first need it; :meth:`close` closes it
    and a later use opens a new one.
    """

    _session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session and its connections; a later use opens a new one."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
