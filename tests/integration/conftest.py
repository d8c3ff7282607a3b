"""Fixtures for the integration tests: the job store on a frozen clock."""

from __future__ import annotations

import pytest

from birddog.postgres.jobs import PostgresJobs
from birddog.postgres.pool import Pool
from birddog.testing import FrozenClock
from tests.support import T0


@pytest.fixture
def clock() -> FrozenClock:
    """A clock frozen at 2026-01-01 UTC."""
    return FrozenClock(T0)


@pytest.fixture
def jobs(pg_pool: Pool, clock: FrozenClock) -> PostgresJobs:
    """The job store on this test's database, on the frozen clock."""
    return PostgresJobs(pg_pool, clock=clock)
