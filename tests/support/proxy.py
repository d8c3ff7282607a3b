"""A TCP proxy on 127.0.0.1 in front of a test's PostgreSQL, that a test can cut and restore.

``down()`` stops listening and breaks every connection through it, as a network that
went away would (a new connection is refused; an open one is reset); ``up()`` listens
again on the same port. The database behind it is the test's own; nothing else is
touched.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CHUNK_BYTES = 65536


class DatabaseProxy:
    """Forwards TCP connections on 127.0.0.1 to the server of a DSN (TCP or unix socket).

    Args:
        dsn: the test database's DSN (``?host=/dir`` for a unix socket).
    """

    def __init__(self, dsn: str) -> None:
        self.target = dsn
        parts = urlsplit(dsn)
        query = dict(parse_qsl(parts.query))
        self._socket_dir = query.pop("host", None) if not parts.hostname else None
        self._host = parts.hostname
        self._port = parts.port or int(query.pop("port", "5432"))
        self._query = query
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def dsn(self) -> str:
        """The same database, reached through this proxy."""
        parts = urlsplit(self.target)
        user = parts.username or ""
        auth = f"{user}:{parts.password}@" if parts.password else (f"{user}@" if user else "")
        netloc = f"{auth}127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(self._query)))

    async def up(self) -> None:
        """Listen (again, on the same port once one was chosen)."""
        if self._server is not None:
            return
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        """Stop listening and reset every connection through the proxy."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        self._writers.add(writer)
        try:
            if self._socket_dir is not None:
                path = f"{self._socket_dir}/.s.PGSQL.{self._port}"
                up_reader, up_writer = await asyncio.open_unix_connection(path)
            else:
                up_reader, up_writer = await asyncio.open_connection(self._host, self._port)
            self._writers.add(up_writer)
            try:
                await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
            finally:
                up_writer.transport.abort()
                self._writers.discard(up_writer)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.transport.abort()
            self._writers.discard(writer)
            self._pipes.discard(task)


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while chunk := await source.read(CHUNK_BYTES):
            sink.write(chunk)
            await sink.drain()
    sink.transport.abort()


@contextlib.asynccontextmanager
async def proxied(database_url: str) -> AsyncIterator[DatabaseProxy]:
    """A database behind a proxy that is up for the block, and down after it."""
    proxy = DatabaseProxy(database_url)
    await proxy.up()
    try:
        yield proxy
    finally:
        await proxy.down()
