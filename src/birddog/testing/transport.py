"""The transport fakes: replies recorded, answered by a value or a function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence

from birddog.core.delivery import DeliveryResult, Failed, Parcel, as_result
from birddog.core.mail import Reply

__all__ = ["Answer", "AnswerFn", "RecordingParcelTransport", "RecordingTransport"]

Answer = bool | DeliveryResult
"""What a recipient answered: accepted (True), failed (False), or a delivery result."""

AnswerFn = Callable[[Reply], Answer | Awaitable[Answer]]
"""Answers one reply (sync or async); raising stands for a transport error."""


class RecordingTransport:
    """A transport that records every reply and answers with a function or a fixed value.

    Args:
        answer: ``True``/``False``, a delivery result, or a (sync or async) function of the
            reply returning one. A function may raise to simulate a transport error.

    Attributes:
        sent: every reply posted, in order, retries included.
    """

    def __init__(self, answer: Answer | AnswerFn = True) -> None:
        self.answer = answer
        self.sent: list[Reply] = []

    async def post(self, reply: Reply) -> Answer:
        """Record the reply and answer."""
        self.sent.append(reply)
        if not callable(self.answer):
            return self.answer
        result = self.answer(reply)
        if inspect.isawaitable(result):
            return await result
        return result


class RecordingParcelTransport(RecordingTransport):
    """A :class:`RecordingTransport` with the drain's fast path (a parcel transport).

    Each parcel is answered as :meth:`post` answers its reply; a batch of parcels to one
    recipient is recorded reply by reply, and ``batches`` records how many came at once.

    Attributes:
        batches: the size of each call of :meth:`post_parcels`, in order.
    """

    def __init__(self, answer: Answer | AnswerFn = True) -> None:
        super().__init__(answer)
        self.batches: list[int] = []

    async def post_parcels(self, parcels: Sequence[Parcel]) -> list[DeliveryResult]:
        """Post each parcel's reply; one result per parcel, in order."""
        self.batches.append(len(parcels))
        results: list[DeliveryResult] = []
        for parcel in parcels:
            try:
                answer = await self.post(parcel.reply)
            except Exception as exc:  # a transport error fails this post only
                answer = Failed(f"transport error: {type(exc).__name__}")
            results.append(as_result(answer))
        return results
