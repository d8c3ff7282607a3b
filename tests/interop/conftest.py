"""Interop fixtures: the acceptance tests' verifying inbox on 127.0.0.1, shared."""

from __future__ import annotations

from tests.acceptance.conftest import inbox

__all__ = ["inbox"]
