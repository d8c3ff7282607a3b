"""The poster on its own: one post or batch, its answers classified, timeouts, cancelling."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from birddog import Accepted, Deferred, DeliveryResult, Failed, OutboxRow, Reply
from birddog.core.delivery import NOT_ACCEPTED, Parcel
from birddog.engine.claims import Claim, Held, Post
from birddog.engine.poster import Poster
from birddog.ports import Page
from birddog.testing import FrozenClock, RecordingTransport
from tests.support import at, eventually, make_row

DEADLINE_S = 5.0


class Ends:
    """The poster's ``on_end``: records every post that ended, with what it answered."""

    def __init__(self) -> None:
        self.ended: list[tuple[Post, list[DeliveryResult] | None, float]] = []

    def __call__(self, post: Post, results: list[DeliveryResult] | None, seconds: float) -> None:
        """Record one post's end."""
        self.ended.append((post, results, seconds))

    def results(self) -> list[list[DeliveryResult] | None]:
        """What each ended post answered, in the order they ended."""
        return [results for _, results, _ in self.ended]


class ParcelRecorder(RecordingTransport):
    """A transport with the batch fast path, answering each parcel with ``answers``."""

    def __init__(self, answers: Sequence[DeliveryResult]) -> None:
        super().__init__(True)
        self.answers = list(answers)
        self.batches: list[list[str]] = []

    async def post_parcels(self, parcels: Sequence[Parcel]) -> list[DeliveryResult]:
        """Record one request of ``parcels`` and answer it."""
        self.batches.append([parcel.key for parcel in parcels])
        return self.answers


def held(*keys: str) -> list[Held]:
    """Claimed rows to alice under ``keys``, in one claim."""
    rows: list[OutboxRow] = [make_row(key) for key in keys]
    claim = Claim(page=Page(rows=rows, claim="claim-1", more=False), taken_at=0.0)
    return [(claim, row) for row in rows]


async def ended(poster: Poster, ends: Ends, count: int) -> None:
    """Wait (bounded) until ``count`` posts have ended and none is out."""
    await asyncio.wait_for(poster.wait(), DEADLINE_S)
    await eventually(lambda: len(ends.ended) == count, f"{count} posts ending")
    assert poster.in_flight == 0


async def test_a_post_ends_with_each_answer_classified_and_its_duration() -> None:
    """True is an acceptance and False a failure; the post took what the ticks say."""
    clock = FrozenClock()
    transport = RecordingTransport(lambda reply: reply.key.endswith("ok:reply:0"))
    ends = Ends()
    ticks = iter([0.0, 1.0, 0.25, 1.5]).__next__  # two starts, then two ends
    poster = Poster(transport=transport, clock=clock, post_timeout_s=1.0, on_end=ends, ticks=ticks)
    first = poster.start(held("outbox:ok:reply:0"))
    poster.start(held("outbox:no:reply:0"))
    assert poster.in_flight == 2
    await ended(poster, ends, 2)
    assert ends.results() == [[Accepted()], [Failed(NOT_ACCEPTED)]]
    assert [seconds for _, _, seconds in ends.ended] == [0.25, 0.5]
    assert (first.at, first.agent) == (clock.now(), "alice")


async def test_a_post_without_an_answer_in_time_is_a_failure_naming_the_timeout() -> None:
    """A transport that never answers is cut off at ``post_timeout_s`` as a failure."""

    async def never(reply: Reply) -> bool:
        await asyncio.Event().wait()
        return True

    ends = Ends()
    poster = Poster(
        transport=RecordingTransport(never), clock=FrozenClock(), post_timeout_s=0.01, on_end=ends
    )
    poster.start(held("outbox:slow:reply:0"))
    await ended(poster, ends, 1)
    assert ends.results() == [[Failed("no answer within 0.01 s")]]


async def test_a_transport_that_raises_is_a_failure_with_a_bounded_diagnostic() -> None:
    """A raise becomes a failure naming the error's class; a credential in it is masked."""

    def refuse(reply: Reply) -> bool:
        raise ConnectionError("refused, Authorization: Bearer abcdefghijklmnop")

    ends = Ends()
    poster = Poster(
        transport=RecordingTransport(refuse), clock=FrozenClock(), post_timeout_s=1.0, on_end=ends
    )
    poster.start(held("outbox:r:reply:0"))
    await ended(poster, ends, 1)
    [results] = ends.results()
    assert results is not None
    [result] = results
    assert isinstance(result, Failed)
    assert result.reason.startswith("ConnectionError: refused")
    assert "abcdefghijklmnop" not in result.reason


async def test_a_batch_is_one_request_through_the_parcel_fast_path() -> None:
    """Rows of one post go out as one ``post_parcels`` call, one result per row."""
    answers: list[DeliveryResult] = [Accepted(), Deferred(until=at(60)), Failed("no")]
    transport = ParcelRecorder(answers)
    ends = Ends()
    poster = Poster(transport=transport, clock=FrozenClock(), post_timeout_s=1.0, on_end=ends)
    keys = ("outbox:b1:reply:0", "outbox:b2:reply:0", "outbox:b3:reply:0")
    poster.start(held(*keys))
    await ended(poster, ends, 1)
    assert transport.batches == [list(keys)]
    assert transport.sent == []
    assert ends.results() == [answers]


async def test_a_transport_that_miscounts_its_answers_fails_the_whole_batch() -> None:
    """Two results for three replies: none of them can be trusted, all three fail."""
    ends = Ends()
    poster = Poster(
        transport=ParcelRecorder([Accepted(), Accepted()]),
        clock=FrozenClock(),
        post_timeout_s=1.0,
        on_end=ends,
    )
    poster.start(held("outbox:c1:reply:0", "outbox:c2:reply:0", "outbox:c3:reply:0"))
    await ended(poster, ends, 1)
    assert ends.results() == [[Failed("transport answered 2 results for 3 replies")] * 3]


async def test_without_the_fast_path_each_reply_of_a_batch_is_posted_on_its_own() -> None:
    """A plain transport gets one ``post`` per reply of the batch, in order."""
    transport = RecordingTransport(True)
    ends = Ends()
    poster = Poster(transport=transport, clock=FrozenClock(), post_timeout_s=None, on_end=ends)
    keys = ("outbox:p1:reply:0", "outbox:p2:reply:0")
    poster.start(held(*keys))
    await ended(poster, ends, 1)
    assert [reply.key for reply in transport.sent] == list(keys)
    assert ends.results() == [[Accepted(), Accepted()]]


async def test_cancelling_gives_back_the_rows_of_every_post_still_out() -> None:
    """Posts still out are cancelled: their rows come back and their end says None."""
    gate = asyncio.Event()

    async def gated(reply: Reply) -> bool:
        await gate.wait()
        return True

    transport = RecordingTransport(gated)
    ends = Ends()
    poster = Poster(transport=transport, clock=FrozenClock(), post_timeout_s=None, on_end=ends)
    first, second = held("outbox:x1:reply:0"), held("outbox:x2:reply:0", "outbox:x3:reply:0")
    poster.start(first)
    poster.start(second)
    await eventually(lambda: len(transport.sent) == 2, "both posts out")
    await asyncio.wait_for(poster.wait(timeout_s=0.01), DEADLINE_S)
    assert poster.in_flight == 2
    given_back = await asyncio.wait_for(poster.cancel_all(), DEADLINE_S)
    assert given_back == first + second
    assert ends.results() == [None, None]
    assert poster.in_flight == 0
    assert await poster.cancel_all() == []
