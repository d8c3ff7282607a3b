"""The window on its own: admission, per-recipient limits, batches, surplus, stale rows, closing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from birddog import Accepted, DeadReason, Failed, OutboxRow, Rejected
from birddog.core.delivery import UndecodableRow
from birddog.core.flow import Signal
from birddog.engine import EngineConfig
from birddog.engine.claims import Held, Post
from birddog.engine.window import Window
from birddog.ports import Page, RouteHint
from tests.support import T0, at, make_row


class ManualTicks:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        """The current reading."""
        return self.now


class Starts:
    """The window's ``start``: records each post it is asked to start, starts nothing."""

    def __init__(self, ticks: ManualTicks) -> None:
        self.ticks = ticks
        self.posts: list[Post] = []

    def __call__(self, items: list[Held]) -> Post:
        """Record one post of ``items``."""
        post = Post(items=items, at=T0, started=self.ticks())
        self.posts.append(post)
        return post

    def keys(self, agent: str = "alice") -> list[list[str]]:
        """The keys of each post to ``agent``, in start order."""
        return [[row.key for _, row in post.items] for post in self.posts if post.agent == agent]


class Parts:
    """A window with recording starts and manual ticks."""

    def __init__(self, **config: Any) -> None:
        self.ticks = ManualTicks()
        self.starts = Starts(self.ticks)
        self.window = Window(config=EngineConfig(**config), start=self.starts, ticks=self.ticks)

    def admit(self, rows: Sequence[OutboxRow], *, whole: bool = False, **routes: RouteHint) -> None:
        """Admit one claim of ``rows`` (routes by agent id); nothing may be decided."""
        page = Page(rows=rows, claim="claim-1", more=False, routes=routes)
        assert self.window.admit(page, whole=whole, now=T0) == []

    def known(self, agent: str = "alice", *, pace_s: float = 0.1, answers: int = 1) -> None:
        """Teach flow control that ``agent`` answers, each post taking ``pace_s``."""
        for _ in range(answers):
            self.window.flow.answered(agent, Signal.OK, seconds=pace_s, now=T0)


def rows(count: int, agent: str = "alice") -> list[OutboxRow]:
    """``count`` due rows to ``agent``, keys in order."""
    return [make_row(f"outbox:{agent}{i:02d}:reply:0", agent=agent) for i in range(count)]


def test_admission_decides_what_needs_no_post_and_holds_every_row() -> None:
    """An undecodable row is buried, a mailbox row delivered, an unsendable one rejected."""
    parts = Parts()
    buried = UndecodableRow(
        key="outbox:bad:reply:0", agent_id="alice", attempts=0, deferrals=0, due_at=T0, error="x"
    )
    mailbox = make_row("outbox:mb:reply:0", agent="bob")
    unsendable = make_row(" outbox:space:reply:0")
    posted = make_row("outbox:ok:reply:0")
    page = Page(
        rows=[mailbox, unsendable, posted],
        claim="claim-1",
        more=False,
        undecodable=[buried],
        routes={"bob": RouteHint(kind="mailbox")},
    )
    fates = parts.window.admit(page, whole=False, now=T0)
    assert [(fate.row.key, type(fate.result), fate.mailbox) for fate in fates] == [
        (buried.key, type(None), False),
        (mailbox.key, Accepted, True),
        (unsendable.key, Rejected, False),
    ]
    rejected = fates[2].result
    assert isinstance(rejected, Rejected)
    assert rejected.dead_reason is DeadReason.UNSENDABLE
    assert fates[0].attempt is not None
    assert (fates[0].attempt.result, fates[0].attempt.error) == ("rejected", "x")
    assert parts.starts.keys() == [[posted.key]]
    assert parts.window.held == 4


def test_a_recipient_not_heard_from_holds_only_slow_starts_worth() -> None:
    """Five rows for a new recipient: two posts start, three are set aside, it is skipped."""
    parts = Parts()
    claimed = rows(5)
    parts.admit(claimed)
    assert parts.starts.keys() == [[claimed[0].key], [claimed[1].key]]
    assert parts.window.skip(T0) == {"alice"}
    assert sorted(row.key for _, row in parts.window.take_surplus()) == [
        row.key for row in claimed[2:]
    ]
    assert not parts.window.has_ready
    assert parts.window.held == 5


def test_a_whole_page_is_posted_at_once_in_the_routes_batches() -> None:
    """A page drain posts every row now: no per-recipient limit, batches where routed."""
    parts = Parts()
    alice, bob = rows(7, "alice"), rows(5, "bob")
    parts.admit([*alice, *bob], whole=True, alice=RouteHint(batch_size=3))
    assert [len(keys) for keys in parts.starts.keys("alice")] == [3, 3, 1]
    assert parts.starts.keys("bob") == [[row.key] for row in bob]
    assert not parts.window.has_ready
    assert not parts.window.has_surplus


def test_a_post_ending_starts_its_recipients_next_ready_row() -> None:
    """A recipient at its limit keeps rows ready; each answer starts the next one at once."""
    parts = Parts(per_recipient=2)
    parts.known()
    claimed = rows(6)
    parts.admit(claimed)
    assert len(parts.starts.posts) == 2
    assert parts.window.has_ready
    first = parts.starts.posts[0]
    parts.window.post_ended(first, [Accepted()], seconds=0.1, now=T0)
    assert parts.starts.keys()[2] == [claimed[2].key]
    assert len(parts.starts.posts) == 3


def test_a_failure_leaves_its_recipient_one_post_in_flight() -> None:
    """After a failed post, the recipient's next ready row waits for its other post."""
    parts = Parts(per_recipient=4)
    parts.known(answers=2)
    parts.admit(rows(8))
    assert len(parts.starts.posts) == 4
    parts.window.post_ended(parts.starts.posts[0], [Failed("500")], seconds=0.1, now=T0)
    assert len(parts.starts.posts) == 4
    assert parts.window.flow.limit("alice", now=T0) == 1


def test_a_batched_recipient_gathers_rows_while_a_post_is_out() -> None:
    """With a batch out, a partial batch waits; once none is out, it goes as it is."""
    parts = Parts(per_recipient=2)
    parts.known()
    claimed = rows(6)
    parts.admit(claimed, alice=RouteHint(batch_size=4))
    assert parts.starts.keys() == [[row.key for row in claimed[:4]]]
    parts.window.post_ended(parts.starts.posts[0], [Accepted()] * 4, seconds=0.1, now=T0)
    assert parts.starts.keys()[1] == [row.key for row in claimed[4:]]


def test_a_recipient_whose_post_is_out_too_long_gives_its_ready_rows_back() -> None:
    """A post out far longer than the recipient's pace shrinks what it may hold to its posts."""
    parts = Parts(per_recipient=2)
    parts.known()
    parts.admit(rows(12))
    assert len(parts.starts.posts) == 2
    parts.window.give_back_surplus(T0)
    assert not parts.window.has_surplus
    parts.ticks.now = 5.0
    parts.window.give_back_surplus(T0)
    assert len(parts.window.take_surplus()) == 10
    assert not parts.window.has_ready
    assert parts.window.skip(T0) == {"alice"}


def test_a_row_ready_longer_than_its_lease_allows_goes_back_unposted() -> None:
    """Rows ready past ``ready_max_s`` are set aside when their turn comes, never posted."""
    parts = Parts(per_recipient=1, lease_s=60.0, post_timeout_s=30.0)
    parts.known()
    parts.admit(rows(4))
    assert len(parts.starts.posts) == 1
    parts.ticks.now = parts.window.config.ready_max_s + 1
    parts.window.post_ended(parts.starts.posts[0], [Accepted()], seconds=0.1, now=T0)
    assert len(parts.starts.posts) == 1
    assert len(parts.window.take_surplus()) == 3


def test_the_window_claims_a_page_at_a_time_and_knows_when_it_is_full() -> None:
    """Less than a page free with as many rows ready is saturated; letting go makes room."""
    parts = Parts(window_size=10, page_size=4, per_recipient=2)
    parts.known()
    parts.admit(rows(8))
    assert (parts.window.held, parts.window.room) == (8, 2)
    assert parts.window.saturated()
    assert not parts.window.full
    parts.window.let_go(5)
    assert not parts.window.saturated()
    parts.admit(rows(7, "bob"))
    assert parts.window.full
    assert parts.window.room == 0


def test_a_claim_takes_a_whole_batch_after_a_claim_brought_a_batching_recipient() -> None:
    """A page is the claim until a claim brings batches larger than a page, then a batch is."""
    parts = Parts(page_size=4, per_recipient=2)
    assert parts.window.claim_size == 4
    parts.admit(rows(2), alice=RouteHint(batch_size=10))
    assert parts.window.claim_size == 10
    parts.admit(rows(2, "bob"))
    assert parts.window.claim_size == 4


def test_closing_takes_the_ready_rows_and_forgets_the_posts_out() -> None:
    """Ready rows are handed back; a post ending after the window forgot it teaches nothing."""
    parts = Parts(per_recipient=2)
    parts.known()
    parts.admit(rows(5))
    assert len(parts.window.take_ready()) == 3
    assert not parts.window.has_ready
    parts.window.forget_posts()
    parts.window.post_ended(parts.starts.posts[0], [Failed("late")], seconds=9.0, now=at(1))
    known = parts.window.flow.known("alice")
    assert known is not None
    assert (known.limit, known.pace_s, known.heard_at) == (2, 0.1, T0)
    assert len(parts.starts.posts) == 2


def test_a_cancelled_post_leaves_the_window_and_teaches_nothing() -> None:
    """A cancelled post frees its slot without changing what is known of its recipient."""
    parts = Parts(per_recipient=2)
    parts.admit(rows(2))
    parts.window.post_ended(parts.starts.posts[0], None, seconds=0.5, now=T0)
    assert parts.window.flow.known("alice") is None
    assert parts.window.skip(T0) == frozenset()
