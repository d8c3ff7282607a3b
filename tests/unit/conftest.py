"""Fixtures for the unit tests: a mail room on fakes."""

from __future__ import annotations

import pytest

from tests.support import Room


@pytest.fixture
def room() -> Room:
    """A fresh mail room on fakes, with a frozen clock and neutral jitter."""
    return Room()
