"""The poster: one post (a row's reply, or a batch of one recipient's) and what it answered.

A post goes through the transport (which signs it), within ``post_timeout_s``, inside a
``birddog.post`` span when its rows are traced, and always ends as one
:data:`~birddog.core.delivery.DeliveryResult` per row: a timeout, a raise or a transport
that miscounts is a failure, never a crash. Each post runs as a task of its own, so a
recipient's next post can start the moment one ends, even while the engine waits on the
database; the poster tells its ``on_end`` callback, from the task's done callback.

The HTTP client itself (connections, headers, signing) is the transport's: the poster
depends only on the :class:`~birddog.ports.Transport` port.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from birddog import tracing
from birddog.core.delivery import DeliveryResult, Failed, OutboxRow, as_result
from birddog.core.diagnostic import bounded_diagnostic
from birddog.engine.claims import Held, Post
from birddog.ports import Clock, ParcelTransport, Transport
from birddog.runtime import stop_task

PostEnded = Callable[[Post, list[DeliveryResult] | None, float], None]
"""Told when a post ends: the post, one result per row (None: cancelled), its seconds out."""


class Poster:
    """Starts posts as tasks, classifies what each answered, and tells when one ends.

    Args:
        transport: posts replies (with ``post_parcels``, a batch in one request and the
            stored JSON as it is).
        clock: the current time (each post's attempt time).
        post_timeout_s: a post still out after this is cancelled and counts as a failure;
            None leaves the timeout to the transport.
        on_end: told when a post ends (from the task's done callback).
        ticks: monotonic seconds (a post's start and duration).
    """

    def __init__(
        self,
        *,
        transport: Transport,
        clock: Clock,
        post_timeout_s: float | None,
        on_end: PostEnded,
        ticks: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.transport = transport
        self.clock = clock
        self.post_timeout_s = post_timeout_s
        self._on_end = on_end
        self._ticks = ticks
        self._parcels = transport if isinstance(transport, ParcelTransport) else None
        self._tasks: dict[asyncio.Task[list[DeliveryResult]], Post] = {}
        self._cancelled: list[Post] = []

    @property
    def in_flight(self) -> int:
        """Posts started and not yet ended."""
        return len(self._tasks)

    def start(self, items: list[Held]) -> Post:
        """Start one post of ``items`` (rows of one recipient) as a task of its own.

        Returns:
            The post; the poster holds its task until it ends.
        """
        post = Post(items=items, at=self.clock.now(), started=self._ticks())
        rows = [row for _, row in items]
        task = asyncio.ensure_future(self.post(rows))
        self._tasks[task] = post
        task.add_done_callback(self._ended)
        return post

    async def wait(self, *, timeout_s: float | None = None) -> None:
        """Wait until every post started so far has ended, or ``timeout_s`` has passed."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)

    async def cancel_all(self) -> list[Held]:
        """Cancel every post still out (closing).

        Returns:
            The rows of every cancelled post, to give back untouched.
        """
        for task in list(self._tasks):
            await stop_task(task)
        items = [item for post in self._cancelled for item in post.items]
        self._cancelled.clear()
        self._tasks.clear()
        return items

    async def post(self, rows: list[OutboxRow]) -> list[DeliveryResult]:
        """Post one row's reply (or a batch); a traced post is its ``birddog.post`` span.

        The span is a child of the first traced row's context, linked to the others'.

        Returns:
            One result per row, in order (a timeout or a raise is a failure).
        """
        traced = [row.traceparent for row in rows if row.traceparent is not None]
        if not traced:
            return await self._post_once(rows)
        ids: dict[str, str | int] = {
            "reply_key": rows[0].key,
            "recipient": rows[0].agent_id,
            "replies": len(rows),
        }
        with tracing.span(
            "post", parent=traced[0], links=traced[1:], kind="client", attributes=ids
        ) as span:
            results = await self._post_once(rows)
            span.note(result="/".join(sorted({type(r).__name__.lower() for r in results})))
            return results

    async def _post_once(self, rows: list[OutboxRow]) -> list[DeliveryResult]:
        """Post one row's reply (or a batch); a timeout or a raise is a failure, never a crash."""
        timeout_s = self.post_timeout_s
        try:
            if timeout_s is None:
                return await self._send(rows)
            async with asyncio.timeout(timeout_s):
                return await self._send(rows)
        except TimeoutError:
            return [Failed(f"no answer within {timeout_s or 0:g} s")] * len(rows)
        except Exception as exc:
            return [Failed(bounded_diagnostic(f"{type(exc).__name__}: {exc}"))] * len(rows)

    async def _send(self, rows: list[OutboxRow]) -> list[DeliveryResult]:
        if self._parcels is not None:
            # The stored JSON goes out as it is: no model on the way.
            results = await self._parcels.post_parcels([row.parcel for row in rows])
            if len(results) != len(rows):
                count = f"{len(results)} results for {len(rows)} replies"
                return [Failed(f"transport answered {count}")] * len(rows)
            return [as_result(result) for result in results]
        # A transport without the fast path posts each reply on its own.
        return [as_result(await self.transport.post(row.reply)) for row in rows]

    def _ended(self, task: asyncio.Task[list[DeliveryResult]]) -> None:
        """A post's task ended: tell ``on_end`` what it answered (None: cancelled)."""
        post = self._tasks.pop(task, None)
        if post is None:
            return
        seconds = self._ticks() - post.started
        if task.cancelled():
            # Only the engine cancels a post (closing): its rows go back untouched.
            self._cancelled.append(post)
            self._on_end(post, None, seconds)
            return
        self._on_end(post, _task_results(task, len(post.items)), seconds)


def _task_results(task: asyncio.Task[list[DeliveryResult]], count: int) -> list[DeliveryResult]:
    error = task.exception()
    if error is not None:
        return [Failed(bounded_diagnostic(f"{type(error).__name__}: {error}"))] * count
    return task.result()


__all__ = ["PostEnded", "Poster"]
