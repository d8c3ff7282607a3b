"""The window: which claimed rows may be posted now, per recipient.

The window holds every claimed row from its claim until it is let go (stored or given
back): at most ``window_size``. It decides, with the adaptive limits of
:mod:`birddog.core.flow`, what each recipient may have:

- **in flight**: its posts out, at most its current limit; a recipient that takes
  batches gets a partial batch only when none of its posts is out;
- **ready**: claimed rows waiting for one of its posts to end, as many as it takes within
  ``ready_horizon_s`` at its measured pace; the excess (its **surplus**) is set aside to
  be given back, and so is a row that waited ready longer than ``ready_max_s``.

A recipient holding all it may is **skipped** by the next claim. The window never does
I/O: it starts posts through the function it is given and hands back what it sets aside
(:meth:`Window.take_surplus`); the loop releases those rows.

Where a claim of each recipient's due head would go (claiming only what a recipient may
take): :meth:`Window.skip` is the one place that knows who has room; a claim of fresh rows
beside the window's own would enter through :meth:`Window.admit` like any other page.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from datetime import datetime

from birddog.core.delivery import (
    Accepted,
    Attempt,
    DeadReason,
    DeliveryResult,
    OutboxRow,
    Rejected,
    attempt_of,
    unsendable,
)
from birddog.core.flow import FlowControl, Signal
from birddog.engine.claims import Claim, Decided, Held, Post
from birddog.engine.config import EngineConfig
from birddog.ports import Page


class Window:
    """The claimed rows the engine holds, and which of them may be posted now.

    Args:
        config: the window's sizes (``window_size``, ``per_recipient``, ``slow_start``,
            ``quiet_s``, ``ready_horizon_s``, ``page_size``, ``ready_max_s``).
        start: starts one post of the rows given (one recipient's) and returns it; the
            window counts it out until :meth:`post_ended`.
        ticks: monotonic seconds (a claim's age, a post's age): the poster's clock too.

    Attributes:
        flow: the per-recipient limits, learning from every answer.
    """

    def __init__(
        self,
        *,
        config: EngineConfig,
        start: Callable[[list[Held]], Post],
        ticks: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config
        self.flow = FlowControl(
            ceiling=config.per_recipient,
            initial=config.slow_start,
            quiet_s=config.quiet_s,
            horizon_s=config.ready_horizon_s,
            hold_max=config.window_size,
        )
        self._start = start
        self._ticks = ticks
        self._held = 0
        self._ready_by_recipient: dict[str, deque[Held]] = {}
        self._batch_size_by_recipient: dict[str, int] = {}
        self._out = PostsOut()
        self._to_give_back: list[Held] = []
        self._claim_batch = 1  # the largest batch size of the last claim with rows

    # ------------------------------------------------------------------ holding

    @property
    def held(self) -> int:
        """Rows claimed and not let go (at most ``window_size``)."""
        return self._held

    @property
    def room(self) -> int:
        """Rows the window can still take (zero when full)."""
        return max(self.config.window_size - self._held, 0)

    @property
    def full(self) -> bool:
        """No room to claim another row."""
        return self._held >= self.config.window_size

    @property
    def has_ready(self) -> bool:
        """Some rows wait ready for a recipient's post to end."""
        return bool(self._ready_by_recipient)

    @property
    def has_surplus(self) -> bool:
        """Some rows were set aside to be given back (see :meth:`take_surplus`)."""
        return bool(self._to_give_back)

    def let_go(self, count: int) -> None:
        """``count`` held rows left the window: their outcomes stored, or given back."""
        self._held -= count

    @property
    def claim_size(self) -> int:
        """The most rows the next claim should take: a page, or a whole batch if larger.

        A recipient that takes batches of more than a page gets a full batch from one
        claim, so its next post can start at once (a partial batch waits while one of its
        posts is out) and one claim's commit serves a whole batch. The batch is the
        largest of the recipients the last claim with rows brought.
        """
        return max(self.config.page_size, self._claim_batch)

    def saturated(self) -> bool:
        """No claim is worth making now: the window is full, or nearly, with enough ready.

        Less than a claim's worth of the window free while at least as many rows wait
        ready: the engine claims a page (or a batch) at a time rather than a row at a time.
        """
        free = self.config.window_size - self._held
        if free <= 0:
            return True
        ready = sum(map(len, self._ready_by_recipient.values()))
        return free < self.claim_size and ready >= free

    # ------------------------------------------------------------------ admission

    def admit(self, page: Page, *, whole: bool, now: datetime) -> list[Decided]:
        """Take a claimed page in: its rows are held from now on until let go.

        Rows that need no post are decided at once (returned, for the outcome store):
        undecodable ones are buried, mailbox ones delivered, unsendable ones rejected. The
        rest are posted: with ``whole`` (a page drain) every one at once, in batches where
        the route takes them; otherwise they wait ready and start as their recipient has
        room, and what a recipient may not hold is set aside as surplus.

        Args:
            page: the claim.
            whole: post the whole page now, without per-recipient limits.
            now: the current time.

        Returns:
            The fates decided without a post.
        """
        self._held += page.size
        claim = Claim(page=page, taken_at=self._ticks())
        decided: list[Decided] = []
        for buried in page.undecodable:
            attempt = Attempt(at=now, result="rejected", status=None, ms=0, error=buried.error)
            decided.append(Decided(claim, buried, None, attempt))
        whole_posts: dict[str, list[Held]] = {}
        if page.rows:
            self._claim_batch = max((hint.batch_size for hint in page.routes.values()), default=1)
        for row in page.rows:
            agent = row.agent_id
            route = page.route(agent)
            if route.batch_size > 1:
                self._batch_size_by_recipient[agent] = route.batch_size
            else:
                self._batch_size_by_recipient.pop(agent, None)
            if route.kind == "mailbox":
                decided.append(_decided(claim, row, Accepted(), now, mailbox=True))
            elif (why := unsendable(row.parcel)) is not None:
                rejected = Rejected(why, dead_reason=DeadReason.UNSENDABLE)
                decided.append(_decided(claim, row, rejected, now))
            elif whole:
                whole_posts.setdefault(agent, []).append((claim, row))
            else:
                self._ready_by_recipient.setdefault(agent, deque()).append((claim, row))
        for agent, items in whole_posts.items():
            size = self._batch_size_by_recipient.get(agent, 1)
            for start in range(0, len(items), size):
                self._post(items[start : start + size])
        if not whole:
            self.give_back_surplus(now)
            self.pump(now)
        return decided

    # ------------------------------------------------------------------ the limits

    def skip(self, now: datetime) -> frozenset[str]:
        """The recipients that hold all they may: a claim now should leave them out."""
        holding = Counter(self._out.rows_by_recipient)
        for agent, ready in self._ready_by_recipient.items():
            holding[agent] += len(ready)
        waited = self._waited()
        return frozenset(
            agent
            for agent, count in holding.items()
            if count >= self._hold(agent, now, waited.get(agent, 0.0))
        )

    def give_back_surplus(self, now: datetime) -> None:
        """Set aside ready rows beyond what their recipient may hold (given back at the next store).

        After a claim (it may bring more than a recipient has room for), and before one:
        a recipient whose posts have slowed down holds less than when its rows came.
        """
        if not self._ready_by_recipient:
            return
        waited = self._waited()
        for agent, ready in list(self._ready_by_recipient.items()):
            hold = self._hold(agent, now, waited.get(agent, 0.0))
            room = max(hold - self._out.rows_by_recipient[agent], 0)
            while len(ready) > room:
                self._to_give_back.append(ready.pop())
            if not ready:
                # Nothing held ready: no reason for the loop to look again soon.
                del self._ready_by_recipient[agent]

    def take_surplus(self) -> list[Held]:
        """The rows set aside to be given back (surplus, or ready too long), now the caller's."""
        surplus, self._to_give_back = self._to_give_back, []
        return surplus

    def take_ready(self) -> list[Held]:
        """Every row waiting ready, now the caller's (closing: they go back unposted)."""
        ready = [item for items in self._ready_by_recipient.values() for item in items]
        self._ready_by_recipient.clear()
        return ready

    # ------------------------------------------------------------------ posting

    def pump(self, now: datetime) -> None:
        """Start ready rows of every recipient that has room (after a claim)."""
        for agent in list(self._ready_by_recipient):
            self.pump_recipient(agent, now)

    def pump_recipient(self, agent: str, now: datetime) -> None:
        """Start ``agent``'s ready rows while it has room: the moment one of its posts ends.

        A recipient that takes batches gets a partial batch only when none of its posts is
        out (so a lone reply waits for no one); while one is, its rows gather until a full
        batch is ready or that post ends, as Nagle's algorithm gathers small writes.
        """
        ready = self._ready_by_recipient.get(agent)
        if ready is None:
            return
        limit = self.flow.limit(agent, now=now)
        size = self._batch_size_by_recipient.get(agent, 1)
        out = self._out.posts_by_recipient
        expired = self._ticks() - self.config.ready_max_s
        while ready and out[agent] < limit and (len(ready) >= size or not out[agent]):
            batch: list[Held] = []
            while ready and len(batch) < size:
                claim, row = ready.popleft()
                if claim.taken_at < expired:
                    self._to_give_back.append((claim, row))
                else:
                    batch.append((claim, row))
            if batch:
                self._post(batch)
        if not ready:
            del self._ready_by_recipient[agent]

    def post_ended(
        self,
        post: Post,
        results: Sequence[DeliveryResult] | None,
        *,
        seconds: float,
        now: datetime,
    ) -> None:
        """A post ended: flow control learns from it, and its recipient's next rows start.

        Args:
            post: the post, as :meth:`admit` or :meth:`pump_recipient` started it.
            results: one per row; None when it was cancelled (it teaches nothing).
            seconds: how long it was out.
            now: the current time.
        """
        if not self._out.remove(post):
            return  # not counted out: forgotten while closing
        if results is None:
            return
        self.flow.answered(post.agent, _signal(results), seconds=seconds, now=now)
        self.pump_recipient(post.agent, now)

    def forget_posts(self) -> None:
        """Count no post out any more (closing: every post was cancelled or has ended)."""
        self._out.clear()

    def _post(self, items: list[Held]) -> None:
        self._out.add(self._start(items))

    def _hold(self, agent: str, now: datetime, waited_s: float) -> int:
        """The rows the window may hold for ``agent``: its posts' worth, in batches if batched."""
        hold = self.flow.hold(agent, now=now, waited_s=waited_s)
        return hold * self._batch_size_by_recipient.get(agent, 1)

    def _waited(self) -> dict[str, float]:
        """How long each recipient's oldest post in flight has been out (seconds)."""
        return self._out.waited(self._ticks())


class PostsOut:
    """The posts the window started and that have not ended, counted per recipient.

    Attributes:
        posts_by_recipient: how many posts each recipient has out.
        rows_by_recipient: how many rows those posts carry.
    """

    def __init__(self) -> None:
        self._posts: dict[Post, None] = {}  # ordered like a set, in start order
        self.posts_by_recipient: Counter[str] = Counter()
        self.rows_by_recipient: Counter[str] = Counter()

    def add(self, post: Post) -> None:
        """Count ``post`` out."""
        self._posts[post] = None
        self.posts_by_recipient[post.agent] += 1
        self.rows_by_recipient[post.agent] += len(post.items)

    def remove(self, post: Post) -> bool:
        """Count ``post`` in again; False when it was not out (forgotten while closing)."""
        if post not in self._posts:
            return False
        del self._posts[post]
        agent = post.agent
        self.posts_by_recipient[agent] -= 1
        if self.posts_by_recipient[agent] <= 0:
            del self.posts_by_recipient[agent]
        self.rows_by_recipient[agent] -= len(post.items)
        if self.rows_by_recipient[agent] <= 0:
            del self.rows_by_recipient[agent]
        return True

    def clear(self) -> None:
        """Count no post out any more."""
        self._posts.clear()
        self.posts_by_recipient.clear()
        self.rows_by_recipient.clear()

    def waited(self, ticks: float) -> dict[str, float]:
        """How long, at ``ticks``, each recipient's oldest post out has been out (seconds)."""
        started: dict[str, float] = {}
        for post in self._posts:
            agent = post.agent
            if agent not in started or post.started < started[agent]:
                started[agent] = post.started
        return {agent: ticks - at for agent, at in started.items()}


def _decided(
    claim: Claim, row: OutboxRow, result: DeliveryResult, now: datetime, *, mailbox: bool = False
) -> Decided:
    """A row decided at admission, without a post."""
    return Decided(claim, row, result, attempt_of(result, at=now, seconds=0.0), mailbox=mailbox)


def _signal(results: Sequence[DeliveryResult]) -> Signal:
    # A batch the recipient took any of says it is there and answering.
    if any(isinstance(result, Accepted) for result in results):
        return Signal.OK
    if all(isinstance(result, Rejected) for result in results):
        return Signal.NEUTRAL
    return Signal.CONGESTED


__all__ = ["Window"]
