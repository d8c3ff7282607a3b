"""Signal handlers: a process installs its own while it runs and gives the previous back."""

from __future__ import annotations

import asyncio
import os
import signal

from birddog.runtime import STOP_SIGNALS, stop_on_signals


async def test_stop_on_signals_sets_its_event_and_restores_the_previous_handlers() -> None:
    """SIGTERM inside sets the stop event; on exit each signal has its old handler again."""
    seen: list[int] = []

    def previous(signum: int, _frame: object) -> None:
        seen.append(signum)

    saved = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        for sig in STOP_SIGNALS:
            signal.signal(sig, previous)
        with stop_on_signals() as stop:
            assert all(signal.getsignal(sig) is not previous for sig in STOP_SIGNALS)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(stop.wait(), timeout=10)
            assert seen == []
        assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == dict.fromkeys(
            STOP_SIGNALS, previous
        )
        os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
