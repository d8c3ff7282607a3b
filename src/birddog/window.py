"""The delivery window: posts flow continuously, so one slow inbox never stalls the others.

``MailRoom.drain_outbox`` is the spec's drain: claim a page, post it, wait for every post,
store the outcomes. Waiting for the slowest post of each page means a recipient that
takes 5 s (or hangs until the post timeout) holds back every other reply on its page.
The daemon therefore drains through a window instead:

- up to ``size`` posts are in flight; whenever there is room, the earliest-due rows are
  claimed (``claim_due``: a lease and ``SKIP LOCKED`` like a page, in due order so its
  cost never grows with the rows due later) and posted at once;
- at most ``per_recipient`` posts to one recipient are in flight; a recipient at its cap
  is left out of the next claim, so its rows stay in the table, unleased and visible,
  until a slot frees, and a slow recipient can never fill the window;
- finished outcomes are stored as they come, one ``apply`` (one transaction) per claim
  for all of that claim's finished posts, decided by the same pure ``decide``.

Nothing else changes: rows, leases, receipts, retries and dead letters are the mail
room's, over the same ports.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from typing import Any

from birddog.core.delivery import DeliveryResult, OutboxRow, decide
from birddog.mailroom import DrainReport, MailRoom, add_outcomes
from birddog.ports import Page


class DeliveryWindow:
    """Keeps up to ``size`` posts in flight over a mail room's ports.

    Args:
        room: the mail room whose outbox, transport, clock and schedule are used.
        size: the most posts in flight at once (default four pages).
        per_recipient: the most posts in flight to one recipient.
        linger_s: after a post finishes, how long to wait for more before storing.
    """

    def __init__(
        self,
        room: MailRoom,
        *,
        size: int = 256,
        per_recipient: int = 16,
        linger_s: float = 0.005,
    ) -> None:
        if size < 1 or per_recipient < 1:
            raise ValueError("size and per_recipient must be at least 1")
        self.room = room
        self.size = size
        self.per_recipient = per_recipient
        self.linger_s = linger_s
        self._finished: list[asyncio.Task[DeliveryResult]] = []
        self._progress = asyncio.Event()
        self._posts: dict[asyncio.Task[DeliveryResult], tuple[Page, OutboxRow]] = {}
        self._busy: Counter[str] = Counter()

    @property
    def in_flight(self) -> int:
        """Posts started and not yet stored."""
        return len(self._posts)

    @property
    def full(self) -> bool:
        """No room for another post."""
        return len(self._posts) >= self.size

    async def fill(self) -> bool:
        """Claim the earliest-due rows into the free slots and start posting them.

        Returns:
            True when a claim came back full, so more rows may be due right now.
        """
        while not self.full:
            limit = min(self.room.page_size, self.size - len(self._posts))
            busy = [agent for agent, count in self._busy.items() if count >= self.per_recipient]
            page = await self.room.outbox.claim_due(
                limit=limit,
                now=self.room.clock.now(),
                lease_s=self.room.lease_s,
                skip_agents=busy,
            )
            if page.rows:
                await self._start(page)
            if not page.more:
                return False
        return True

    async def _start(self, page: Page) -> None:
        excess: list[OutboxRow] = []
        for row in page.rows:
            agent = row.recipient.agent_id
            if self._busy[agent] >= self.per_recipient:
                excess.append(row)
                continue
            self._busy[agent] += 1
            task = asyncio.ensure_future(self.room.post_one(row))
            task.add_done_callback(self._on_done)
            self._posts[task] = (page, row)
        if excess:
            # Claimed before the recipient reached its cap: give these back untouched.
            await self.room.outbox.release_claim(
                page=Page(rows=excess, claim=page.claim, more=False)
            )

    def _on_done(self, task: asyncio.Task[DeliveryResult]) -> None:
        self._finished.append(task)
        self._progress.set()

    async def wait(self, *others: asyncio.Future[Any], timeout_s: float) -> None:
        """Wait until a post finishes, one of ``others`` completes, or ``timeout_s`` passes.

        After the first post finishes, linger up to ``linger_s`` while more finish (until a
        page's worth has), so outcomes are stored, and slots refilled, a batch at a time
        rather than one transaction and one claim per post. Waiting costs the same however
        many posts are out: each post reports its end once, through one event.
        """
        if timeout_s <= 0 or not (self._posts or others):
            return
        if not self._finished:
            self._progress.clear()
            progress = asyncio.ensure_future(self._progress.wait())
            try:
                done, _ = await asyncio.wait(
                    {progress, *others}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                progress.cancel()
            if not self._finished or any(future in done for future in others):
                return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.linger_s
        while (
            len(self._finished) < min(self.room.page_size, len(self._posts))
            and (left := deadline - loop.time()) > 0
        ):
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), left)

    async def collect(self) -> DrainReport:
        """Store the outcomes of every finished post: one ``apply`` per claim.

        Returns:
            What was stored, as a drain report.
        """
        finished, self._finished = self._finished, []
        if not finished:
            return DrainReport()
        pages: dict[str, Page] = {}
        by_claim: defaultdict[str, list[tuple[OutboxRow, DeliveryResult]]] = defaultdict(list)
        for task in finished:
            page, row = self._posts.pop(task)
            self._release_slot(row)
            pages[page.claim] = page
            by_claim[page.claim].append((row, task.result()))
        now = self.room.clock.now()
        report = DrainReport(claimed=len(finished))
        for claim, items in by_claim.items():
            outcomes = [
                decide(row, result, now=now, schedule=self.room.schedule, rng=self.room.rng)
                for row, result in items
            ]
            stored = set(await self.room.outbox.apply(page=pages[claim], outcomes=outcomes))
            add_outcomes(report, items, outcomes, stored)
        return report

    async def close(self, *, grace_s: float) -> DrainReport:
        """Stop: let posts finish within ``grace_s``, store them, give the rest back.

        Returns:
            What was stored while closing.
        """
        if self._posts:
            await asyncio.wait(set(self._posts), timeout=grace_s)
        report = await self.collect()
        if not self._posts:
            return report
        cancelled: defaultdict[str, list[OutboxRow]] = defaultdict(list)
        for task, (page, row) in list(self._posts.items()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            cancelled[page.claim].append(row)
            self._release_slot(row)
        self._posts.clear()
        self._finished.clear()
        for claim, rows in cancelled.items():
            with contextlib.suppress(Exception):
                await self.room.outbox.release_claim(page=Page(rows=rows, claim=claim, more=False))
        return report

    def _release_slot(self, row: OutboxRow) -> None:
        agent = row.recipient.agent_id
        self._busy[agent] -= 1
        if self._busy[agent] <= 0:
            del self._busy[agent]
