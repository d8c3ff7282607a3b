"""What both sides of the Postgres job store share: the pool, the limits and the clock."""

from __future__ import annotations

from dataclasses import dataclass

from birddog.core.errors import InvalidInput
from birddog.core.lifecycle import Limits
from birddog.core.turns import DEFAULT_KILL_GRACE_S
from birddog.ports import Clock
from birddog.postgres.pool import Pool

__all__ = ["JobStoreSettings"]


@dataclass(frozen=True, slots=True)
class JobStoreSettings:
    """How the job store's claims and operations reach and judge jobs.

    Attributes:
        pool: the asyncpg pool (or one connection).
        clock: the current time.
        limits: the content size and the maximum queued age.
        schedule_wake: arm the drain's wake when a settlement writes replies.
        queue_concurrency: how many jobs of one queue may run at once.
        kill_grace_s: how long after a lease ended its job is recovered (at least 0).

    Raises:
        InvalidInput: ``queue_concurrency`` is below 1.
    """

    pool: Pool
    clock: Clock
    limits: Limits
    schedule_wake: bool = True
    queue_concurrency: int = 1
    kill_grace_s: float = DEFAULT_KILL_GRACE_S

    def __post_init__(self) -> None:
        """Refuse a concurrency below one; a negative grace counts as none."""
        if self.queue_concurrency < 1:
            raise InvalidInput("queue_concurrency must be at least 1", field="queue_concurrency")
        object.__setattr__(self, "kill_grace_s", max(0.0, self.kill_grace_s))
