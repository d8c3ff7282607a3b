"""Cancel hints: a worker hears at once that a job it runs was asked to stop.

``birddog.cancel`` records the cancellation of a running job and, in the same
transaction, sends ``NOTIFY birddog_jobs, 'cancel:<job id>'`` (delivered at commit).
The worker's listening connection already hears that channel; :class:`CancelHints`
routes each such payload to the job's watcher, which then heartbeats at once: the
heartbeat's answer (the database's word, never the hint's) ends the turn. A lost
notification costs only latency: the next regular heartbeat still says it.
"""

from __future__ import annotations

import asyncio
from typing import Final

__all__ = ["CANCEL_HINT_PREFIX", "CancelHints"]

CANCEL_HINT_PREFIX: Final = "cancel:"
"""A ``birddog_jobs`` payload that begins so names a job whose cancellation was recorded."""


class CancelHints:
    """Which running jobs of this process have heard a cancel hint.

    One per worker process: the listener calls :meth:`heard` with every notification it
    gets, and each running job watches its own id with :meth:`watch`.
    """

    def __init__(self) -> None:
        self._watched: dict[str, asyncio.Event] = {}

    def heard(self, channel: str, payload: str) -> None:
        """Take one notification (of any channel); wake the job a cancel hint names.

        Args:
            channel: the notification's channel (unused: the payload says what it is).
            payload: its payload; ``cancel:<job id>`` is a hint for that job.
        """
        del channel
        if not payload.startswith(CANCEL_HINT_PREFIX):
            return
        event = self._watched.get(payload.removeprefix(CANCEL_HINT_PREFIX))
        if event is not None:
            event.set()

    def watch(self, job_id: str) -> asyncio.Event:
        """Hear the cancel hints of ``job_id`` until :meth:`forget`.

        Args:
            job_id: the running job.

        Returns:
            An event set on each hint (the watcher clears it once it looked).
        """
        event = asyncio.Event()
        self._watched[job_id] = event
        return event

    def forget(self, job_id: str, event: asyncio.Event) -> None:
        """Stop hearing ``job_id``'s hints (its turn is over)."""
        if self._watched.get(job_id) is event:
            del self._watched[job_id]

    @property
    def watched(self) -> int:
        """How many running jobs watch for a hint now."""
        return len(self._watched)
