"""The drain engine: the one way BirdDog delivers what the outbox owes.

It claims due rows under a lease, posts them, and stores every outcome a claim at a time,
decided by the pure :func:`~birddog.core.delivery.decide_delivery`. Two ways to run it:

- **a page** (:meth:`DeliveryEngine.drain_page`, the spec's ``drainOutbox`` and
  ``MailRoom.drain_outbox``): claim up to ``page_size`` rows in key order after a cursor,
  post them all, wait for every post, store the outcomes; a full page arms a wake for now.
- **continuously** (:meth:`DeliveryEngine.serve`, the daemon): keep up to ``window_size``
  rows in hand, claimed in due order as room frees. Each recipient gets as many posts in
  flight as its adaptive limit allows (:mod:`birddog.core.flow`); claimed rows beyond that
  wait, ready, and start the moment one of that recipient's posts finishes, so a busy
  recipient never waits for a claim. Outcomes are stored as posts finish (lingering
  ``linger_s`` to store them in batches). When nothing more is claimable the engine sleeps
  on the wake board (:class:`~birddog.ports.WakeBoard`): until the earliest claimable row,
  an armed wake, a notification, a post finishing, or its backstop.

Both share one admission (mailbox rows are delivered without a post, rows that cannot be
decoded or sent are buried at once), one place that stores outcomes, one release path
(rows given back untouched) and one wake policy: after storing, the engine arms a wake
for the earliest retry or deferral it wrote (and, for a full page, for now).

Every claimed row is held until its outcome is stored or it is released: at most
``window_size`` rows, so a crash repeats at most that many posts.

The parts, each a module with its own state and tests:

- :mod:`~birddog.engine.window`: :class:`~birddog.engine.window.Window`, which rows are
  held and which may be posted now, per recipient (admit, pump, surplus, skip, hold);
- :mod:`~birddog.engine.poster`: :class:`~birddog.engine.poster.Poster`, one post (send,
  time out, trace, classify) as a task of its own;
- :mod:`~birddog.engine.outcomes`: :class:`~birddog.engine.outcomes.OutcomeStore`, the
  fates known until stored (store, store apart, release, the wake, the
  :class:`DrainReport`);
- :mod:`~birddog.engine.loop`: :class:`DeliveryEngine`, the loop that wires them (claim,
  fill, wait, sleep, close);
- :mod:`~birddog.engine.claims` (what they pass each other) and
  :mod:`~birddog.engine.config` (:class:`EngineConfig`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from birddog.engine.config import PAGE_SIZE, EngineConfig
from birddog.lazy import exports

if TYPE_CHECKING:
    from birddog.engine.loop import DeliveryEngine
    from birddog.engine.outcomes import DrainReport

# The loop is imported when first used: the settings name EngineConfig, and every command
# reads the settings.
__getattr__, __dir__ = exports(
    __name__,
    {"DeliveryEngine": "birddog.engine.loop", "DrainReport": "birddog.engine.outcomes"},
)

__all__ = ["PAGE_SIZE", "DeliveryEngine", "DrainReport", "EngineConfig"]
